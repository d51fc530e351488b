"""Callbacks that keep a run's work when it fails: a guard against non-finite losses and weights, and a
checkpoint written when the run is interrupted (Ctrl-C or SIGTERM), which ``--ckpt_path last`` resumes."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

__all__ = [
    "InterruptCheckpoint",
    "NonFiniteError",
    "NonFiniteGuard",
    "checkpoint_dir",
    "link_last",
    "saves_checkpoints",
]


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or infinite loss or weights."""


def _saves(callback: Any) -> bool:
    return isinstance(callback, ModelCheckpoint) and bool(callback.save_top_k != 0 or callback.save_last)


def saves_checkpoints(trainer: L.Trainer) -> bool:
    """Whether one of the run's ModelCheckpoint callbacks writes a file: none does with
    ``--trainer.enable_checkpointing false`` (they keep no top-k file and no ``last.ckpt``)."""
    return any(_saves(callback) for callback in trainer.checkpoint_callbacks)


def link_last(trainer: L.Trainer, path: Path) -> None:
    """Point ``last.ckpt`` beside ``path`` at it (a copy on file systems without links), on rank zero."""
    if not trainer.is_global_zero:
        return
    last = path.parent / "last.ckpt"
    if last.is_symlink() or last.exists():
        last.unlink()
    try:
        os.symlink(path.name, last)
    except OSError:  # file systems without links
        last.write_bytes(path.read_bytes())


def checkpoint_dir(trainer: L.Trainer) -> Path | None:
    """The folder the run's ModelCheckpoint callbacks write to; None where none of them writes a file."""
    for callback in trainer.checkpoint_callbacks:
        if _saves(callback) and callback.dirpath:
            return Path(callback.dirpath)
    return None


class NonFiniteGuard(Callback):
    """Stop training when the loss or the weights become NaN or infinite, naming the first bad step.

    Each step only records, on the device, the first step whose loss is not finite (a few tensor operations
    and no read-back, so the step never waits for the device and stays capturable by CUDA graphs). The record
    and the weights are read back every ``check_every_n_steps`` steps, before validation, at the end of each
    training epoch and before any checkpoint is written: a checkpoint never holds broken weights, and the
    run stops with a message naming the step and the checkpoints kept. Weights that turn non-finite make the
    next step's loss non-finite, so the loss record finds the step they broke at.

    Args:
        check_weights: also check the weights (one pass over them) at each read-back.
        check_every_n_steps: how often the record is read back while training (1: every step, as before;
            each read waits for the device to finish the step).
    """

    def __init__(self, check_weights: bool = True, check_every_n_steps: int = 50) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}")
        self.check_weights = check_weights
        self.check_every_n_steps = check_every_n_steps
        self._first_bad: torch.Tensor | None = None  # global step of the first non-finite loss, inf: none

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            if self._first_bad is None or self._first_bad.device != loss.device:
                self._first_bad = torch.full((), math.inf, dtype=torch.float64, device=loss.device)
            finite = loss.detach() * 0 == 0  # x * 0 is NaN exactly when x is NaN or infinite
            # this step where the loss is not finite (0 * inf is NaN), infinity where it is: a running minimum
            step_if_bad = (finite * math.inf).nan_to_num(nan=trainer.global_step, posinf=math.inf)
            self._first_bad = torch.minimum(self._first_bad, step_if_bad)
        if trainer.global_step % self.check_every_n_steps == 0:
            self.check(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer, pl_module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.training or trainer.state.fn == "fit":
            self.check(trainer, pl_module)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self.check(trainer, pl_module)

    def check(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Read the record back (waits for the device) and raise :class:`NonFiniteError` if it holds a step."""
        problem, step = None, trainer.global_step
        first_bad = float(self._first_bad) if self._first_bad is not None else math.inf
        if first_bad < math.inf:
            step, problem = int(first_bad), "the loss is NaN or infinite"
        elif self.check_weights and trainer.state.fn == "fit":
            weights = [p.detach() for p in pl_module.parameters()]
            if weights and not torch.isfinite(torch.stack(torch._foreach_norm(weights))).all():
                problem = "the weights hold NaN or infinite values after the optimizer step"
        if problem is None:
            return
        folder = checkpoint_dir(trainer)
        kept = sorted(folder.glob("*.ckpt")) if folder and folder.is_dir() else []
        noticed = "" if step == trainer.global_step else f"; noticed at step {trainer.global_step}"
        raise NonFiniteError(
            f"training stopped at step {step} (epoch {trainer.current_epoch}{noticed}): "
            f"{problem}. The checkpoints written before it are kept: {[str(p) for p in kept] or 'none yet'}. "
            "Lower the learning rate, clip gradients (--trainer.gradient_clip_val 1.0) or prefer bf16 to fp16."
        )


class InterruptCheckpoint(Callback):
    """On Ctrl-C or SIGTERM, write ``interrupted-epochE-stepS.ckpt`` and point ``last.ckpt`` at it.

    Not Lightning's ``OnExceptionCheckpoint``, which writes on every exception (a ``NonFiniteError`` would leave
    the broken weights as the newest checkpoint) to one fixed name, removed when a run ends normally; this one
    writes only on an interrupt, after the first step, and links ``last.ckpt`` so ``--ckpt_path last`` resumes.

    An interrupt while a fit validates (once an epoch: after its last training batch) is restored by Lightning
    as a checkpoint written after validation, and the run goes on to the next epoch: that epoch would have no val
    figure, and the best checkpoint would never see it (Lightning-AI/pytorch-lightning#20288). The checkpoint
    written here records the validation as begun and not one batch of it done, so the resumed run validates
    that epoch again over the whole val split before it trains on."""

    def __init__(self) -> None:
        self._while_validating = False

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            return
        if trainer.global_step == 0 or trainer.fast_dev_run:  # fast_dev_run: no checkpoints
            return
        folder = checkpoint_dir(trainer)
        if folder is None:  # the user turned checkpointing off: no file against their word
            rank_zero_info(f"interrupted at step {trainer.global_step}: no checkpoint written (checkpointing is off)")
            return
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"interrupted-epoch{trainer.current_epoch:03d}-step{trainer.global_step:06d}.ckpt"
        self._while_validating = trainer.validating and trainer.state.fn == "fit" and not trainer.sanity_checking
        try:
            trainer.save_checkpoint(path, weights_only=False)  # a full training state: resumable
        finally:
            self._while_validating = False
        link_last(trainer, path)
        rank_zero_info(f"interrupted: wrote {path}; resume with --ckpt_path last")

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if not self._while_validating:
            return
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.val_loop.batch_progress")
        if progress is None:  # a Lightning whose checkpoint keeps its loops elsewhere: leave it as written
            return
        # Lightning reads "started one batch more than it processed" as a restart mid-validation, and the
        # current counters at zero make that validation start again at its first batch
        progress["total"] = {"ready": 1, "started": 1, "processed": 0, "completed": 0}
        progress["current"] = {"ready": 0, "started": 0, "processed": 0, "completed": 0}
        progress["is_last_batch"] = False
