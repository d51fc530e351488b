"""FSDP with the transformer block as the unit of sharding, for the zoo and timm's ViTs."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import FSDPStrategy
from timm.models.vision_transformer import Block as ViTBlock

from crate.models import CrateAlphaBlock, CrateBlock

__all__ = ["BLOCK_CLASSES", "BlockFSDPStrategy"]

BLOCK_CLASSES = {CrateBlock, CrateAlphaBlock, ViTBlock}


class BlockFSDPStrategy(FSDPStrategy):
    """``FSDPStrategy`` that wraps (and, when asked, checkpoints activations of) every transformer block.

    Args:
        activation_checkpointing: recompute each block's activations in the backward pass.
        **kwargs: any other argument of Lightning's ``FSDPStrategy`` (e.g. ``sharding_strategy``).
    """

    def __init__(self, activation_checkpointing: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("auto_wrap_policy", BLOCK_CLASSES)
        if activation_checkpointing:
            kwargs.setdefault("activation_checkpointing_policy", BLOCK_CLASSES)
        super().__init__(**kwargs)
