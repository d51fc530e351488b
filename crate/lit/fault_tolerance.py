"""Callbacks that keep a run's work when it fails: a guard against non-finite losses and weights, and a
checkpoint written when the run is interrupted (Ctrl-C or SIGTERM), which ``--ckpt_path last`` resumes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

__all__ = ["InterruptCheckpoint", "NonFiniteError", "NonFiniteGuard", "checkpoint_dir"]


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or infinite loss or weights."""


def checkpoint_dir(trainer: L.Trainer) -> Path | None:
    """The folder the run's ModelCheckpoint callbacks write to."""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return Path(callback.dirpath)
    return None


class NonFiniteGuard(Callback):
    """Stop training at the first step whose loss or updated weights are NaN or infinite.

    It runs before the checkpoint callbacks of the same step (Lightning runs those last), so no
    checkpoint holds the broken weights: the run stops with a message naming the step and the last
    good checkpoint, which stays on disk.
    """

    def __init__(self, check_weights: bool = True) -> None:
        self.check_weights = check_weights

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        problem = None
        if loss is not None and not torch.isfinite(loss.detach()).all():
            problem = f"the loss is {float(loss.detach()):g}"
        elif self.check_weights:
            sums = torch.stack([p.detach().sum() for p in pl_module.parameters()])
            if not torch.isfinite(sums).all():
                problem = "the weights hold NaN or infinite values after the optimizer step"
        if problem is None:
            return
        folder = checkpoint_dir(trainer)
        kept = sorted(folder.glob("*.ckpt")) if folder and folder.is_dir() else []
        raise NonFiniteError(
            f"training stopped at step {trainer.global_step} (epoch {trainer.current_epoch}, batch {batch_idx}): "
            f"{problem}. The checkpoints written before it are kept: {[str(p) for p in kept] or 'none yet'}. "
            "Lower the learning rate, clip gradients (--trainer.gradient_clip_val 1.0) or prefer bf16 to fp16."
        )


class InterruptCheckpoint(Callback):
    """On Ctrl-C or SIGTERM, write ``interrupted-epochE-stepS.ckpt`` and point ``last.ckpt`` at it."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            return
        folder = checkpoint_dir(trainer)
        if folder is None or trainer.global_step == 0:
            return
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"interrupted-epoch{trainer.current_epoch:03d}-step{trainer.global_step:06d}.ckpt"
        trainer.save_checkpoint(path)
        if trainer.is_global_zero:
            last = folder / "last.ckpt"
            if last.is_symlink() or last.exists():
                last.unlink()
            try:
                os.symlink(path.name, last)
            except OSError:  # file systems without links
                last.write_bytes(path.read_bytes())
            rank_zero_info(f"interrupted: wrote {path}; resume with --ckpt_path last")
