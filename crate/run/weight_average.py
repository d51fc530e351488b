"""The moving average of a run's weights: the one place that builds it, so that what a card says it reached is
read from the same schedule the run trained with."""

from __future__ import annotations

from typing import Any

import torch
from timm.utils import ModelEmaV3
from torch import nn

__all__ = ["PicklableModelEma", "ema_decay_at", "weight_average"]


class PicklableModelEma(ModelEmaV3):
    """timm's ``ModelEmaV3``, whose random generator for stochastic rounding travels to a spawned process as its
    device and state in bytes: torch cannot rebuild a pickled ``torch.Generator`` there, so Lightning's
    ``ddp_spawn`` lost the process that unpickled the module and waited for it without end."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        generator = state.pop("_sr_generator", None)
        if generator is not None:
            state["_sr_generator_state"] = (str(generator.device), bytes(generator.get_state().numpy()))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        saved = state.pop("_sr_generator_state", None)
        super().__setstate__(state)
        if saved is not None:
            device, generator_state = saved
            self._sr_generator = torch.Generator(device=device)
            self._sr_generator.set_state(torch.frombuffer(bytearray(generator_state), dtype=torch.uint8))


def weight_average(model: nn.Module, cap: float) -> ModelEmaV3:
    """timm's ``ModelEmaV3`` of ``model`` with its warm-up: at optimizer step n the update's decay is
    ``min(cap, 1 - n**(-2/3))``, so a short run averages over far fewer steps than ``1 / (1 - cap)``."""
    return PicklableModelEma(model, decay=cap, use_warmup=True)


def ema_decay_at(cap: float, step: int) -> float:
    """The decay of the moving average's update at optimizer step ``step`` (``--model.ema_decay cap``), read from
    :func:`weight_average`'s own schedule: 0 at the first step (a copy), ``cap`` only from step ``(1 - cap)**-1.5``."""
    return weight_average(nn.Linear(1, 1), cap).get_decay(step)
