"""The sources' attentions in the zoo's CPU-scale layouts, one model per variant, as timm models.

Naming: ``<layout>_<size>_patch<p>_<img>_<variant>``, the model it varies plus the attention it swaps in:

- ViT twin layout (``vit_nano_patch4_32_*``), timm's ViT with its attention replaced (same parameters):
  ``rbf``, ``poly2``, ``linear`` kernel attention (``crate.layers.kernel_attention``; ``exp``, the softmax
  kernel, is ``vit_nano_patch4_32`` itself), ``bn`` Attention-BN, ``sh`` Attention-SH and ``bnsh`` both
  (``crate.layers.primal_dual_attention``; SH pools the keys and values of half the heads by 2), ``cbsa``
  contract-and-broadcast attention onto 4 x 4 representatives of the patch tokens (``crate.layers.cbsa``; one
  bias-free projection instead of q, k and v, so fewer parameters than the twin);
- CRATE layout (``crate_nano_patch4_32_*``), MSSA's shared projection kept: ``bn`` (BN statistics of
  w = U^T z) and ``sh`` (pooled keys and values for half the heads).

ToST (``tost_nano_patch4_32``) has a backbone of its own: ``crate.models.tost``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from timm.models import generate_default_cfgs
from torch import nn

from crate.layers import (
    AttentionBN,
    AttentionBNSH,
    AttentionSH,
    LinearKernelAttention,
    Poly2KernelAttention,
    RBFKernelAttention,
    ViTCBSA,
)
from crate.layers.primal_dual_attention import crate_attention_bn, crate_attention_sh

from .crate import CPU_SIZES, CRATE, CrateBlock, _create_crate, cpu_cfg
from .registry import register_model
from .vit import ViTTwin, create_vit_twin

__all__ = ["CRATE_VARIANTS", "VIT_VARIANTS"]

VIT_VARIANTS: dict[str, type[nn.Module]] = {
    "rbf": RBFKernelAttention,
    "poly2": Poly2KernelAttention,
    "linear": LinearKernelAttention,
    "bn": AttentionBN,
    "sh": AttentionSH,
    "bnsh": AttentionBNSH,
    "cbsa": ViTCBSA,
}
CRATE_VARIANTS = {"bn": crate_attention_bn, "sh": crate_attention_sh}

default_cfgs = generate_default_cfgs(
    {
        **{f"vit_nano_patch4_32_{variant}": cpu_cfg() for variant in VIT_VARIANTS},
        **{f"crate_nano_patch4_32_{variant}": cpu_cfg() for variant in CRATE_VARIANTS},
    }
)


def _vit(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> ViTTwin:
    args = dict(patch_size=4, mlp_ratio=4.0, attn_layer=VIT_VARIANTS[variant], **CPU_SIZES["nano"])
    if variant == "cbsa":
        args["qkv_bias"] = False
    return create_vit_twin(f"vit_nano_patch4_32_{variant}", pretrained, **dict(args, **kwargs))


def _crate(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> CRATE:
    args = dict(patch_size=4, block_fn=partial(CrateBlock, attn_layer=CRATE_VARIANTS[variant]), **CPU_SIZES["nano"])
    return _create_crate(f"crate_nano_patch4_32_{variant}", pretrained, **dict(args, **kwargs))


@register_model
def vit_nano_patch4_32_rbf(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with Gaussian-kernel attention."""
    return _vit("rbf", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_poly2(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with squared-polynomial-kernel attention."""
    return _vit("poly2", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_linear(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with linear (elu + 1 feature map) attention."""
    return _vit("linear", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_bn(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with Attention-BN."""
    return _vit("bn", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_sh(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with Attention-SH (pooling factors 1, 1, 2, 2)."""
    return _vit("sh", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_bnsh(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with Attention-BN+SH (pooling factors 1, 1, 2, 2)."""
    return _vit("bnsh", pretrained, kwargs)


@register_model
def vit_nano_patch4_32_cbsa(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """``vit_nano_patch4_32`` with CBSA attention (4 x 4 representatives of the patch tokens)."""
    return _vit("cbsa", pretrained, kwargs)


@register_model
def crate_nano_patch4_32_bn(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """``crate_nano_patch4_32`` whose MSSA scores use BN statistics of w = U^T z."""
    return _crate("bn", pretrained, kwargs)


@register_model
def crate_nano_patch4_32_sh(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """``crate_nano_patch4_32`` whose MSSA pools keys and values for half the heads (factors 1, 1, 2, 2)."""
    return _crate("sh", pretrained, kwargs)
