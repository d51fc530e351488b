"""Wall time of a fit in the logs: per epoch, and in all up to each validation (for time to accuracy)."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

__all__ = ["WallClock"]

# each process times itself; the run's wall time is its slowest process's
_SLOWEST: dict[str, Any] = {"on_epoch": True, "sync_dist": True, "reduce_fx": "max"}


class WallClock(Callback):
    """Logs ``time/epoch_s``, the wall seconds of each training epoch (its validation included), ``time/val_s``,
    the wall seconds of each validation pass within a fit, and at each validation ``time/elapsed_s``, the wall
    seconds of the fit so far; on several processes, the slowest one's. A checkpoint carries the elapsed time,
    and the seconds of the epoch it was written in, so a resumed run counts on from them (the time between the
    interruption and the resume is not counted): an epoch the run resumed into, mid-epoch or in its validation,
    logs its whole time. A checkpoint from before the epoch's seconds were carried leaves that epoch's time out.
    A module's own validation-epoch-end work runs after the callbacks' (Lightning's order): SimDINO's k-NN is
    counted in ``time/epoch_s`` and in the next validation's ``time/elapsed_s``, not in ``time/val_s``.

    Not Lightning's ``Timer``: it logs nothing, and a ``Timer`` among the callbacks makes the Trainer ignore
    ``max_time`` (Lightning 2.x's callback connector), which the time-boxed runs rely on."""

    clock = staticmethod(time.perf_counter)  # seconds; a test sets its own on the instance

    def __init__(self) -> None:
        self.carried = 0.0
        self.carried_epoch: float | None = None  # seconds of the epoch the loaded checkpoint was written in
        self._fit_start: float | None = None
        self._epoch_start: float | None = None
        self._val_start: float | None = None

    def elapsed(self) -> float:
        running = self.clock() - self._fit_start if self._fit_start is not None else 0.0
        return self.carried + running

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_start = self.clock()
        loop = trainer.fit_loop
        resumed_into_epoch = loop.restarted_mid_epoch or loop.restarted_on_epoch_end  # no epoch-start hook runs
        if resumed_into_epoch and self.carried_epoch is not None:
            self._epoch_start = self._fit_start - self.carried_epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = self.clock()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._epoch_start is not None:
            pl_module.log("time/epoch_s", self.clock() - self._epoch_start, **_SLOWEST)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = self.clock()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            if self._val_start is not None:
                pl_module.log("time/val_s", self.clock() - self._val_start, **_SLOWEST)
            pl_module.log("time/elapsed_s", self.elapsed(), **_SLOWEST)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"elapsed_s": self.elapsed()}
        if self._epoch_start is not None:
            state["epoch_elapsed_s"] = self.clock() - self._epoch_start
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.carried = float(state_dict.get("elapsed_s", 0.0))
        epoch = state_dict.get("epoch_elapsed_s")
        self.carried_epoch = float(epoch) if epoch is not None else None
