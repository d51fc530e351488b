"""Per-layer token representations of CRATE and ViT, read with forward hooks (no model code repeated).

For layer l of either family, three points along the residual stream:
    Z^l          the layer input,
    Z^{l+1/2}    after the attention step (CRATE: Z^l + MSSA(LN Z^l); ViT: after the attention residual),
    Z^{l+1}      after the second step (CRATE: ISTA(LN Z^{l+1/2}); ViT: after the MLP residual),
and the layer's subspaces U_[K] of shape (K, d, p): CRATE's shared projection, a ViT's query projection.
Both block types apply ``norm2`` to Z^{l+1/2}, so its input is read there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from crate.models import CRATE

__all__ = ["LayerRepresentation", "layer_representations", "layer_subspaces", "transformer_blocks"]


@dataclass
class LayerRepresentation:
    """The three token sets of one layer (B, N, d) and its subspaces U (K, d, p)."""

    z_in: torch.Tensor
    z_half: torch.Tensor
    z_out: torch.Tensor
    subspaces: torch.Tensor
    sparse_output: bool  # True where the second step ends in a ReLU (CRATE's ISTA)


def transformer_blocks(model: nn.Module) -> nn.Sequential:
    """The sequence of transformer blocks of a CRATE or timm ViT, with a clear error for other models."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Sequential) or not all(hasattr(b, "norm2") and hasattr(b, "attn") for b in blocks):
        raise TypeError(
            f"{type(model).__name__} has no transformer blocks with `attn` and `norm2`; "
            "per-layer representations are defined for CRATE and ViT models"
        )
    return blocks


def layer_subspaces(block: nn.Module) -> torch.Tensor:
    """U_[K] (K, d, p) of a block: CRATE's shared projection, or the query part of a ViT's qkv."""
    attn = block.attn
    if hasattr(attn, "subspaces"):
        return attn.subspaces.detach()
    heads, weight = attn.num_heads, attn.qkv.weight.detach()
    query = weight[: weight.shape[0] // 3]  # (K p, d): rows of U_k^T
    return query.reshape(heads, query.shape[0] // heads, -1).transpose(1, 2)


@contextmanager
def _recording(blocks: nn.Sequential) -> Iterator[list[dict[str, torch.Tensor]]]:
    records: list[dict[str, torch.Tensor]] = [{} for _ in blocks]
    handles = []
    for index, block in enumerate(blocks):
        record = records[index]

        def block_in(module: nn.Module, args: tuple, record: dict = record) -> None:
            record["z_in"] = args[0].detach()

        def half(module: nn.Module, args: tuple, record: dict = record) -> None:
            record["z_half"] = args[0].detach()

        def block_out(module: nn.Module, args: tuple, output: torch.Tensor, record: dict = record) -> None:
            record["z_out"] = output.detach()

        handles += [
            block.register_forward_pre_hook(block_in),
            block.norm2.register_forward_pre_hook(half),
            block.register_forward_hook(block_out),
        ]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def layer_representations(model: nn.Module, images: torch.Tensor) -> list[LayerRepresentation]:
    """Run ``model`` on ``images`` and return every layer's Z^l, Z^{l+1/2}, Z^{l+1} and U_[K]."""
    blocks = transformer_blocks(model)
    with _recording(blocks) as records:
        model.forward_features(images)
    sparse = isinstance(model, CRATE)
    return [
        LayerRepresentation(r["z_in"], r["z_half"], r["z_out"], layer_subspaces(block), sparse)
        for r, block in zip(records, blocks, strict=True)
    ]
