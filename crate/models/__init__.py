"""timm-registered architectures of the zoo, one family per file; importing registers them."""

from .checkpoint import Checkpoint, read_checkpoint
from .convert import CheckpointError, checkpoint_filter_fn
from .crate import CRATE, CrateBlock
from .crate_alpha import CrateAlphaBlock
from .vit import ViTTwin

__all__ = [
    "CRATE",
    "Checkpoint",
    "CheckpointError",
    "CrateAlphaBlock",
    "CrateBlock",
    "ViTTwin",
    "checkpoint_filter_fn",
    "read_checkpoint",
]
