"""Pure torch building blocks of the zoo."""

from .cbsa import CBSA, ViTCBSA
from .conv_stem import ConvStem, ConvStemTokens
from .conv_tokenizer import ConvTokenizer, SeqPool
from .head_attention import HeadAttention
from .ista import ISTA, OvercompleteISTA
from .kernel_attention import (
    KERNELS,
    KernelAttention,
    LinearKernelAttention,
    Poly2KernelAttention,
    RBFKernelAttention,
    kernel_attention,
    kernel_weights,
)
from .mssa import MSSA, subspace_attention
from .patch_embed import ConvPatchEmbed, PatchEmbed, check_image_input, patch_embed_in_chans
from .primal_dual_attention import (
    AttentionBN,
    AttentionBNSH,
    AttentionSH,
    PrimalDualAttention,
    PrimalDualMSSA,
    primal_dual_attention,
    primal_dual_weights,
)
from .projection_head import ProjectionHead
from .trace import AttentionTrace, BlockTrace, TraceableBlock, block_tracer, register_trace_adapter
from .tssa import TSSA

__all__ = [
    "KERNELS",
    "TSSA",
    "CBSA",
    "ViTCBSA",
    "ProjectionHead",
    "AttentionBN",
    "AttentionBNSH",
    "AttentionSH",
    "AttentionTrace",
    "BlockTrace",
    "ConvPatchEmbed",
    "ConvStem",
    "ConvStemTokens",
    "ConvTokenizer",
    "SeqPool",
    "HeadAttention",
    "ISTA",
    "KernelAttention",
    "LinearKernelAttention",
    "MSSA",
    "OvercompleteISTA",
    "PatchEmbed",
    "Poly2KernelAttention",
    "PrimalDualAttention",
    "PrimalDualMSSA",
    "RBFKernelAttention",
    "TraceableBlock",
    "block_tracer",
    "check_image_input",
    "kernel_attention",
    "kernel_weights",
    "patch_embed_in_chans",
    "primal_dual_attention",
    "primal_dual_weights",
    "register_trace_adapter",
    "subspace_attention",
]
