"""Per-head attention of CRATE and ViT layers, recomputed from each layer's own input and weights.

For a layer with input tokens X (after its first LayerNorm):
    CRATE (MSSA):  w_k = X U_k,                S_k = w_k w_k^T / sqrt(p)    (symmetric PSD by construction)
    ViT:           q_k = X W_q,k, k_k = X W_k,k, S_k = q_k k_k^T / sqrt(p)  (neither, in general)
and A_k = softmax(S_k) row by row. S_k is the pre-softmax kernel matrix of the kernel view of attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from crate.metrics.representations import transformer_blocks

__all__ = ["LayerAttention", "layer_attention"]


@dataclass
class LayerAttention:
    """One layer's pre-softmax kernels S and attention A, both (B, K, N, N), tokens class token first."""

    kernel: torch.Tensor
    attention: torch.Tensor


def _kernel(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """S_k for every head, the products taken in float64 so that symmetry and semidefiniteness are
    measured, not rounding."""
    batch, tokens, _ = x.shape
    heads = attn.num_heads
    if hasattr(attn, "subspaces"):  # MSSA: one projection is query, key and value
        w = attn.project(x).to(torch.float64)
        return (w @ w.transpose(-2, -1)) * attn.scale
    qkv = attn.qkv(x).reshape(batch, tokens, 3, heads, -1).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]).to(torch.float64), attn.k_norm(qkv[1]).to(torch.float64)
    return (q @ k.transpose(-2, -1)) * attn.scale


@torch.no_grad()
def layer_attention(model: nn.Module, images: torch.Tensor, layers: list[int] | None = None) -> list[LayerAttention]:
    """Kernels and attention maps of the chosen layers (all by default) of a CRATE or timm ViT."""
    blocks = transformer_blocks(model)
    chosen = set(range(len(blocks)) if layers is None else [i % len(blocks) for i in layers])
    inputs: dict[int, torch.Tensor] = {}
    handles = [
        block.norm1.register_forward_hook(lambda m, a, out, i=i: inputs.__setitem__(i, out.detach()))
        for i, block in enumerate(blocks)
        if i in chosen
    ]
    try:
        model.forward_features(images)
    finally:
        for handle in handles:
            handle.remove()
    results = []
    for index in sorted(chosen):
        kernel = _kernel(blocks[index].attn, inputs[index])
        results.append(LayerAttention(kernel=kernel, attention=kernel.softmax(dim=-1)))
    return results
