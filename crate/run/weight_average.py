"""The moving average of a run's weights: the one place that builds it, so that what a card says it reached is
read from the same schedule the run trained with."""

from __future__ import annotations

from timm.utils import ModelEmaV3
from torch import nn

__all__ = ["ema_decay_at", "weight_average"]


def weight_average(model: nn.Module, cap: float) -> ModelEmaV3:
    """timm's ``ModelEmaV3`` of ``model`` with its warm-up: at optimizer step n the update's decay is
    ``min(cap, 1 - n**(-2/3))``, so a short run averages over far fewer steps than ``1 / (1 - cap)``."""
    return ModelEmaV3(model, decay=cap, use_warmup=True)


def ema_decay_at(cap: float, step: int) -> float:
    """The decay of the moving average's update at optimizer step ``step`` (``--model.ema_decay cap``), read from
    :func:`weight_average`'s own schedule: 0 at the first step (a copy), ``cap`` only from step ``(1 - cap)**-1.5``."""
    return weight_average(nn.Linear(1, 1), cap).get_decay(step)
