"""CRATE-alpha (Yang et al. 2024, "Scaling White-Box Transformers for Vision"), as timm models.

Three changes to the CRATE layer make it scale: an overcomplete dictionary (C d atoms, C = 4) with two
ISTA steps from zero, a decoupled output dictionary D_hat, and a residual connection around it:
    x = x + MSSA(LN(x)),    x = x + D_hat ISTA_2(LN(x) | D).
The patch embedding is a strided convolution, and the block LayerNorms use eps 1e-6; the norm before the
head uses PyTorch's default eps 1e-5, as the authors' PyTorch inference code does.

Initialisation follows the authors' (JAX) training code, so that training from scratch starts where theirs
does: D and D_hat kaiming-uniform with fan_in = d (bound sqrt(6/d): their dictionaries are (d, 4d)
kernels whose input axis is d), the projections and the head normal(0.02) with zero biases, the conv
patch embedding kaiming-uniform over its fan-in with a zero bias, the position embedding normal(0.02) and
the class token normal(1e-6).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from timm.layers import DropPath
from timm.models import generate_default_cfgs
from torch import nn

from crate.layers import ConvPatchEmbed, OvercompleteISTA

from .crate import CPU_SIZES, CRATE, CrateBlock, _create_crate, cpu_cfg, crate_cfg
from .registry import register_model
from .shipped import cifar10_cfg, digits_cfg

__all__ = ["CrateAlphaBlock"]


class CrateAlphaBlock(CrateBlock):
    """One CRATE-alpha layer: x = x + MSSA(LN(x)) (bias-free output), then x = x + ODL(LN(x))."""

    def __init__(self, dim: int, num_heads: int, ratio: int = 4, drop_path: float = 0.0, **kwargs: Any) -> None:
        super().__init__(
            dim,
            num_heads,
            proj_bias=False,
            ista_layer=partial(OvercompleteISTA, ratio=ratio),
            drop_path=drop_path,
            **kwargs,
        )
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.ista(self.norm2(x)))

    def sparse_step(self, z_half: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Z^{l+1} = Z^{l+1/2} + D_hat a_2, the code a_2): the sparse tensor is a_2, 4d wide, not the output."""
        code = self.ista.sparse_code(y)
        return z_half + self.drop_path2(self.ista.decode(code)), code


def init_crate_alpha_weights(model: nn.Module) -> None:
    """The initial distribution of the authors' training code (see the module docstring)."""
    with torch.no_grad():
        for block in model.blocks:
            nn.init.normal_(block.attn.qkv.weight, std=0.02)
            nn.init.normal_(block.attn.proj.weight, std=0.02)
            for dictionary in (block.ista.dictionary, block.ista.output_dictionary):
                nn.init.kaiming_uniform_(dictionary, mode="fan_out")  # (d, C d): fan_out is d, their fan_in
        if isinstance(model.patch_embed.proj, nn.Conv2d):  # a convolutional tokenizer keeps its own init
            nn.init.kaiming_uniform_(model.patch_embed.proj.weight)  # fan_in = in_chans * p * p
            if model.patch_embed.proj.bias is not None:
                nn.init.zeros_(model.patch_embed.proj.bias)
        nn.init.normal_(model.pos_embed, std=0.02)
        if model.cls_token is not None:
            nn.init.normal_(model.cls_token, std=1e-6)
        if isinstance(model.head, nn.Linear):
            nn.init.normal_(model.head.weight, std=0.02)
            nn.init.zeros_(model.head.bias)


ALPHA_DEFAULTS: dict[str, Any] = dict(
    embed_layer=ConvPatchEmbed,
    block_fn=CrateAlphaBlock,
    norm_layer=partial(nn.LayerNorm, eps=1e-6),
    final_norm_layer=nn.LayerNorm,
    weight_init=init_crate_alpha_weights,
)

# The authors' PyTorch weights on the Hugging Face hub (converted from their JAX training; raw state dicts in
# the official layout, which the family's filter converts). Their evaluation code resizes to 224 and
# centre-crops 224 (crop_pct 1.0), bilinear, ImageNet mean and std. The ImageNet-21K files hold 19,167
# classes; accuracies are the authors' ImageNet-1K top-1.
_HUB = "UCSC-VLAA/CRATE-alpha"
_IN21K = "torch/in21k_Pretrain/"


def released_cfg(filename: str, top1: float | None = None, num_classes: int = 1000) -> dict[str, Any]:
    """The cfg of one of the authors' released files."""
    trained = "ImageNet-21K pretraining" + (", fine-tuned on ImageNet-1K" if num_classes == 1000 else "")
    accuracy = f"; ImageNet-1K top-1 {top1} (the authors')" if top1 is not None else ""
    return crate_cfg(
        hf_hub_id=_HUB,
        hf_hub_filename=filename,
        num_classes=num_classes,
        crop_pct=1.0,
        interpolation="bilinear",
        license="not stated by the authors (UCSC-VLAA/CRATE-alpha)",
        paper_name="Scaling White-Box Transformers for Vision",
        paper_ids="arXiv:2405.20299",
        origin_url="https://github.com/UCSC-VLAA/CRATE-alpha",
        notes=(trained + accuracy,),
    )


default_cfgs = generate_default_cfgs(
    {
        "crate_alpha_small_patch16_224": crate_cfg(),
        # the released weights are asked for by tag; "<arch>.*" after them keeps the untrained default
        "crate_alpha_base_patch16_224.in21k_ft_in1k": released_cfg("torch/crate_alpha_B16.pth", 81.2),
        "crate_alpha_base_patch16_224.in21k": released_cfg(_IN21K + "crate_alpha_B16_IN21K", num_classes=19167),
        "crate_alpha_base_patch16_224.*": crate_cfg(),
        "crate_alpha_base_patch32_224.in21k": released_cfg(_IN21K + "crate_alpha_B32_in21k.pth", num_classes=19167),
        "crate_alpha_base_patch32_224.*": crate_cfg(),
        "crate_alpha_base_patch8_224.in21k": released_cfg(_IN21K + "crate_alpha_B8_IN21K", num_classes=19167),
        "crate_alpha_base_patch8_224.*": crate_cfg(),
        "crate_alpha_large_patch14_224.in21k_ft_in1k": released_cfg("torch/crate_alpha_L14.pth", 83.9),
        "crate_alpha_large_patch14_224.in21k": released_cfg(_IN21K + "crate_alpha_L14_IN21K", num_classes=19167),
        "crate_alpha_large_patch14_224.*": crate_cfg(),
        "crate_alpha_large_patch32_224.in21k": released_cfg(_IN21K + "crate_alpha_L32_in21k.pth", num_classes=19167),
        "crate_alpha_large_patch32_224.*": crate_cfg(),
        "crate_alpha_large_patch8_224.in21k": released_cfg(_IN21K + "crate_alpha_L8_IN21K", num_classes=19167),
        "crate_alpha_large_patch8_224.*": crate_cfg(),
        "crate_alpha_nano_patch4_32.digits": digits_cfg("crate_alpha_nano_patch4_32", cpu_cfg()),
        "crate_alpha_nano_patch4_32.cifar10": cifar10_cfg("crate_alpha_nano_patch4_32", cpu_cfg()),
        "crate_alpha_nano_patch4_32.*": cpu_cfg(),
        "crate_alpha_micro_patch4_32.digits": digits_cfg("crate_alpha_micro_patch4_32", cpu_cfg()),
        "crate_alpha_micro_patch4_32.cifar10": cifar10_cfg("crate_alpha_micro_patch4_32", cpu_cfg()),
        "crate_alpha_micro_patch4_32.*": cpu_cfg(),
    }
)


def _build(variant: str, pretrained: bool, args: dict[str, Any], kwargs: dict[str, Any]) -> CRATE:
    return _create_crate(variant, pretrained, **{**ALPHA_DEFAULTS, **args, **kwargs})


_SMALL = dict(embed_dim=576, depth=12, num_heads=12)
_BASE = dict(embed_dim=768, depth=12, num_heads=12)
_LARGE = dict(embed_dim=1024, depth=24, num_heads=16)


@register_model
def crate_alpha_small_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-S/16: d=576, K=12, L=12, dictionary 4d."""
    return _build("crate_alpha_small_patch16_224", pretrained, dict(patch_size=16, **_SMALL), kwargs)


@register_model
def crate_alpha_base_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-B/16: d=768, K=12, L=12, dictionary 4d (about 72.3M parameters)."""
    return _build("crate_alpha_base_patch16_224", pretrained, dict(patch_size=16, **_BASE), kwargs)


@register_model
def crate_alpha_base_patch32_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-B/32: d=768, K=12, L=12, 32x32 patches."""
    return _build("crate_alpha_base_patch32_224", pretrained, dict(patch_size=32, **_BASE), kwargs)


@register_model
def crate_alpha_base_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-B/8: d=768, K=12, L=12, 8x8 patches."""
    return _build("crate_alpha_base_patch8_224", pretrained, dict(patch_size=8, **_BASE), kwargs)


@register_model
def crate_alpha_large_patch14_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-L/14: d=1024, K=16, L=24, 14x14 patches (about 253.7M parameters)."""
    return _build("crate_alpha_large_patch14_224", pretrained, dict(patch_size=14, **_LARGE), kwargs)


@register_model
def crate_alpha_large_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-L/8: d=1024, K=16, L=24, 8x8 patches."""
    return _build("crate_alpha_large_patch8_224", pretrained, dict(patch_size=8, **_LARGE), kwargs)


@register_model
def crate_alpha_large_patch32_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-alpha-L/32: d=1024, K=16, L=24, 32x32 patches."""
    return _build("crate_alpha_large_patch32_224", pretrained, dict(patch_size=32, **_LARGE), kwargs)


@register_model
def crate_alpha_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CPU-scale CRATE-alpha for 32x32 inputs, the sizes of ``CPU_SIZES['nano']``."""
    return _build("crate_alpha_nano_patch4_32", pretrained, dict(patch_size=4, **CPU_SIZES["nano"]), kwargs)


@register_model
def crate_alpha_micro_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CPU-scale CRATE-alpha for 32x32 inputs, the sizes of ``CPU_SIZES['micro']``."""
    return _build("crate_alpha_micro_patch4_32", pretrained, dict(patch_size=4, **CPU_SIZES["micro"]), kwargs)
