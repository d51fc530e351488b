"""Controls of the attention step's compression figure, from the same trace as the figure itself.

``Rc_after_attention`` falls below ``Rc_before_attention`` when the layer's attention step compresses the
tokens against its subspaces. A fall can also come from any large update that all tokens share (the
unit-norm measurement then sees the tokens aligned), whatever its direction. Two controls, per layer,
with the layer's own norm and subspaces, so that the figure can be read against them:

    negated:      Rc_after_attention_negated[l]     = R^c(LN_1^l(Z^l - Delta^l)     | U^l)
    theory step:  Rc_after_attention_theory_step[l] = R^c(LN_1^l(Z^l + s Delta_U^l) | U^l)

with Delta^l = Z^{l+1/2} - Z^l the trained update, Delta_U^l = sum_k (A_k W_k) U_k^T the update with the
output projection replaced by the subspaces U_[K] (the step the compression objective derives: MSSA's
output is U_[K] times the heads' outputs A_k W_k, here the heads' own maps A_k and values W_k as the model
computed them), and s = ||Delta^l||_F / ||Delta_U^l||_F per image, so that both updates have the same size.
A step that compresses because of its direction falls less (or rises) when negated; one that agrees with the
theory's step falls as that step does. Each control changes one layer's update only (the next layers are
measured on the model's own stream).
"""

from __future__ import annotations

import torch
from torch import nn

from crate.layers.trace import BlockTrace

from .functional import Convention, compression_rate, default_eps

__all__ = ["COMPRESSION_CONTROLS", "compression_controls", "theory_update"]

COMPRESSION_CONTROLS: dict[str, str] = {
    "Rc_after_attention_negated": "R^c(LN(Z^l - Delta^l) | U^l): the trained attention update with its sign flipped",
    "Rc_after_attention_theory_step": (
        "R^c(LN(Z^l + s Delta_U^l) | U^l): the update with the output projection replaced by U_[K], same norm"
    ),
}


def theory_update(trace: BlockTrace) -> torch.Tensor | None:
    """sum_k (A_k V_k) U_k^T: the heads' outputs mapped back through the subspaces, (B, N, d); None for an
    attention without token-by-token maps (ToST)."""
    if trace.attention is None or trace.values is None:
        return None
    heads = trace.attention.to(torch.float64) @ trace.values.to(torch.float64)  # (B, K, N, p)
    return torch.einsum("bknp,kdp->bnd", heads, trace.subspaces.to(torch.float64))


def _norm_of(block: nn.Module) -> nn.Module:
    norm = getattr(block, "norm1", None)
    if norm is None:
        raise TypeError(f"{type(block).__name__} has no norm1: the compression figure needs the attention's norm")
    return norm


@torch.no_grad()
def compression_controls(
    blocks: nn.Sequential,
    traces: list[BlockTrace],
    eps: float | None = None,
    convention: Convention = "official",
) -> dict[str, list[torch.Tensor | None]]:
    """Per control of :data:`COMPRESSION_CONTROLS`, per layer: the per-sample values (B,) in float64 (None
    where the layer has no attention maps). ``traces`` must hold the attention maps (``trace_model(...,
    attention=True)``)."""
    eps = default_eps(convention) if eps is None else eps
    result: dict[str, list[torch.Tensor | None]] = {name: [] for name in COMPRESSION_CONTROLS}
    for block, trace in zip(blocks, traces, strict=True):
        norm = _norm_of(block)
        z_in = trace.z_in.to(torch.float64)
        update = trace.z_half.to(torch.float64) - z_in
        negated = _in_dtype(norm, z_in - update)
        result["Rc_after_attention_negated"].append(compression_rate(negated, trace.subspaces, eps, convention))
        theory = theory_update(trace)
        if theory is None:
            result["Rc_after_attention_theory_step"].append(None)
            continue
        scale = update.flatten(1).norm(dim=1) / theory.flatten(1).norm(dim=1).clamp_min(1e-300)
        stepped = _in_dtype(norm, z_in + scale[:, None, None] * theory)
        result["Rc_after_attention_theory_step"].append(compression_rate(stepped, trace.subspaces, eps, convention))
    return result


def _in_dtype(norm: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """The block's norm applied in its parameters' dtype (the dtype the figure's own trace was computed in)."""
    dtype = next((p.dtype for p in norm.parameters()), torch.float32)
    return norm(z.to(dtype))
