"""Controls of the sparse-coding step (ISTA) on its own objective, beside nulls of the same size.

CRATE's ISTA step is one proximal-gradient step of the non-negative LASSO

    L(x) = lambda ||x||_1 + 1/2 ||y - D x||_2^2        (per token; y = LN(Z^{l+1/2}), D the layer's dictionary)

from x_0 = y (CRATE: a square dictionary, warm start at the input) or x_0 = 0 (CRATE-alpha's overcomplete
dictionary). Its update is delta = x_1 - x_0, x_1 the layer's sparse code. As for the attention step, the
question is whether the trained step lowers its objective more than any step of its size would: the change of
L (mean over tokens) and of its l1 part along delta, a Gaussian vector shared by all tokens and i.i.d. noise,
each at ||delta||_F per image, and the objective's own descent direction (minus a subgradient of L at x_0,
sign(0) = 0) at the same norm; and each direction's alignment (cosine) with that descent direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from crate.layers.trace import BlockTrace

from .controls import NULL_DRAWS, NULL_SEED, alignment, matched_norm

__all__ = ["SPARSE_DIRECTIONS", "SparseResponse", "lasso_objective", "sparse_coding_responses", "summarise_sparse"]

SPARSE_DIRECTIONS = ("trained", "shared_null", "iid_null", "descent_step")


def lasso_objective(x: torch.Tensor, y: torch.Tensor, dictionary: torch.Tensor, lambd: float) -> torch.Tensor:
    """Per image, the mean over tokens of lambda ||x_n||_1 + 1/2 ||y_n - D x_n||^2; x (B, N, m), y (B, N, d),
    D (d, m) -> (B,)."""
    residual = y - x @ dictionary.T
    return (lambd * x.abs().sum(-1) + 0.5 * residual.pow(2).sum(-1)).mean(-1)


@dataclass
class SparseResponse:
    """One layer's sparse-coding controls, float64: ``before`` (B,) is L(x_0); per direction ``change`` and
    ``l1_change`` (D, B) at the full step, ``alignment`` (D, B) with the descent direction."""

    before: torch.Tensor
    change: dict[str, torch.Tensor]
    l1_change: dict[str, torch.Tensor]
    alignment: dict[str, torch.Tensor]


def _sparse_step(block: nn.Module) -> tuple[torch.Tensor, float] | None:
    """(the dictionary (d, m), lambda) of a block's sparse coding step, or None where it has none."""
    ista = getattr(block, "ista", None)
    dictionary = getattr(ista, "dictionary", None)
    if dictionary is None or not hasattr(ista, "lambd"):
        return None
    return dictionary.detach().to(torch.float64), float(ista.lambd)


@torch.no_grad()
def sparse_coding_responses(
    blocks: nn.Sequential, traces: list[BlockTrace], draws: int = NULL_DRAWS, seed: int = NULL_SEED
) -> list[SparseResponse | None]:
    """Per layer (None for a layer without a sparse code: a ViT's MLP, ToST), the responses of the module
    docstring; the nulls' draws from one generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    layers: list[SparseResponse | None] = []
    for block, trace in zip(blocks, traces, strict=True):
        step = _sparse_step(block)
        if step is None or trace.sparse_code is None:
            layers.append(None)
            continue
        dictionary, lambd = step
        y = trace.mlp_input.to(torch.float64)
        code = trace.sparse_code.to(torch.float64)
        start = y if code.shape[-1] == y.shape[-1] else torch.zeros_like(code)
        delta = code - start
        norms = delta.flatten(1).norm(dim=1)
        batch, tokens, width = delta.shape
        shared = torch.randn(draws, batch, 1, width, generator=generator, dtype=torch.float64)
        noise = torch.randn(draws, batch, tokens, width, generator=generator, dtype=torch.float64)
        descent = -(lambd * start.sign() + (start @ dictionary.T - y) @ dictionary)
        directions = {
            "trained": delta[None],
            "shared_null": matched_norm(shared.expand(-1, -1, tokens, -1), norms),
            "iid_null": matched_norm(noise, norms),
            "descent_step": matched_norm(descent[None], norms),
        }
        before = lasso_objective(start, y, dictionary, lambd)
        l1_before = start.abs().sum(-1).mean(-1)
        response = SparseResponse(before, {}, {}, {})
        for name, moves in directions.items():
            response.change[name] = torch.stack([lasso_objective(start + m, y, dictionary, lambd) for m in moves])
            response.change[name] -= before
            response.l1_change[name] = torch.stack([(start + m).abs().sum(-1).mean(-1) for m in moves]) - l1_before
            response.alignment[name] = alignment(moves, descent)
        layers.append(response)
    return layers


def summarise_sparse(layers: list[SparseResponse | None]) -> dict | None:
    """Per direction, per layer: the mean over images (then mean and standard deviation over the draws) of
    ``change``, ``l1_change`` and ``alignment``; None where no layer has a sparse code."""
    if all(layer is None for layer in layers):
        return None
    summary: dict = {"before": [None if layer is None else float(layer.before.mean()) for layer in layers]}
    for name in SPARSE_DIRECTIONS:
        entry: dict[str, list] = {}
        for key in ("change", "l1_change", "alignment"):
            means, spreads = [], []
            for layer in layers:
                if layer is None:
                    means.append(None)
                    spreads.append(None)
                    continue
                per_draw = getattr(layer, key)[name].mean(dim=-1)
                means.append(float(per_draw.mean()))
                spreads.append(float(per_draw.std()) if per_draw.numel() > 1 else None)
            entry[key], entry[f"{key}_spread"] = means, spreads
        summary[name] = entry
    return summary
