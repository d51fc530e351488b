"""ViT twins: timm VisionTransformers with the width, depth, heads and patch size of each CPU-scale CRATE.

Every CRATE member gets a baseline that differs only in the layer: softmax attention with separate
query, key and value projections and an MLP with residual, where CRATE has MSSA and ISTA.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer import checkpoint_filter_fn as vit_checkpoint_filter_fn

from crate.layers import check_image_input

from .crate import CPU_SIZES, cpu_cfg
from .shipped import digits_cfg

__all__ = ["ViTTwin"]


class ViTTwin(VisionTransformer):
    """timm's VisionTransformer with a clear error for images of the wrong size or channel count."""

    def forward_features(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        fixed_size = None if self.dynamic_img_size else self.patch_embed.img_size
        check_image_input(x, self.patch_embed.proj.in_channels, fixed_size)
        return super().forward_features(x, *args, **kwargs)


def _create_vit_twin(variant: str, pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    return build_model_with_cfg(
        ViTTwin,
        variant,
        pretrained,
        pretrained_filter_fn=vit_checkpoint_filter_fn,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        **kwargs,
    )


default_cfgs = generate_default_cfgs(
    {
        "vit_nano_patch4_32.digits": digits_cfg("vit_nano_patch4_32", cpu_cfg()),
        "vit_nano_patch4_32.*": cpu_cfg(),
        "vit_micro_patch4_32.digits": digits_cfg("vit_micro_patch4_32", cpu_cfg()),
        "vit_micro_patch4_32.*": cpu_cfg(),
    }
)


@register_model
def vit_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """ViT twin of ``crate_nano_patch4_32`` (MLP ratio 4)."""
    args = dict(patch_size=4, mlp_ratio=4.0, **CPU_SIZES["nano"])
    return _create_vit_twin("vit_nano_patch4_32", pretrained, **dict(args, **kwargs))


@register_model
def vit_micro_patch4_32(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """ViT twin of ``crate_micro_patch4_32`` (MLP ratio 4)."""
    args = dict(patch_size=4, mlp_ratio=4.0, **CPU_SIZES["micro"])
    return _create_vit_twin("vit_micro_patch4_32", pretrained, **dict(args, **kwargs))
