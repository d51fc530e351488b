"""Pure torch building blocks of the zoo."""

from .ista import ISTA, OvercompleteISTA
from .mssa import MSSA, subspace_attention
from .patch_embed import ConvPatchEmbed, PatchEmbed, check_image_input, patch_embed_in_chans
from .trace import AttentionTrace, BlockTrace, TraceableBlock, block_tracer, register_trace_adapter

__all__ = [
    "AttentionTrace",
    "BlockTrace",
    "ConvPatchEmbed",
    "ISTA",
    "MSSA",
    "OvercompleteISTA",
    "PatchEmbed",
    "TraceableBlock",
    "block_tracer",
    "check_image_input",
    "patch_embed_in_chans",
    "register_trace_adapter",
    "subspace_attention",
]
