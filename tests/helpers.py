"""Test helpers: callbacks that inject faults into a train.py run (given to it through a YAML config), and
stand-in data."""

from __future__ import annotations

import os
import signal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException


class SignalAtStep(Callback):
    """Send this process ``signal_name`` after optimizer step ``step``, as a cluster's scheduler would."""

    def __init__(self, step: int, signal_name: str = "SIGTERM") -> None:
        self.step = step
        self.signum = getattr(signal, signal_name)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class CtrlCBeforeBackward(Callback):
    """Ctrl-C inside the training step after optimizer step ``step``: after the step's forward pass (and its metric
    updates), before its backward pass, as a Ctrl-C typed during a step lands."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


class SIGTERMInProcess(Callback):
    """Lightning's SIGTERMException at the start of training, as process ``rank`` of a distributed run meets it
    after a scheduler's SIGTERM (no signal is sent: the test's own process receives none)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_only.rank = self.rank
        raise SIGTERMException


class SignalInValidation(Callback):
    """Send this process ``signal_name`` after batch ``batch`` of the validation that ends training epoch
    ``epoch`` (not the sanity check): an interrupt that lands while a fit validates."""

    def __init__(self, epoch: int, batch: int = 0, signal_name: str = "SIGTERM") -> None:
        self.epoch, self.batch = epoch, batch
        self.signum = getattr(signal, signal_name)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int, *args
    ) -> None:
        if not trainer.sanity_checking and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), self.signum)


class PoisonWeightsAtStep(Callback):
    """Put a NaN into the weights after optimizer step ``step``, as a diverging update would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).view(-1)[0] = float("nan")


def cifar_arrays(seed: int, train_size: int, test_size: int) -> dict[bool, object]:
    """Random stand-ins for torchvision's CIFAR10 objects (``data`` (N, 32, 32, 3) uint8, ``targets``,
    ``classes``), keyed by ``train`` as ``CIFARDataModule._open`` is."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    return {
        train: SimpleNamespace(
            data=rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8),
            targets=list(rng.integers(0, 10, size=n)),
            classes=[f"c{i}" for i in range(10)],
        )
        for train, n in ((True, train_size), (False, test_size))
    }


def quiet_trainer(**kwargs) -> L.Trainer:
    """A CPU trainer that writes and prints nothing of its own: no logger, checkpoints, progress bar or summary."""
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**{**quiet, **kwargs})
