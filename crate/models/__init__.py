"""timm-registered architectures of the zoo, one family per file; importing registers them."""

from .crate import CRATE, CrateBlock
from .vit import ViTTwin

__all__ = ["CRATE", "CrateBlock", "ViTTwin"]
