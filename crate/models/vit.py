"""ViT twins: timm VisionTransformers with the width, depth, heads and patch size of each CPU-scale CRATE.

Every CRATE member gets a baseline that differs only in the layer: softmax attention with separate
query, key and value projections and an MLP with residual, where CRATE has MSSA and ISTA.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.layers.attention import maybe_add_mask, resolve_self_attn_mask
from timm.models import build_model_with_cfg, generate_default_cfgs
from timm.models.vision_transformer import Block, VisionTransformer
from timm.models.vision_transformer import checkpoint_filter_fn as vit_checkpoint_filter_fn
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from crate.layers import AttentionTrace, BlockTrace, ConvPatchEmbed, register_trace_adapter
from crate.layers.precision import cpu_autocast_dtype

from .checkpoint import pretrained_kwargs
from .classifier_api import block_features_cfg, check_pool, forget_label_names
from .convert import checkpoint_filter_fn
from .crate import CPU_SIZES, cpu_cfg
from .registry import register_model
from .shipped import cifar10_cfg, digits_cfg
from .state_dict_loading import LoadsZooLayouts

__all__ = ["TwinAttention", "ViTTwin", "create_vit_twin", "query_subspaces", "trace_vit_block"]


class ViTTwin(LoadsZooLayouts, VisionTransformer):
    """timm's VisionTransformer with the zoo's input check in its patch embedding and ``TwinAttention``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("embed_layer", ConvPatchEmbed)
        kwargs.setdefault("attn_layer", TwinAttention)
        super().__init__(*args, **kwargs)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if global_pool == "token":  # refused before timm changes anything (it sets num_classes first)
            check_pool(global_pool, self.has_class_token)
        super().reset_classifier(num_classes, global_pool)
        forget_label_names(self)


def query_subspaces(attn: nn.Module) -> torch.Tensor:
    """A ViT attention's query projection as subspaces U_[K] (K, d, p), its bias left out."""
    query = attn.qkv.weight[: attn.num_heads * attn.head_dim]  # (K p, d): row block k is W_q,k
    return query.reshape(attn.num_heads, attn.head_dim, -1).transpose(1, 2)


class TwinAttention(Attention):
    """timm's ``Attention`` (same parameters, same outputs) whose core is explicit matmuls under CPU autocast.

    PyTorch's CPU flash-attention backward is slow in bfloat16 at these head sizes: on this zoo's
    ``vit_nano_patch4_32`` (head dimension 24) it took more than half of the bf16 training step, which ran
    slower than the fp32 one, while the explicit core (timm's own non-fused path) ran the step 2.4x faster.
    Elsewhere (float32, CUDA) the core is ``F.scaled_dot_product_attention`` as in timm.
    """

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if not self.fused_attn or _explicit_core_is_faster(x):
            return self.explicit(x, attn_mask, is_causal)[0]
        gate = self.gate(x).sigmoid() if self.gate is not None else None
        q, k, v = self.heads(x)
        dropout = self.attn_drop.p if self.training else 0.0
        mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=is_causal)
        return self.merge_heads(mixed, gate)

    def explicit(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """timm's non-fused forward, also returning what the trace reads: (output, scores, maps, values)."""
        gate = self.gate(x).sigmoid() if self.gate is not None else None
        q, k, v = self.heads(x)
        logits = (q * self.scale) @ k.transpose(-2, -1)
        logits = maybe_add_mask(logits, resolve_self_attn_mask(x.shape[1], logits, attn_mask, is_causal))
        attention = logits.softmax(dim=-1)
        return self.merge_heads(self.attn_drop(attention) @ v, gate), logits, attention, v

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values, (batch, heads, tokens, head_dim) each, q and k normed as timm does."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        return self.q_norm(q), self.k_norm(k), v

    def merge_heads(self, mixed: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """The heads' outputs concatenated, normed, gated and projected, as timm does."""
        batch, _, tokens, _ = mixed.shape
        out = self.norm(mixed.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim))
        if gate is not None:
            out = out * gate
        return self.proj_drop(self.proj(out))


def _explicit_core_is_faster(x: torch.Tensor) -> bool:
    if not torch.jit.is_scripting():  # TorchScript and FX tracing keep timm's choice
        if not is_fx_symbolic_tracing():
            return cpu_autocast_dtype(x) is not None
    return False


def _trace_attention(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, AttentionTrace]:
    """timm's ``Attention.forward`` with explicit scores and maps (same output, same operations); an attention
    of the zoo (kernel, primal-dual) records its own."""
    if hasattr(attn, "forward_trace"):
        return attn.forward_trace(x)
    if type(attn) not in (Attention, TwinAttention):
        raise TypeError(f"the ViT trace adapter reads timm's Attention, not {type(attn).__name__}")
    if type(attn) is Attention:  # a stock timm ViT's: the twin's attributes and parameters, not its methods
        attn = copy.copy(attn)  # a view sharing the parameters, so that gradients reach the model's own
        attn.__class__ = TwinAttention
    out, logits, attention, v = attn.explicit(x)
    return out, AttentionTrace(logits, attention, v)


def trace_vit_block(block: nn.Module, x: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, BlockTrace]:
    """The measurement trace of timm's pre-norm ``Block``: U_[K] is the query projection, no sparse code."""
    attn_input = block.norm1(x)
    if attention:
        update, heads = _trace_attention(block.attn, attn_input)
    else:
        update, heads = block.attn(attn_input), None
    z_half = x + block.drop_path1(block.ls1(update))
    mlp_input = block.norm2(z_half)
    z_out = z_half + block.drop_path2(block.ls2(block.mlp(mlp_input)))
    trace = BlockTrace.record(
        x, attn_input, query_subspaces(block.attn), heads, z_half, block.norm1(z_half), mlp_input, None, z_out
    )
    return z_out, trace


register_trace_adapter(Block, trace_vit_block)


def create_vit_twin(
    variant: str, pretrained: bool = False, model_cls: type[ViTTwin] = ViTTwin, **kwargs: Any
) -> ViTTwin:
    """As every zoo family: files read by ``crate.models.checkpoint``, the same ``num_classes`` rule, the
    zoo's filter (timm's ViT conversion inside it), clear errors."""
    feature_cfg = block_features_cfg(kwargs)
    return build_model_with_cfg(
        model_cls,
        variant,
        pretrained,
        pretrained_filter_fn=partial(checkpoint_filter_fn, family_filter=vit_checkpoint_filter_fn),
        feature_cfg=feature_cfg,
        **pretrained_kwargs(variant, pretrained, kwargs),
    )


default_cfgs = generate_default_cfgs(
    {
        "vit_nano_patch4_32.digits": digits_cfg("vit_nano_patch4_32", cpu_cfg()),
        "vit_nano_patch4_32.cifar10": cifar10_cfg("vit_nano_patch4_32", cpu_cfg()),
        "vit_nano_patch4_32.*": cpu_cfg(),
        "vit_micro_patch4_32.digits": digits_cfg("vit_micro_patch4_32", cpu_cfg()),
        "vit_micro_patch4_32.cifar10": cifar10_cfg("vit_micro_patch4_32", cpu_cfg()),
        "vit_micro_patch4_32.*": cpu_cfg(),
        "vit_tiny_patch4_32": cpu_cfg(),
    }
)


@register_model
def vit_nano_patch4_32(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """ViT twin of ``crate_nano_patch4_32`` (MLP ratio 4)."""
    args = dict(patch_size=4, mlp_ratio=4.0, **CPU_SIZES["nano"])
    return create_vit_twin("vit_nano_patch4_32", pretrained, **dict(args, **kwargs))


@register_model
def vit_micro_patch4_32(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """ViT twin of ``crate_micro_patch4_32`` (MLP ratio 4)."""
    args = dict(patch_size=4, mlp_ratio=4.0, **CPU_SIZES["micro"])
    return create_vit_twin("vit_micro_patch4_32", pretrained, **dict(args, **kwargs))


@register_model
def vit_tiny_patch4_32(pretrained: bool = False, **kwargs: Any) -> ViTTwin:
    """ViT twin of ``crate_tiny_patch4_32`` at a matched parameter count: ViT-T's width (d=192, 3 heads, MLP
    ratio 4), 12 layers, 4x4 patches of 32x32 inputs."""
    args = dict(img_size=32, patch_size=4, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4.0)
    return create_vit_twin("vit_tiny_patch4_32", pretrained, **dict(args, **kwargs))
