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


def _merge(metrics: dict[str, Metric], states: dict[str, dict[str, torch.Tensor]]) -> None:
    """Add a checkpoint's sums to the metrics of the same names, on each metric's device."""
    for name, state in states.items():
        if name in metrics:
            device = next(iter(metrics[name].metric_state.values())).device
            metrics[name].merge_state({key: value.to(device) for key, value in state.items()})


class EpochFiguresOnResume(Callback):
    """A run resumed k batches into an epoch reports that epoch's ``train/acc`` and ``train/loss_epoch`` over all
    of its batches, as the uninterrupted run does, not over the batches after the resume only.

    These figures are torchmetrics objects that the module updates once a step and Lightning computes at the
    epoch's end; their states are sums, and no checkpoint holds them. A checkpoint written in the middle of an
    epoch (SIGTERM, a save every N steps) carries them where they count exactly the batches the checkpoint counts
    as done, and after the resumed run's first batch they are added back (a sum of sums, so exact). Nothing is
    done at a training step: the check at the save is each metric's count of updates.

    A checkpoint written while the fit validates (an interrupt after the epoch's last training batch) carries
    the whole epoch's sums, with the module attribute of each metric: the resumed run validates that epoch again
    and runs no training step in it, so nothing would hand Lightning the metrics; at the epoch's end they are
    restored and logged instead.

    No sums are carried where they would be wrong: with several processes (each holds its own share's sums and
    one process writes the checkpoint), or for a Ctrl-C inside a step after its update (the resumed run repeats
    that batch). There, and for a checkpoint written before the sums were kept, the resume says that the epoch's
    training figures cover the batches after it only.
    """

    def __init__(self) -> None:
        self._trainer: L.Trainer | None = None
        self._restored = 0  # batches of the current epoch whose sums were added back from a checkpoint
        self._pending: dict[str, Any] | None = None  # a checkpoint's sums, added after the first resumed batch

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restored = 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        if pending["epoch"] != trainer.current_epoch or pending.get("whole"):
            return
        _merge(_held_metrics(pl_module), pending["states"])
        self._restored = pending["batches"]

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pending = self._pending
        if pending is None or not pending.get("whole") or pending["epoch"] != trainer.current_epoch:
            return
        self._pending = None  # resumed in this epoch's validation: no step ran here, so log the restored sums
        metrics = {}
        for name, attribute in pending["modules"].items():
            metric = pl_module.get_submodule(attribute)
            if isinstance(metric, Metric) and metric.update_count == 0:
                metrics[name] = metric
        _merge(metrics, pending["states"])
        for name, metric in metrics.items():
            pl_module.log(f"train/{name}", metric.compute(), on_step=False, on_epoch=True)
            metric.reset()

    def state_dict(self) -> dict[str, Any]:
        trainer = self._trainer
        if trainer is None or trainer.world_size > 1 or trainer.lightning_module is None:
            return {}
        progress = trainer.fit_loop.epoch_loop.batch_progress
        done = progress.current.processed
        metrics = _held_metrics(trainer.lightning_module)
        whole = bool(progress.is_last_batch)
        if done == 0 or not metrics or (whole and not (trainer.validating and trainer.state.fn == "fit")):
            return {}  # none run yet, or the epoch's end outside validation (its figures are logged already)
        if any(metric.update_count != done - self._restored for metric in metrics.values()):
            return {}  # a step interrupted after its update, or sums not carried into this epoch: none is exact
        states = {}
        for name, metric in metrics.items():
            state = metric.metric_state
            if not all(isinstance(value, torch.Tensor) for value in state.values()):
                return {}  # list states (concatenated samples) are not carried
            states[name] = {key: value.detach().cpu().clone() for key, value in state.items()}
        held = {"epoch": trainer.current_epoch, "batches": done, "states": states}
        if whole:  # the attribute of each metric: in the resumed run no step names them
            attributes = {id(module): attribute for attribute, module in trainer.lightning_module.named_modules()}
            held.update(whole=True, modules={name: attributes[id(metric)] for name, metric in metrics.items()})
        return held

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        progress = (checkpoint.get("loops") or {}).get("fit_loop", {}).get("epoch_loop.batch_progress") or {}
        done = (progress.get("current") or {}).get("processed", 0)
        if done and not progress.get("is_last_batch") and not (checkpoint.get("callbacks") or {}).get(self.state_key):
            rank_zero_warn(
                f"resuming {done} batches into epoch {checkpoint.get('epoch', '?')}: the checkpoint holds no sums of "
                "that epoch's training metrics (several processes, a Ctrl-C inside a step, or a file from before "
                "they were kept), so its train/acc and train/loss_epoch cover the batches after the resume only"
            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict or None
