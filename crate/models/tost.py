"""ToST, the Token Statistics Transformer (Wu et al., ICLR 2025), as timm models.

Each layer is a pre-norm block whose attention is TSSA (``crate.layers.tssa``), linear in the number of
tokens, followed by an MLP, both with LayerScale:

    x = x + g_1 * TSSA(LN(x)),    x = x + g_2 * MLP(LN(x))

The reference models (RobinWu218/ToST, ``tost_vision/tost.py``) sit on an XCiT backbone, built here from
timm's own XCiT pieces: the convolutional patch stem (3x3 stride-2 conv + BatchNorm layers), the Fourier
position encoding added to the patch tokens, and, after the TSSA layers, two class-attention blocks that
bring in the class token (its only use). LayerScale starts at 1.0 for 12 layers and 1e-5 for 24. Parameter
names are the reference's, except where timm's XCiT pieces differ and timm's own XCiT conversion maps a
reference checkpoint on load (``pos_embeder`` -> ``pos_embed``, class attention ``qkv`` -> ``q``/``k``/``v``):
a reference state dict (possibly under ``model``) loads through ``pretrained_cfg_overlay=dict(file=...)``.
No ToST weights were ever released; the reference sizes are registered untrained.

The measurement trace covers the TSSA layers (``blocks``), the part the theory derives; TSSA forms no
token-by-token map, so its traces hold no attention maps (entropy and head redundancy do not apply).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import torch
from timm.layers import DropPath, Mlp, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs
from timm.models.xcit import ClassAttentionBlock, PositionalEncodingFourier
from timm.models.xcit import checkpoint_filter_fn as xcit_checkpoint_filter_fn
from torch import nn
from torch.utils.checkpoint import checkpoint

from crate.layers import TSSA, BlockTrace, ConvStem

from .checkpoint import pretrained_kwargs
from .classifier_api import TransformerClassifier, block_features_cfg
from .convert import checkpoint_filter_fn
from .crate import CPU_SIZES, cpu_cfg, crate_cfg
from .registry import register_model
from .shipped import cifar10_cfg

__all__ = ["ToST", "ToSTBlock"]


class ToSTBlock(nn.Module):
    """x = x + g_1 * TSSA(LN(x)); x = x + g_2 * MLP(LN(x)), LayerScale g initialised to ``eta``."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = False,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        act_layer: type[nn.Module] = nn.GELU,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        eta: float = 1.0,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = TSSA(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.gamma1 * self.attn(self.norm1(x)))
        return x + self.drop_path(self.gamma2 * self.mlp(self.norm2(x)))

    def forward_trace(self, x: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, BlockTrace]:
        """``forward`` with the layer's measurement trace: U_[K] is TSSA's projection; no maps, no sparse code."""
        attn_input = self.norm1(x)
        z_half = x + self.drop_path(self.gamma1 * self.attn(attn_input))
        mlp_input = self.norm2(z_half)
        z_out = z_half + self.drop_path(self.gamma2 * self.mlp(mlp_input))
        trace = BlockTrace.record(
            x, attn_input, self.attn.subspaces, None, z_half, self.norm1(z_half), mlp_input, None, z_out
        )
        return z_out, trace


class ToST(TransformerClassifier):
    """ToST classifier on the XCiT backbone: conv stem, Fourier position encoding, TSSA layers, class
    token and class-attention blocks, LayerNorm, linear head on the class token (``global_pool="avg"``:
    the mean of the patch tokens). The timm API is ``TransformerClassifier``'s; the TSSA layers carry no
    class token (``blocks_prefix_tokens = 0``). The Fourier encoding is computed for each input's grid, so
    ``dynamic_img_size=True`` takes images of other sizes with the same weights (the stem's padded stride-2
    convolutions round a side that the patch size does not divide up)."""

    blocks_prefix_tokens = 0

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: Literal["", "token", "avg"] = "token",
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_layer: type[nn.Module] | None = None,
        cls_attn_layers: int = 2,
        eta: float = 1.0,
        tokens_norm: bool = True,
        dynamic_img_size: bool = False,
    ) -> None:
        super().__init__(num_classes, in_chans, embed_dim, global_pool)
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)

        self.patch_embed = ConvStem(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        self.dynamic_img_size = dynamic_img_size
        self.patch_embed.strict_img_size = not dynamic_img_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = PositionalEncodingFourier(dim=embed_dim)
        self.pos_drop = nn.Dropout(pos_drop_rate)
        # the reference gives every layer the same stochastic-depth rate
        block = partial(
            ToSTBlock,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            qkv_bias=qkv_bias,
            proj_drop=proj_drop_rate,
            attn_drop=attn_drop_rate,
            drop_path=drop_path_rate,
            norm_layer=norm_layer,
            eta=eta,
        )
        self.blocks = nn.Sequential(*[block(embed_dim) for _ in range(depth)])
        self.cls_attn_blocks = nn.ModuleList(
            [
                ClassAttentionBlock(
                    embed_dim,
                    num_heads,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    proj_drop=proj_drop_rate,
                    attn_drop=attn_drop_rate,
                    norm_layer=norm_layer,
                    eta=eta,
                    tokens_norm=tokens_norm,
                )
                for _ in range(cls_attn_layers)
            ]
        )
        self._build_head(depth, self.patch_embed.patch_size[0], norm_layer(embed_dim), nn.Identity(), drop_rate)
        trunc_normal_(self.cls_token, std=0.02)
        self.apply(_init_weights)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        # the position encoding is a module (Fourier features + projection); TSSA's temperatures are (K, 1)
        return {"cls_token", "pos_embed", "pos_embed.*", "blocks.*.attn.temp"}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        return dict(
            stem=r"^cls_token|pos_embed|patch_embed",
            blocks=r"^blocks\.(\d+)",
            cls_attn_blocks=[(r"^cls_attn_blocks\.(\d+)", None), (r"^norm", (99999,))],
        )

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        """Patch tokens plus the Fourier position encoding of their grid (no class token yet)."""
        x, (height, width) = self.patch_embed(images)
        position = self.pos_embed(x.shape[0], height, width).reshape(x.shape[0], -1, x.shape[1]).permute(0, 2, 1)
        return self.pos_drop(x + position)

    def _after_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """Prepend the class token, run the class-attention blocks, normalise."""
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        for block in self.cls_attn_blocks:
            if self.grad_checkpointing and not torch.jit.is_scripting():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.norm(x)

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the layers after the last one in ``indices`` (and the class attention, norm and head if asked)."""
        take_indices = super().prune_intermediate_layers(indices, prune_norm, prune_head)
        if prune_head:
            self.cls_attn_blocks = nn.ModuleList()
        return take_indices


def _init_weights(module: nn.Module) -> None:
    """The reference's initialisation: linear weights truncated normal(0.02), zero biases; LayerNorm 1, 0."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def _create_tost(variant: str, pretrained: bool = False, **kwargs: Any) -> ToST:
    """Files read by ``crate.models.checkpoint``; reference checkpoints converted by timm's XCiT filter."""
    feature_cfg = block_features_cfg(kwargs)
    return build_model_with_cfg(
        ToST,
        variant,
        pretrained,
        pretrained_filter_fn=partial(checkpoint_filter_fn, family_filter=xcit_checkpoint_filter_fn),
        feature_cfg=feature_cfg,
        **pretrained_kwargs(variant, pretrained, kwargs),
    )


def _cfg(**kwargs: Any) -> dict[str, Any]:
    return crate_cfg(first_conv="patch_embed.proj.0.0", **kwargs)


_SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(embed_dim=192, num_heads=4),
    "small": dict(embed_dim=384, num_heads=8),
    "medium": dict(embed_dim=512, num_heads=8),
    "large": dict(embed_dim=768, num_heads=16),
}
_REFERENCE = [
    (size, depth, patch)
    for patch in (16, 8)
    for size, depth in (("tiny", 12), ("small", 12), ("tiny", 24), ("small", 24), ("medium", 24), ("large", 24))
]

_NANO_CFG = cpu_cfg(first_conv="patch_embed.proj.0.0")

default_cfgs = generate_default_cfgs(
    {
        **{f"tost_cab_{size}_{depth}_p{patch}": _cfg() for size, depth, patch in _REFERENCE},
        "tost_nano_patch4_32.cifar10": cifar10_cfg("tost_nano_patch4_32", _NANO_CFG),
        "tost_nano_patch4_32.*": _NANO_CFG,
    }
)


def _reference(size: str, depth: int, patch: int, pretrained: bool, kwargs: dict[str, Any]) -> ToST:
    """A reference size: LayerScale 1.0 at depth 12, 1e-5 at depth 24."""
    args = dict(patch_size=patch, depth=depth, eta=1.0 if depth == 12 else 1e-5, **_SIZES[size])
    return _create_tost(f"tost_cab_{size}_{depth}_p{patch}", pretrained, **dict(args, **kwargs))


@register_model
def tost_cab_tiny_12_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-T/16: d=192, K=4, L=12 (5,769,328 parameters with 1000 classes)."""
    return _reference("tiny", 12, 16, pretrained, kwargs)


@register_model
def tost_cab_small_12_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-S/16: d=384, K=8, L=12 (22,589,944 parameters with 1000 classes)."""
    return _reference("small", 12, 16, pretrained, kwargs)


@register_model
def tost_cab_tiny_24_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-T/16, 24 layers: d=192, K=4."""
    return _reference("tiny", 24, 16, pretrained, kwargs)


@register_model
def tost_cab_small_24_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-S/16, 24 layers: d=384, K=8."""
    return _reference("small", 24, 16, pretrained, kwargs)


@register_model
def tost_cab_medium_24_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-M/16: d=512, K=8, L=24 (71,481,064 parameters with 1000 classes)."""
    return _reference("medium", 24, 16, pretrained, kwargs)


@register_model
def tost_cab_large_24_p16(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-L/16: d=768, K=16, L=24 (160,286,920 parameters with 1000 classes)."""
    return _reference("large", 24, 16, pretrained, kwargs)


@register_model
def tost_cab_tiny_12_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-T/8: d=192, K=4, L=12, 8x8 patches."""
    return _reference("tiny", 12, 8, pretrained, kwargs)


@register_model
def tost_cab_small_12_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-S/8: d=384, K=8, L=12, 8x8 patches."""
    return _reference("small", 12, 8, pretrained, kwargs)


@register_model
def tost_cab_tiny_24_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-T/8, 24 layers: d=192, K=4, 8x8 patches."""
    return _reference("tiny", 24, 8, pretrained, kwargs)


@register_model
def tost_cab_small_24_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-S/8, 24 layers: d=384, K=8, 8x8 patches."""
    return _reference("small", 24, 8, pretrained, kwargs)


@register_model
def tost_cab_medium_24_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-M/8: d=512, K=8, L=24, 8x8 patches."""
    return _reference("medium", 24, 8, pretrained, kwargs)


@register_model
def tost_cab_large_24_p8(pretrained: bool = False, **kwargs: Any) -> ToST:
    """ToST-L/8: d=768, K=16, L=24, 8x8 patches."""
    return _reference("large", 24, 8, pretrained, kwargs)


@register_model
def tost_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> ToST:
    """CPU-scale ToST for 32x32 inputs: a two-convolution stem (4x4 patches), ``CPU_SIZES['nano']``, two
    class-attention blocks, LayerScale 1.0."""
    args = dict(patch_size=4, eta=1.0, **CPU_SIZES["nano"])
    return _create_tost("tost_nano_patch4_32", pretrained, **dict(args, **kwargs))
