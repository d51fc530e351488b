"""How the zoo's LightningModules log a training step without making it wait for the device."""

from __future__ import annotations

import lightning as L
import torch
from torchmetrics import MeanMetric, Metric

__all__ = ["StepLogging", "epoch_loss_metric", "logs_this_step"]


def logs_this_step(trainer: L.Trainer) -> bool:
    """Whether the loggers write the current training step: every ``log_every_n_steps`` optimizer steps and at
    the last one (Lightning's own rule, read from the trainer's public state)."""
    return (trainer.global_step + 1) % trainer.log_every_n_steps == 0 or trainer.should_stop


def epoch_loss_metric() -> MeanMetric:
    """The mean of an epoch's step losses, kept on the device: no NaN check (it reads the value back each step;
    a NaN stops the run elsewhere)."""
    return MeanMetric(nan_strategy="disable")


class StepLogging:
    """Mixin of the zoo's LightningModules (with ``applied_lr`` from :class:`TimmOptimization`).

    ``train/loss_epoch`` is the mean of the epoch's step losses, summed on the device at every step and read
    once an epoch (``train_loss_mean``, a ``MeanMetric`` without its per-step NaN check, which would wait for
    the device). ``train/loss`` and ``train/lr`` are step values that loggers write every ``log_every_n_steps``
    steps, so they are logged on those steps only (and at every step when a progress bar shows the loss): Lightning
    converts progress-bar values to Python numbers after every step it sees them, which waits for the
    device, and each ``self.log`` call costs it about 0.3 ms of Python, what a small model's whole step
    costs on a GPU. Epoch metrics (torchmetrics objects that the module updates itself) are handed to
    Lightning once an epoch, at its first step run (after a mid-epoch resume, the first step after it):
    Lightning keeps the object and computes and resets it at the epoch's end, so logging it again at every
    step would only repeat the bookkeeping. The batch size is given, so Lightning does not search the batch
    for it. ``train_epoch_metrics`` names them for :class:`~crate.lit.epoch_figures.EpochFiguresOnResume`, which
    keeps them whole across a resume in the middle of an epoch.
    """

    _epoch_metrics_logged: tuple[int, int] | None = None  # (trainer, epoch) whose metrics Lightning holds
    train_loss_mean: MeanMetric
    train_epoch_metrics: dict[str, Metric] | None = None  # those metrics by name (the part after ``train/``)

    def log_training_step(self, loss: torch.Tensor, batch_size: int, **epoch_metrics: Metric) -> None:
        """Log a training step: the loss and learning rate when written, ``train/<name>`` epoch metrics."""
        trainer = self.trainer
        bar = trainer.progress_bar_callback is not None
        if bar or logs_this_step(trainer):
            self.log("train/loss", loss, prog_bar=bar, batch_size=batch_size)
            self.log("train/lr", self.applied_lr(), on_step=True, on_epoch=False, batch_size=batch_size)
        self.train_loss_mean.update(loss.detach())
        epoch = (id(trainer), trainer.current_epoch)
        if self._epoch_metrics_logged != epoch:
            self.log("train/loss_epoch", self.train_loss_mean, on_step=False, on_epoch=True, batch_size=batch_size)
            for name, metric in epoch_metrics.items():
                self.log(f"train/{name}", metric, on_step=False, on_epoch=True, batch_size=batch_size)
            self._epoch_metrics_logged = epoch
            self.train_epoch_metrics = {"loss_epoch": self.train_loss_mean, **epoch_metrics}
