"""The latest-state checkpoint holds the state a fit ended in, whatever its saving interval.

Lightning's ``ModelCheckpoint`` takes one trigger: with ``every_n_train_steps`` N it saves every N steps and no
longer at each epoch's end, so a run whose step count is no multiple of N ended with its last steps in no file:
``last.ckpt`` held an earlier state, an export of it other weights than the run's, and ``--ckpt_path last`` trained
those steps again."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from .fault_tolerance import link_last

__all__ = ["FinalStateCheckpoint"]


def _keeps_latest_state(callback: object) -> bool:
    """A checkpoint callback of the latest state: no monitor, and it keeps files."""
    return isinstance(callback, ModelCheckpoint) and callback.monitor is None and callback.save_top_k != 0


def _replaceable(trainer: L.Trainer, previous: Path, path: Path) -> bool:
    """Whether the new file replaces ``previous``: in its folder, and not the file the fit resumed from (kept,
    as Lightning keeps it)."""
    resumed_from = Path(trainer.ckpt_path).resolve() if trainer.ckpt_path else None
    return previous.parent == path.parent and previous.resolve() != resumed_from


class FinalStateCheckpoint(Callback):
    """When a fit ends, each latest-state checkpoint callback (no monitor) that has not saved the final step saves
    it, under its own file name, in place of its previous file where it keeps one, and ``last.ckpt`` links it."""

    def __init__(self) -> None:
        self._epoch: int | None = None  # the epoch the fit's last training epoch ran as (Lightning counts on after)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch = None  # a later fit of the same trainer records its own

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch = trainer.current_epoch

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._epoch is None or trainer.fast_dev_run or trainer.global_step == 0:
            return
        metrics = {
            **trainer.callback_metrics,
            "epoch": torch.tensor(self._epoch),
            "step": torch.tensor(trainer.global_step),
        }
        for callback in [c for c in trainer.checkpoint_callbacks if _keeps_latest_state(c)]:
            path = callback.format_checkpoint_name(metrics)
            if not callback.dirpath or path == callback.best_model_path:  # saved at the final step already
                continue
            previous, callback.best_model_path = callback.best_model_path, path  # recorded in the file it writes
            trainer.save_checkpoint(path, callback.save_weights_only)
            if callback.save_top_k == 1 and previous and _replaceable(trainer, Path(previous), Path(path)):
                trainer.strategy.remove_checkpoint(previous)
            if callback.save_last:
                link_last(trainer, Path(path))
