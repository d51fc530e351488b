"""CBT, the contract-and-broadcast transformer (Wen et al., NeurIPS 2025), as timm models.

Each layer is CRATE's, with CBSA (``crate.layers.cbsa``) in place of MSSA: an attention step that compresses
a few representatives of the tokens and broadcasts the change to every token, linear in the number of
tokens, then CRATE's ISTA step (step 0.1, lambda 0.1, no residual):

    Z^{l+1/2} = Z^l + CBSA(LN(Z^l)),    Z^{l+1} = ISTA(LN(Z^{l+1/2})).

The authors' image classifiers (QishuaiWen/CBSA, ``CBSA_image_classification/models.py``) put the class token
first with a learned position embedding after XCiT's convolutional patch stem (3x3 stride-2 convolutions with
BatchNorm and GELU: four for patch 16, three for patch 8; the zoo's ``ConvStem``), and a LayerNorm and linear
head on the class token. Their files load through ``pretrained_cfg_overlay=dict(file=...)``: the layout is
detected and converted by ``crate.models.convert`` (their SyncBatchNorm buffers into BatchNorm2d). Two things
of their code are kept on purpose in the registered ``cbt_*_224`` models, so that their files give their
logits: the representatives pool the first int(sqrt(N))^2 tokens, class token included and the last patch
token left out (``rep_pool="reference"``), and their ``Ours_base``/``Ours_large`` name an attention class
``Ours`` that the file never defines (CBSA is meant, and is what is built). The CPU-scale ``cbt_nano_patch4_32``
pools the patch tokens alone (``rep_pool="patches"``) onto 4 x 4 representatives.

CBSA forms no token-by-token softmax map, so the measurement trace of a CBT block holds no attention maps
(as ToST's); its subspaces are the shared projection.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from timm.models import generate_default_cfgs

from crate.layers import CBSA, ConvStemTokens
from crate.layers.cbsa import RepPool

from .crate import CPU_SIZES, CRATE, CrateBlock, _create_crate, cpu_cfg, crate_cfg
from .registry import register_model
from .shipped import cifar10_cfg

__all__ = ["cbt_block"]


def cbt_block(rep_grid: int = 8, rep_pool: RepPool = "reference", num_prefix_tokens: int = 1) -> partial:
    """CRATE's block with CBSA as its attention, pooling onto ``rep_grid`` x ``rep_grid`` representatives (the
    tokens after ``num_prefix_tokens``, with ``rep_pool="patches"``)."""
    attn = partial(CBSA, rep_grid=rep_grid, rep_pool=rep_pool, num_prefix_tokens=num_prefix_tokens)
    return partial(CrateBlock, attn_layer=attn)


# Checkpoint filter: crate.models.convert.checkpoint_filter_fn (the authors' CBT layout among the official ones).


def _cfg(**kwargs: Any) -> dict[str, Any]:
    return crate_cfg(first_conv="patch_embed.proj.0.0", **kwargs)


_SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(embed_dim=192, depth=12, num_heads=3),
    "small": dict(embed_dim=384, depth=12, num_heads=6),
    "base": dict(embed_dim=768, depth=12, num_heads=12),
    "large": dict(embed_dim=1024, depth=24, num_heads=16),
}

_NANO_CFG = cpu_cfg(first_conv="patch_embed.proj.0.0")

default_cfgs = generate_default_cfgs(
    {
        **{f"cbt_{size}_patch{patch}_224": _cfg() for size in _SIZES for patch in (16, 8)},
        "cbt_nano_patch4_32.cifar10": cifar10_cfg("cbt_nano_patch4_32", _NANO_CFG),
        "cbt_nano_patch4_32.*": _NANO_CFG,
    }
)


def _create_cbt(variant: str, pretrained: bool = False, **kwargs: Any) -> CRATE:
    """A CRATE model with CBSA blocks (``rep_grid``, ``rep_pool`` settings) and, unless ``embed_layer`` names
    another, the convolutional stem."""
    prefix = 1 if kwargs.get("class_token", True) else 0  # CBSA pools the tokens after the class token, if any
    block = cbt_block(kwargs.pop("rep_grid", 8), kwargs.pop("rep_pool", "reference"), prefix)
    return _create_crate(variant, pretrained, **dict(dict(embed_layer=ConvStemTokens), **kwargs), block_fn=block)


def _reference(size: str, patch: int, pretrained: bool, kwargs: dict[str, Any]) -> CRATE:
    args = dict(patch_size=patch, **_SIZES[size])
    return _create_cbt(f"cbt_{size}_patch{patch}_224", pretrained, **dict(args, **kwargs))


@register_model
def cbt_tiny_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-T/16: d=192, K=3, L=12 (1,789,192 parameters with 1000 classes)."""
    return _reference("tiny", 16, pretrained, kwargs)


@register_model
def cbt_small_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-S/16: d=384, K=6, L=12 (6,667,048 parameters with 1000 classes)."""
    return _reference("small", 16, pretrained, kwargs)


@register_model
def cbt_base_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-B/16: d=768, K=12, L=12 (25,691,752 parameters with 1000 classes)."""
    return _reference("base", 16, pretrained, kwargs)


@register_model
def cbt_large_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-L/16: d=1024, K=16, L=24 (83,051,368 parameters with 1000 classes)."""
    return _reference("large", 16, pretrained, kwargs)


@register_model
def cbt_tiny_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-T/8: CBT-T with XCiT's three-convolution stem (8x8 patches, 784 tokens)."""
    return _reference("tiny", 8, pretrained, kwargs)


@register_model
def cbt_small_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-S/8: CBT-S with 8x8 patches."""
    return _reference("small", 8, pretrained, kwargs)


@register_model
def cbt_base_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-B/8: CBT-B with 8x8 patches."""
    return _reference("base", 8, pretrained, kwargs)


@register_model
def cbt_large_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CBT-L/8: CBT-L with 8x8 patches."""
    return _reference("large", 8, pretrained, kwargs)


@register_model
def cbt_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CPU-scale CBT for 32x32 inputs: a two-convolution stem (4x4 patches), ``CPU_SIZES['nano']``, the patch
    tokens pooled onto 4 x 4 representatives."""
    args = dict(patch_size=4, rep_grid=4, rep_pool="patches", **CPU_SIZES["nano"])
    return _create_cbt("cbt_nano_patch4_32", pretrained, **dict(args, **kwargs))
