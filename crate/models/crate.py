"""CRATE: the white-box transformer of Yu et al. (NeurIPS 2023), as timm models.

Each layer is one step of an optimizer of the sparse rate reduction objective
    max_Z  R(Z) - R^c(Z | U_[K]) - lambda ||Z||_0,
an MSSA step that compresses the tokens against the layer's subspaces U_[K] followed by an ISTA step
that sparsifies them against the layer's dictionary D:
    Z^{l+1/2} = Z^l + MSSA(LN(Z^l) | U_[K]^l),    Z^{l+1} = ISTA(LN(Z^{l+1/2}) | D^l).

Built in the layout of the official code (Ma-Lab-Berkeley/CRATE), so parameter counts match the paper's.
The :class:`CRATE` class also carries CRATE-alpha (``crate_alpha.py``), which swaps the block and the
patch embedding.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import DropPath, PatchDropout, resample_abs_pos_embed
from timm.models import build_model_with_cfg, generate_default_cfgs
from torch import nn

from crate.layers import ISTA, MSSA, BlockTrace, PatchEmbed

from .checkpoint import pretrained_kwargs
from .classifier_api import TransformerClassifier, block_features_cfg
from .convert import checkpoint_filter_fn
from .registry import register_model
from .shipped import cifar10_cfg, cifar10_simdino_cfg, digits_cfg, shipped_checkpoint

__all__ = ["CPU_SIZES", "CRATE", "CrateBlock"]


class CrateBlock(nn.Module):
    """One CRATE layer: Z_half = Z + MSSA(LN(Z)); Z_next = ISTA(LN(Z_half)) (no residual around ISTA).

    ``proj_bias``, ``ista_layer`` and ``attn_layer`` let variants swap the output projection and the
    sparse coding step (CRATE-alpha) or the attention (an MSSA with BN statistics) while keeping the
    layout. ``drop_path`` (stochastic depth) drops the residual branches of a training batch's samples:
    the MSSA update here (ISTA has no residual to drop), both updates in CRATE-alpha.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None = None,
        step_size: float = 0.1,
        lambd: float = 0.1,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        proj_bias: bool = True,
        ista_layer: Callable[..., nn.Module] = ISTA,
        drop_path: float = 0.0,
        attn_layer: Callable[..., nn.Module] = MSSA,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(
            dim, num_heads, head_dim=head_dim, proj_bias=proj_bias, attn_drop=attn_drop, proj_drop=proj_drop
        )
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.ista = ista_layer(dim, step_size=step_size, lambd=lambd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return self.ista(self.norm2(x))

    def sparse_step(self, z_half: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Z^{l+1}, the sparse code) from Z^{l+1/2} and y = LN(Z^{l+1/2}): for CRATE both are ISTA(y)."""
        code = self.ista(y)
        return code, code

    def forward_trace(self, x: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, BlockTrace]:
        """``forward``, returned with the layer's measurement trace (``crate.layers.trace``)."""
        attn_input = self.norm1(x)
        if attention:
            update, heads = self.attn.forward_trace(attn_input)
        else:
            update, heads = self.attn(attn_input), None
        z_half = x + self.drop_path1(update)
        mlp_input = self.norm2(z_half)
        z_out, code = self.sparse_step(z_half, mlp_input)
        trace = BlockTrace.record(
            x, attn_input, self.attn.subspaces, heads, z_half, self.norm1(z_half), mlp_input, code, z_out
        )
        return z_out, trace


class CRATE(TransformerClassifier):
    """CRATE classifier: patch embedding, class token and learned position embedding, L layers,
    LayerNorm and a linear head on the pooled token (the class token by default).

    ``embed_layer`` and ``block_fn`` choose the patch embedding and the layer (CRATE-alpha swaps both);
    ``final_norm_layer`` the norm before the head (default: ``norm_layer``); ``weight_init`` a function
    applied to the new model (CRATE-alpha's follows its authors' training code).
    ``global_pool="avg"`` averages the patch tokens (timm's convention); with ``pool_include_prefix=True``
    it averages every token, class token included, as the official CRATE code's ``pool="mean"`` does:
    load an official mean-pool checkpoint with ``global_pool="avg", pool_include_prefix=True``.
    ``class_token=False`` builds no class token (pool with ``"avg"`` or ``"seq"``, sequence pooling as the
    Compact Convolutional Transformers do; ``embed_layer=ConvTokenizer`` gives their convolutional tokenizer).
    ``dynamic_img_size=True`` takes any image size divisible by the patch size, the position embedding
    resampled (bicubic) from the built grid to the input's, as timm's ViT does.
    ``patch_drop_rate`` (timm's ``PatchDropout``): while training, each image keeps a random subset of its
    patch tokens (the class token always), ``floor((1 - rate) N)`` of N; a layer's cost falls with the token
    count, so 0.5 about halves a training step. Evaluation sees every token.
    """

    __constants__ = ["dynamic_img_size"]  # TorchScript compiles only the branch the model was built with

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: Literal["", "token", "avg", "seq"] = "token",
        class_token: bool = True,
        pool_include_prefix: bool = False,
        dynamic_img_size: bool = False,
        embed_dim: int = 384,
        depth: int = 12,
        num_heads: int = 6,
        head_dim: int | None = None,
        step_size: float = 0.1,
        lambd: float = 0.1,
        fc_norm: bool | None = None,
        drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
        patch_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        embed_layer: Callable[..., nn.Module] = PatchEmbed,
        block_fn: Callable[..., nn.Module] = CrateBlock,
        final_norm_layer: Callable[[int], nn.Module] | None = None,
        weight_init: Callable[[nn.Module], None] | None = None,
    ) -> None:
        super().__init__(
            num_classes, in_chans, embed_dim, global_pool, int(class_token), pool_include_prefix=pool_include_prefix
        )
        self.dynamic_img_size = dynamic_img_size
        self.has_class_token = class_token
        use_fc_norm = global_pool == "avg" if fc_norm is None else fc_norm

        self.patch_embed = embed_layer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim)
        self.patch_embed.strict_img_size = not dynamic_img_size
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim)) if class_token else None
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + self.num_prefix_tokens, embed_dim))
        self.pos_drop = nn.Dropout(pos_drop_rate)
        if not 0.0 <= patch_drop_rate < 1.0:
            raise ValueError(f"patch_drop_rate is the share of patch tokens dropped, in [0, 1); got {patch_drop_rate}")
        self.patch_drop = (
            PatchDropout(patch_drop_rate, num_prefix_tokens=self.num_prefix_tokens)
            if patch_drop_rate > 0
            else nn.Identity()
        )
        rates = [drop_path_rate * index / max(depth - 1, 1) for index in range(depth)]  # timm's linear rule
        self.blocks = nn.Sequential(
            *[
                block_fn(
                    embed_dim,
                    num_heads,
                    head_dim=head_dim,
                    step_size=step_size,
                    lambd=lambd,
                    attn_drop=attn_drop_rate,
                    proj_drop=proj_drop_rate,
                    norm_layer=norm_layer,
                    drop_path=rates[index],
                )
                for index in range(depth)
            ]
        )
        final_norm_layer = final_norm_layer or norm_layer
        norm = nn.Identity() if use_fc_norm else final_norm_layer(embed_dim)
        fc_norm = final_norm_layer(embed_dim) if use_fc_norm else nn.Identity()
        self._build_head(depth, self.patch_embed.patch_size[0], norm, fc_norm, drop_rate)
        if weight_init is not None:
            weight_init(self)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "cls_token"}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        return dict(
            stem=r"^cls_token|pos_embed|patch_embed",
            blocks=[(r"^blocks\.(\d+)", None), (r"^norm", (99999,))],
        )

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        """Patch tokens with the class token and position embedding (resampled to the input's patch grid
        when the model was built with ``dynamic_img_size=True``)."""
        x = self.patch_embed(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if self.dynamic_img_size:
            patch = self.patch_embed.patch_size
            grid = [images.shape[-2] // patch[0], images.shape[-1] // patch[1]]
            pos_embed = resample_abs_pos_embed(
                self.pos_embed,
                new_size=grid,
                old_size=list(self.patch_embed.grid_size),
                num_prefix_tokens=self.num_prefix_tokens,
            )
        else:
            pos_embed = self.pos_embed
        return self.patch_drop(self.pos_drop(x + pos_embed))


# Checkpoint filter: crate.models.convert.checkpoint_filter_fn (the official CRATE layouts and the zoo's own,
# for every family built on this model; a family passes its own conversion first as ``family_filter``).


def crate_cfg(url: str = "", **kwargs: Any) -> dict[str, Any]:
    return {
        "url": url,
        "num_classes": 1000,
        "input_size": (3, 224, 224),
        "pool_size": None,
        "crop_pct": 0.9,
        "interpolation": "bicubic",
        "fixed_input_size": True,
        "mean": IMAGENET_DEFAULT_MEAN,
        "std": IMAGENET_DEFAULT_STD,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "license": "mit",
        **kwargs,
    }


def cpu_cfg(**kwargs: Any) -> dict[str, Any]:
    """Configuration of the CPU-scale members: 32x32 inputs, no resize or crop."""
    return crate_cfg(input_size=(3, 32, 32), crop_pct=1.0, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "crate_tiny_patch16_224": crate_cfg(),
        "crate_small_patch16_224": crate_cfg(),
        "crate_base_patch16_224": crate_cfg(),
        "crate_large_patch16_224": crate_cfg(),
        "crate_base_patch8_224": crate_cfg(),
        "crate_demo_patch8_224": crate_cfg(
            num_classes=768, notes=("the authors' demo model: a 768-wide output, no class labels",)
        ),
        "crate_nano_patch4_32.digits": digits_cfg("crate_nano_patch4_32", cpu_cfg()),
        "crate_nano_patch4_32.digits_objective": dict(
            digits_cfg("crate_nano_patch4_32", cpu_cfg()),
            file=shipped_checkpoint("crate_nano_patch4_32.digits_objective.safetensors"),
            input_size=(1, 16, 16),
            notes=("the default job with the layer-objective term at weight 0.01 (--model.objective_weight 0.01)",),
        ),
        "crate_nano_patch4_32.cifar10": cifar10_cfg("crate_nano_patch4_32", cpu_cfg()),
        "crate_nano_patch4_32.cifar10_simdino": cifar10_simdino_cfg("crate_nano_patch4_32", cpu_cfg()),
        "crate_nano_patch4_32.cifar10_10k_objective": dict(
            cifar10_cfg("crate_nano_patch4_32", cpu_cfg()),
            file=shipped_checkpoint("crate_nano_patch4_32.cifar10_10k_objective.safetensors"),
            notes=(
                "trained on a 10,000-image subset of CIFAR-10's train split (1,000 a class) for 50 epochs with the "
                "layer-objective term at weight 0.01 (--model.objective_weight 0.01); val: 2,000 images of the val "
                "split",
            ),
        ),
        "crate_nano_patch4_32.*": cpu_cfg(),
        "crate_micro_patch4_32.digits": digits_cfg("crate_micro_patch4_32", cpu_cfg()),
        "crate_micro_patch4_32.cifar10": cifar10_cfg("crate_micro_patch4_32", cpu_cfg()),
        "crate_micro_patch4_32.*": cpu_cfg(),
        "crate_tiny_patch4_32": cpu_cfg(),
    }
)

# Width, heads, depth of each CPU-scale size; shared by CRATE, CRATE-alpha and the ViT twins.
CPU_SIZES: dict[str, dict[str, int]] = {
    "nano": dict(embed_dim=96, num_heads=4, depth=4),
    "micro": dict(embed_dim=192, num_heads=6, depth=6),
}


def _create_crate(
    variant: str,
    pretrained: bool = False,
    model_cls: type[CRATE] | None = None,
    family_filter: Callable[..., dict[str, torch.Tensor]] | None = None,
    **kwargs: Any,
) -> CRATE:
    """``build_model_with_cfg`` for CRATE and the families built on it (``model_cls``: CRATE-MAE): files read
    by ``crate.models.checkpoint``, converted and checked by ``checkpoint_filter_fn`` (with the family's
    own ``family_filter`` first, where it has one)."""
    feature_cfg = block_features_cfg(kwargs)
    return build_model_with_cfg(
        model_cls or CRATE,
        variant,
        pretrained,
        pretrained_filter_fn=partial(checkpoint_filter_fn, family_filter=family_filter),
        feature_cfg=feature_cfg,
        **pretrained_kwargs(variant, pretrained, kwargs),
    )


@register_model
def crate_tiny_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-T/16: d=384, K=6 heads, L=12 layers (6,090,856 parameters with 1000 classes)."""
    args = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6)
    return _create_crate("crate_tiny_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_small_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-S/16: d=576, K=12 heads, L=12 layers (13,116,328 parameters with 1000 classes)."""
    args = dict(patch_size=16, embed_dim=576, depth=12, num_heads=12)
    return _create_crate("crate_small_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_base_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-B/16: d=768, K=12 heads, L=12 layers (22,796,008 parameters with 1000 classes)."""
    args = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12)
    return _create_crate("crate_base_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_large_patch16_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-L/16: d=1024, K=16 heads, L=24 layers (77,641,192 parameters with 1000 classes)."""
    args = dict(patch_size=16, embed_dim=1024, depth=24, num_heads=16)
    return _create_crate("crate_large_patch16_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_base_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-B/8: d=768, K=12 heads, L=12 layers, 8x8 patches."""
    args = dict(patch_size=8, embed_dim=768, depth=12, num_heads=12)
    return _create_crate("crate_base_patch8_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_demo_patch8_224(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """The authors' demo CRATE (``crate-demo.pth`` of the emergence notebooks): d=768, K=6 heads of 128,
    L=12, 8x8 patches; its head is ``mlp_head``: LayerNorm and a 768 -> 768 linear map (768 outputs, what
    the demo model returns). Load the file with ``pretrained_cfg_overlay=dict(file="crate-demo.pth")``."""
    args = dict(patch_size=8, embed_dim=768, depth=12, num_heads=6, head_dim=128)
    return _create_crate("crate_demo_patch8_224", pretrained, **dict(args, **kwargs))


@register_model
def crate_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CPU-scale CRATE for 32x32 inputs: 4x4 patches, see ``CPU_SIZES['nano']``."""
    return _create_crate("crate_nano_patch4_32", pretrained, **dict(dict(patch_size=4, **CPU_SIZES["nano"]), **kwargs))


@register_model
def crate_micro_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CPU-scale CRATE for 32x32 inputs: 4x4 patches, see ``CPU_SIZES['micro']``."""
    return _create_crate(
        "crate_micro_patch4_32", pretrained, **dict(dict(patch_size=4, **CPU_SIZES["micro"]), **kwargs)
    )


@register_model
def crate_tiny_patch4_32(pretrained: bool = False, **kwargs: Any) -> CRATE:
    """CRATE-T's width and depth (d=384, K=6 heads, L=12) for 32x32 inputs with 4x4 patches (65 tokens): the
    CIFAR-10 member of a few million parameters, for one GPU."""
    args = dict(img_size=32, patch_size=4, embed_dim=384, depth=12, num_heads=6)
    return _create_crate("crate_tiny_patch4_32", pretrained, **dict(args, **kwargs))
