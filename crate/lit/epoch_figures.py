"""Keep an epoch's training figures whole when a run resumes in the middle of that epoch."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torchmetrics import Metric

__all__ = ["EpochFiguresOnResume"]


def _held_metrics(pl_module: L.LightningModule) -> dict[str, Metric]:
    """The epoch metrics the module handed to Lightning this epoch (``StepLogging.train_epoch_metrics``)."""
    return dict(getattr(pl_module, "train_epoch_metrics", None) or {})


class EpochFiguresOnResume(Callback):
    """A run resumed k batches into an epoch reports that epoch's ``train/acc`` and ``train/loss_epoch`` over all
    of its batches, as the uninterrupted run does, not over the batches after the resume only.

    These figures are torchmetrics objects that the module updates at every step and Lightning computes at the
    epoch's end; their states are sums, and no checkpoint holds them. This callback copies them after each
    training batch (a few scalars), and a checkpoint written in the middle of an epoch (an interrupt, a save every
    N steps) carries the copy made after the last batch it counts as done. After the resumed run's first batch,
    the copy is added to the metrics (a sum of sums, so exact).

    With several processes, each holds the states of its own share and a checkpoint is written from one of them,
    so no copy is kept: there, and for a checkpoint that holds none, the resume says that the epoch's training
    figures cover the batches after it only.
    """

    def __init__(self) -> None:
        self._trainer: L.Trainer | None = None
        self._copy: dict[str, Any] | None = None  # {"epoch", "batches", "states"} after the last finished batch
        self._pending: dict[str, Any] | None = None  # a checkpoint's copy, added after the first resumed batch

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        metrics = _held_metrics(pl_module)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if pending["epoch"] == trainer.current_epoch:
                for name, states in pending["states"].items():
                    if name in metrics:
                        device = next(iter(metrics[name].metric_state.values())).device
                        metrics[name].merge_state({key: value.to(device) for key, value in states.items()})
        if trainer.world_size > 1:
            return
        states = {}
        for name, metric in metrics.items():
            state = metric.metric_state
            if not all(isinstance(value, torch.Tensor) for value in state.values()):
                return  # list states (concatenated samples) are not copied: no copy rather than a partial one
            states[name] = {key: value.detach().clone() for key, value in state.items()}
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        self._copy = {"epoch": trainer.current_epoch, "batches": done, "states": states}

    def state_dict(self) -> dict[str, Any]:
        trainer, copy = self._trainer, self._copy
        if trainer is None or copy is None or trainer.world_size > 1:
            return {}
        progress = trainer.fit_loop.epoch_loop.batch_progress
        mid_epoch = not progress.is_last_batch and progress.current.processed > 0
        if not mid_epoch or copy["epoch"] != trainer.current_epoch or copy["batches"] != progress.current.processed:
            return {}
        states = {name: {key: value.cpu() for key, value in held.items()} for name, held in copy["states"].items()}
        return {**copy, "states": states}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        progress = (checkpoint.get("loops") or {}).get("fit_loop", {}).get("epoch_loop.batch_progress") or {}
        done = (progress.get("current") or {}).get("processed", 0)
        if done and not progress.get("is_last_batch") and not (checkpoint.get("callbacks") or {}).get(self.state_key):
            rank_zero_warn(
                f"resuming {done} batches into epoch {checkpoint.get('epoch', '?')}: the checkpoint holds no copy of "
                "that epoch's training metrics (several processes, or a file from before they were kept), so its "
                "train/acc and train/loss_epoch cover the batches after the resume only"
            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict or None
