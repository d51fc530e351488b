"""How CBSA's contraction step changes the coding rate of its representatives.

CBSA (``crate.layers.cbsa``) pools the projected tokens of each head onto M representatives, moves them by
one step, ``reps + step_rep * softmax(reps w^T / sqrt(p)) w``, and broadcasts what the representatives then
say back to every token. Its derivation reads that step as compressing the representatives. This module
measures it, per layer and head-summed, in the coordinates the heads work in:

.. math::

    R^c(\\mathrm{reps}) = \\sum_k \\tfrac12 \\log\\det\\Big(I + \\tfrac{p}{M\\varepsilon^2}\\,
        \\mathrm{reps}_k^\\top \\mathrm{reps}_k\\Big)

before the step, after it, and after the step negated (the control: a step that compresses has a negation
that expands). The random-init model is the other control; the caller measures it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from crate.layers import CBSA
from crate.layers.trace import BlockTrace

from .functional import _rate
from .trace import trace_model, transformer_blocks

__all__ = ["RepresentativeCompression", "representative_compression"]


@dataclass
class RepresentativeCompression:
    """One CBSA layer, mean over images: R^c of the representatives before, after and after the negated step,
    and the step's norm relative to the representatives' (Frobenius, per image)."""

    layer: int
    before: float
    after: float
    negated: float
    relative_step: float

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def negated_change(self) -> float:
        return self.negated - self.before


def _head_summed_rate(reps: torch.Tensor, eps: float) -> torch.Tensor:
    return _rate(reps.to(torch.float64), eps, "paper").sum(dim=-1)  # (B, K) -> (B,)


@torch.no_grad()
def representative_compression(
    model: nn.Module, images: torch.Tensor, eps: float = 0.5, traces: list[BlockTrace] | None = None
) -> list[RepresentativeCompression]:
    """Per CBSA layer of ``model`` (in eval mode), the representatives' coding rate around the contraction
    step on ``images`` (or on the model's ``traces`` of them, where already taken); layers whose attention is
    not CBSA are left out (an empty list: no CBSA layer)."""
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    blocks = transformer_blocks(model)
    if traces is None:
        traces = trace_model(model, images)
    results = []
    for layer, (block, trace) in enumerate(zip(blocks, traces, strict=True)):
        attention = getattr(block, "attn", None)
        if not isinstance(attention, CBSA):
            continue
        _, reps, _, step = attention.contract(trace.attn_input)
        relative = step.flatten(1).norm(dim=1) / reps.flatten(1).norm(dim=1).clamp_min(1e-12)
        before = _head_summed_rate(reps, eps)
        results.append(
            RepresentativeCompression(
                layer=layer,
                before=float(before.mean()),
                after=float(_head_summed_rate(reps + step, eps).mean()),
                negated=float(_head_summed_rate(reps - step, eps).mean()),
                relative_step=float(relative.mean()),
            )
        )
    return results
