"""Pure torch building blocks of the zoo."""

from .ista import ISTA
from .mssa import MSSA, subspace_attention
from .patch_embed import PatchEmbed, check_image_input

__all__ = ["ISTA", "MSSA", "PatchEmbed", "check_image_input", "subspace_attention"]
