"""Pure torch building blocks of the zoo."""

from .ista import ISTA, OvercompleteISTA
from .mssa import MSSA, subspace_attention
from .patch_embed import ConvPatchEmbed, PatchEmbed, check_image_input

__all__ = [
    "ConvPatchEmbed",
    "ISTA",
    "MSSA",
    "OvercompleteISTA",
    "PatchEmbed",
    "check_image_input",
    "subspace_attention",
]
