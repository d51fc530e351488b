"""Optimizer and schedule of every LightningModule of the zoo, from timm's own pieces.

``timm.optim.create_optimizer_v2`` (any timm optimizer name; weight decay on weight matrices only,
skipping norms, biases and the model's ``no_weight_decay()``; optional layer-wise learning-rate decay)
and timm's ``CosineLRScheduler`` stepped per optimizer update: linear warmup, then cosine decay to
``min_lr_ratio * lr``. Adam and AdamW take torch's fused kernel where the parameters allow it
(:func:`fused_kwargs`). With ``lr_base_size`` set, ``lr`` is the learning rate at that global batch size and
is scaled to the run's (timm's ``--lr-base-size`` / ``--lr-base-scale``): a recipe tuned at batch 128 on a
CPU keeps its meaning at batch 512 on a GPU.
"""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch.callbacks import GradientAccumulationScheduler, StochasticWeightAveraging
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn

__all__ = ["RunCosineSchedule", "TimmOptimization", "fused_kwargs"]

_BETA_OPTIMIZERS = ("adam", "lion", "lamb", "adan", "adopt", "laprop")
_FUSED_OPTIMIZERS = ("adam", "adamw")  # timm names of torch.optim.Adam / AdamW, which have a fused kernel


def fused_kwargs(optimizer: str, params: Any) -> dict[str, bool]:
    """``{"fused": True}`` for torch's Adam/AdamW when every parameter is a floating tensor on the CPU or a
    CUDA device, else ``{}``. The fused kernel is the same update as the default multi-tensor (foreach)
    one, in one pass over each parameter: about 3x faster on CRATE-T's 5.7M parameters on a 2-core CPU
    (``benchmarks/throughput.py`` times the step with it)."""
    if optimizer.lower() not in _FUSED_OPTIMIZERS:
        return {}
    devices = {(p.device.type, p.is_floating_point()) for p in params}
    return {"fused": True} if devices and devices <= {("cpu", True), ("cuda", True)} else {}


class RunCosineSchedule(CosineLRScheduler):
    """timm's ``CosineLRScheduler``, built from the run's settings at every start and never from a checkpoint.

    The rate is a function of those settings and the number of updates done (Lightning's ``global_step``,
    which a resume restores); the scheduler holds no other progress. Restoring the scheduler's stored state
    would also restore the schedule's length, so a resume that raises ``--trainer.max_epochs`` would train its
    added epochs at the floor (``lr_min``) of the shorter schedule, while the run's records name the longer
    one. Built afresh, the schedule spans the run's ``max_epochs``, as timm's ``train.py`` rebuilds its own
    for ``--epochs`` on ``--resume``; a changed length is said when the checkpoint is restored.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        stored = (state_dict.get("warmup_t"), state_dict.get("t_initial"))
        if None not in stored and stored != (self.warmup_t, self.t_initial):
            rank_zero_warn(
                f"the checkpoint's learning-rate schedule spans {sum(stored):,} updates and this run's "
                f"{self.warmup_t + self.t_initial:,} (another --trainer.max_epochs, or another count of batches per "
                "epoch): the schedule is rebuilt over the run's length, the rate at each update is the new cosine's"
            )


class TimmOptimization:
    """``configure_optimizers`` for a LightningModule with ``self.model`` and the hyper-parameters
    ``optimizer``, ``lr``, ``min_lr_ratio``, ``weight_decay``, ``betas``, ``layer_decay``, ``warmup_epochs``.
    Parameters that do not require gradients (frozen ones) are left out of the optimizer."""

    def check_optimization(self) -> None:
        """Refuse settings the optimizer or schedule cannot take, when the module is built (before a run writes
        anything), with the setting's name: ``lr`` > 0, ``min_lr_ratio`` in [0, 1], ``weight_decay`` >= 0,
        ``warmup_epochs`` >= 0, each of ``betas`` in [0, 1), ``layer_decay`` in (0, 1] or None."""
        hp = self.hparams
        refusals = []
        if not (math.isfinite(hp.lr) and hp.lr > 0):
            refusals.append(f"lr must be > 0, got {hp.lr}")
        if not 0 <= hp.min_lr_ratio <= 1:
            refusals.append(f"min_lr_ratio must lie in [0, 1], got {hp.min_lr_ratio}")
        if not hp.weight_decay >= 0:
            refusals.append(f"weight_decay must be >= 0, got {hp.weight_decay}")
        if not hp.warmup_epochs >= 0:
            refusals.append(f"warmup_epochs must be >= 0, got {hp.warmup_epochs}")
        if len(hp.betas) != 2 or not all(0 <= beta < 1 for beta in hp.betas):
            refusals.append(f"betas must be two values in [0, 1), got {tuple(hp.betas)}")
        if hp.layer_decay is not None and not 0 < hp.layer_decay <= 1:
            refusals.append(f"layer_decay must lie in (0, 1] or be None, got {hp.layer_decay}")
        if refusals:
            raise ValueError("; ".join(refusals) + " (--model.KEY VALUE)")

    def scaled_lr(self, say: bool = True) -> float:
        """The peak learning rate of this run: ``lr``, or with ``lr_base_size``, ``lr`` scaled from that global
        batch size to this run's (batch size x processes x accumulated batches), linearly or by the square
        root (``lr_base_scale``)."""
        hp = self.hparams
        base = hp.get("lr_base_size")
        if not base:
            return hp.lr
        trainer = self.trainer
        batch_size = getattr(trainer.datamodule, "batch_size", None)
        if batch_size is None:
            raise ValueError("lr_base_size scales the learning rate by the batch size: train with a DataModule")
        batch = batch_size * trainer.world_size * trainer.accumulate_grad_batches
        ratio = batch / base
        lr = hp.lr * (ratio if hp.get("lr_base_scale", "sqrt") == "linear" else math.sqrt(ratio))
        if say:
            rank_zero_info(f"learning rate {hp.lr:g} at batch {base} is {lr:g} at this run's batch {batch}")
        return lr

    def trained_module(self) -> nn.Module:
        """What the optimizer updates: ``self.model`` (self-distillation: the student and its head)."""
        return self.model

    def weight_average_advice(self) -> str:
        """How this module averages its weights, in words, for the refusal of Lightning's own averaging."""
        return "average with --model.ema_decay instead: a moving average that validation, checkpoints and export read"

    def _refuse_callbacks_changing_updates(self) -> None:
        """Lightning's StochasticWeightAveraging puts its average in a model without BatchNorm only when training
        ends, after the last validation and checkpoint: every checkpoint, its figures and an export of it would
        hold the weights without the average, without a word. Its GradientAccumulationScheduler changes the
        batches of an update between epochs, while the schedule is planned over the updates of the trainer's
        ``accumulate_grad_batches`` (the rate stopped short of its floor: 58 of 92 planned updates), and the
        run's records and resume count steps of one size. Both refused, each with this module's own way."""
        callbacks = self.trainer.callbacks
        if any(isinstance(callback, StochasticWeightAveraging) for callback in callbacks):
            raise MisconfigurationException(
                "StochasticWeightAveraging puts its average in the model only after the last validation and "
                f"checkpoint, so neither the run's figures nor its files would hold it; {self.weight_average_advice()}"
            )
        if any(isinstance(callback, GradientAccumulationScheduler) for callback in callbacks):
            raise MisconfigurationException(
                "GradientAccumulationScheduler changes the batches of an update between epochs, while the learning "
                "rate's schedule, the recorded update batch and a resume count updates of one size; accumulate a "
                "fixed number of batches with --trainer.accumulate_grad_batches N"
            )

    def configure_optimizers(self) -> dict[str, Any]:
        self._refuse_callbacks_changing_updates()
        hp = self.hparams
        lr = self.scaled_lr()
        extra = {"betas": tuple(hp.betas)} if any(name in hp.optimizer.lower() for name in _BETA_OPTIMIZERS) else {}
        trained = self.trained_module()
        extra.update(fused_kwargs(hp.optimizer, (p for p in trained.parameters() if p.requires_grad)))
        optimizer = create_optimizer_v2(
            trained, opt=hp.optimizer, lr=lr, weight_decay=hp.weight_decay, layer_decay=hp.layer_decay, **extra
        )
        total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        self._schedule_built_for = (lr, total_steps)
        warmup_steps = min(int(round(hp.warmup_epochs * self._updates_per_epoch(total_steps))), total_steps - 1)
        if hp.warmup_epochs > 0 and total_steps > 1 and warmup_steps == total_steps - 1:
            rank_zero_warn(
                f"--model.warmup_epochs {hp.warmup_epochs:g} is as long as this run ({total_steps:,} steps): the "
                "learning rate rises over all of them but the last and never decays; give fewer warm-up epochs "
                "than the run trains"
            )
        scheduler = RunCosineSchedule(
            optimizer,
            t_initial=max(1, total_steps - warmup_steps),
            lr_min=lr * hp.min_lr_ratio,
            warmup_t=warmup_steps,
            warmup_lr_init=lr / max(1, warmup_steps),
            warmup_prefix=True,
            t_in_epochs=False,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _updates_per_epoch(self, total_steps: int) -> float:
        """Optimizer updates in one epoch of this run's data, which ``warmup_epochs`` counts in. A run cut short by
        ``--trainer.max_steps`` keeps the epoch's length (its warm-up shrank with the run's share of
        ``max_epochs``); without a finite epoch (an iterable dataset, ``max_epochs`` -1) the run's updates are
        spread over its epochs."""
        trainer = self.trainer
        batches = trainer.num_training_batches  # known here: estimated_stepping_batches loaded the training data
        if math.isfinite(batches) and batches > 0:
            return math.ceil(batches / trainer.accumulate_grad_batches)
        return total_steps / (trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else 1)

    def applied_lr(self) -> float:
        """The learning rate the schedule applies now at full scale: the largest of the parameter groups'
        (under ``layer_decay`` the first groups get the schedule's value times their ``lr_scale``, as
        little as ``layer_decay ** depth``; the last layers and the head get it unscaled)."""
        return max(group["lr"] for group in self.trainer.optimizers[0].param_groups)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """timm schedulers are stepped by the number of optimizer updates done; another (the exponential ramp
        Lightning's LearningRateFinder puts in the schedule's place for its trial) as Lightning steps it."""
        if isinstance(scheduler, CosineLRScheduler):
            scheduler.step_update(num_updates=self.global_step)
        else:
            super().lr_scheduler_step(scheduler, metric)  # type: ignore[misc]

    def on_train_start(self) -> None:
        """The rate of the first update of this fit, from the run's own schedule: a resume restores the optimizer
        with the rate the checkpoint's schedule set last, which another ``max_epochs`` changes (the same rate
        otherwise, so a resume with the run's settings is unchanged). Where Lightning's LearningRateFinder or
        BatchSizeFinder changed the rate or the run's steps after the schedule was built (their ``on_fit_start``),
        the optimizer and its schedule are built again for what the run now trains."""
        super().on_train_start()
        trainer = self.trainer
        built_for = getattr(self, "_schedule_built_for", None)
        ours = any(isinstance(config.scheduler, RunCosineSchedule) for config in trainer.lr_scheduler_configs)
        if self.global_step == 0 and built_for is not None and ours:  # not inside a finder's own trial run
            if built_for != (self.scaled_lr(say=False), max(1, int(trainer.estimated_stepping_batches))):
                trainer.strategy.setup_optimizers(trainer)
        for config in self.trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, CosineLRScheduler):
                config.scheduler.step_update(num_updates=self.global_step)
