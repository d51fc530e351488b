"""Controls of the attention step's compression figure, from the same trace as the figure itself.

The figure: ``Rc_after_attention`` below ``Rc_before_attention`` reads as "the attention step compressed
the tokens against its subspaces". With Z = Z^l the block's input, Delta = Z^{l+1/2} - Z^l the trained
update, LN the block's attention norm and U = U_[K] its subspaces, every control measures

    change(delta, t) = R^c(LN(Z + t delta) | U) - R^c(LN(Z) | U)

for an update direction ``delta`` (one layer changed at a time; the next layers keep the model's own
stream), at the step fractions t of :data:`STEP_FRACTIONS`, and its slope at t = 0 by autograd, the
first-order effect the theory's "a gradient step lowers R^c" is a claim about. The directions
(:data:`DIRECTIONS`):

    trained          Delta
    negated          -Delta
    mean_removed     Delta - mean_n Delta: the update without the part every token shares (its own norm)
    shared_null      a Gaussian vector v shared by all tokens, scaled to ||Delta||_F per image
    iid_null         i.i.d. Gaussian noise per token and channel, scaled to ||Delta||_F per image
    subspace_output  sum_k (A_k W_k) U_k^T scaled to ||Delta||_F: the heads' outputs (the model's own maps A_k
                     and values W_k) mapped back through U_[K] in place of the output projection
    theory_step      kappa gamma (gamma sum_k (A_k W_k) U_k^T - sum_k W_k U_k^T) with W_k = LN(Z) U_k:
                     the paper's MSSA step, shrink term included, at the paper's constants (below)

Why the nulls: R^c is measured on unit-norm tokens, so any large update shared by all tokens aligns them and
lowers R^c whatever its direction. A shared random vector and per-token noise at the trained update's norm
say how much of a fall (or rise) the update's size alone buys; the update without its token mean says how
much of the fall the shared part carries. Nulls are drawn ``draws`` times from a generator seeded with
``seed``; their figures are means over the draws, with the standard deviation over the draws as spread.

The theory's step (Yu et al., NeurIPS 2023): gradient descent on R^c(Z | U) = sum_k 1/2 logdet(I + gamma
(U_k^T Z)^T (U_k^T Z)), gamma = p / (N eps^2), with (I + gamma M)^{-1} ~ I - gamma M and the Gram matrix
replaced by a softmax, gives Z - kappa gamma sum_k U_k U_k^T Z + kappa gamma^2 sum_k U_k (U_k^T Z) softmax(.)
(columns are tokens there; the paper then takes sum_k U_k U_k^T ~ I for its (1 - kappa gamma) Z). Here: the
literal form before that last step, on what the attention reads (LN(Z)), with the model's own maps as the
softmax, eps the paper's 0.5 and kappa gamma = :data:`THEORY_STEP_SIZE` (0.1: the paper gives no kappa for
the attention step, its trained output projection absorbs it; 0.1 is the step size CRATE's ISTA half uses,
a 10% shrink). Its size is its own, not the trained update's. ``subspace_output`` is the step the report
called "theory step" before: the attention term alone, no shrink, at the trained update's norm.

The two subspace steps exist only for attentions whose maps are softmax scores of the same projection U
(``shared_query_key``: CRATE, CRATE-alpha); a ViT's "U" is its query projection, which no theory steps along,
and ToST has no token-by-token maps: None there.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from crate.layers.trace import BlockTrace

from .functional import PAPER_EPS, Convention, compression_rate, default_eps

__all__ = [
    "DIRECTIONS",
    "NULL_DRAWS",
    "NULL_SEED",
    "NULLS",
    "STEP_FRACTIONS",
    "THEORY_STEP_SIZE",
    "LayerResponse",
    "compression_responses",
    "full_step",
    "subspace_output",
    "summarise_responses",
    "theory_step",
    "update_directions",
]

STEP_FRACTIONS: tuple[float, ...] = (0.01, 0.05, 0.25, 1.0)
NULL_DRAWS = 8
NULL_SEED = 0
THEORY_STEP_SIZE = 0.1
DIRECTIONS: dict[str, str] = {
    "trained": "Delta = Z^{l+1/2} - Z^l, the trained attention update",
    "negated": "-Delta, the trained update with its sign flipped",
    "mean_removed": "Delta minus its mean over the tokens (its own norm)",
    "shared_null": "a Gaussian vector shared by all tokens, at ||Delta||_F per image",
    "iid_null": "i.i.d. Gaussian noise per token and channel, at ||Delta||_F per image",
    "subspace_output": "sum_k (A_k W_k) U_k^T at ||Delta||_F: the heads' outputs through U_[K], no shrink term",
    "theory_step": "kappa gamma (gamma sum_k (A_k W_k) U_k^T - sum_k W_k U_k^T): the MSSA step with its shrink term",
}
NULLS = ("shared_null", "iid_null")


def subspace_output(attention: torch.Tensor, values: torch.Tensor, subspaces: torch.Tensor) -> torch.Tensor:
    """sum_k (A_k W_k) U_k^T for maps (B, K, N, N), values (B, K, N, p), U (K, d, p) -> (B, N, d), float64."""
    heads = attention.to(torch.float64) @ values.to(torch.float64)
    return torch.einsum("bknp,kdp->bnd", heads, subspaces.to(torch.float64))


def theory_step(
    tokens: torch.Tensor,
    subspaces: torch.Tensor,
    attention: torch.Tensor,
    step_size: float = THEORY_STEP_SIZE,
    eps: float = PAPER_EPS,
) -> torch.Tensor:
    """The MSSA gradient step with its shrink term (module docstring), tokens as rows: for tokens (B, N, d),
    U (K, d, p) and maps (B, K, N, N) with rows summing to 1, ``step_size`` = kappa gamma and gamma =
    p / (N eps^2): step_size (gamma sum_k A_k W_k U_k^T - sum_k W_k U_k^T), W_k = tokens U_k; (B, N, d)."""
    tokens, subspaces = tokens.to(torch.float64), subspaces.to(torch.float64)
    gamma = subspaces.shape[-1] / (tokens.shape[-2] * eps**2)
    values = torch.einsum("bnd,kdp->bknp", tokens, subspaces)
    shrink = torch.einsum("bknp,kdp->bnd", values, subspaces)
    return step_size * (gamma * subspace_output(attention, values, subspaces) - shrink)


def _matched(direction: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """``direction`` (D, B, N, d) scaled to the Frobenius norm ``norms`` (B,) per image."""
    own = direction.flatten(2).norm(dim=-1).clamp_min(1e-300)
    return direction * (norms / own)[..., None, None]


def update_directions(
    trace: BlockTrace, subspace_steps: bool, draws: int = NULL_DRAWS, generator: torch.Generator | None = None
) -> dict[str, torch.Tensor | None]:
    """Per direction of :data:`DIRECTIONS`: the update (D, B, N, d) in float64, D = ``draws`` for the nulls
    and 1 otherwise; the two subspace steps None unless ``subspace_steps`` and the trace holds maps."""
    z_in = trace.z_in.to(torch.float64)
    delta = trace.z_half.to(torch.float64) - z_in
    norms = delta.flatten(1).norm(dim=1)
    batch, tokens, dim = delta.shape
    shared = torch.randn(draws, batch, 1, dim, generator=generator, dtype=torch.float64).expand(-1, -1, tokens, -1)
    noise = torch.randn(draws, batch, tokens, dim, generator=generator, dtype=torch.float64)
    directions: dict[str, torch.Tensor | None] = {
        "trained": delta[None],
        "negated": -delta[None],
        "mean_removed": (delta - delta.mean(dim=1, keepdim=True))[None],
        "shared_null": _matched(shared, norms),
        "iid_null": _matched(noise, norms),
        "subspace_output": None,
        "theory_step": None,
    }
    if subspace_steps and trace.attention is not None and trace.values is not None:
        output = subspace_output(trace.attention, trace.values, trace.subspaces)
        directions["subspace_output"] = _matched(output[None], norms)
        step = theory_step(trace.attn_input, trace.subspaces, trace.attention)
        directions["theory_step"] = step[None]
    return directions


@dataclass
class LayerResponse:
    """One layer's controls, per sample, float64: ``before`` (B,) is R^c(LN(Z) | U); per direction (None where
    it does not exist) ``change`` (F, D, B) at each of the step ``fractions``, ``slope`` (D, B) the derivative
    at t = 0 of R^c(LN(Z + t delta) | U), ``relative_norm`` (D, B) = ||delta||_F / ||Z||_F."""

    fractions: tuple[float, ...]
    before: torch.Tensor
    change: dict[str, torch.Tensor | None]
    slope: dict[str, torch.Tensor | None]
    relative_norm: dict[str, torch.Tensor | None]


def _norm_of(block: nn.Module) -> nn.Module:
    norm = getattr(block, "norm1", None)
    if norm is None:
        raise TypeError(f"{type(block).__name__} has no norm1: the compression figure needs the attention's norm")
    return copy.deepcopy(norm).to(torch.float64).eval()  # one precision for every point of a curve


def _response(
    norm: nn.Module, z: torch.Tensor, delta: torch.Tensor, U: torch.Tensor, eps: float, convention: Convention,
    fractions: tuple[float, ...], before: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(F, D, B) changes and (D, B) slopes, one draw at a time (a (D B, N, d) float64 batch would be
    hundreds of megabytes, and fresh memory of that size costs more than the arithmetic)."""

    def rate(points: torch.Tensor) -> torch.Tensor:  # (B, N, d) -> (B,)
        return compression_rate(norm(points), U, eps, convention)

    changes, slopes = [], []
    for step in delta:
        with torch.no_grad():
            changes.append(torch.stack([rate(z + fraction * step) - before for fraction in fractions]))
        with torch.enable_grad():
            t = torch.zeros(len(step), dtype=torch.float64, requires_grad=True)
            (slope,) = torch.autograd.grad(rate(z + t[:, None, None] * step).sum(), t)
        slopes.append(slope)
    return torch.stack(changes, dim=1), torch.stack(slopes)


def compression_responses(
    blocks: nn.Sequential,
    traces: list[BlockTrace],
    eps: float | None = None,
    convention: Convention = "official",
    fractions: tuple[float, ...] = STEP_FRACTIONS,
    draws: int = NULL_DRAWS,
    seed: int = NULL_SEED,
) -> list[LayerResponse]:
    """Per layer, the compression change along every direction of :data:`DIRECTIONS` at ``fractions`` of the
    step and its slope at 0 (module docstring); ``traces`` must hold the attention maps (``trace_model(...,
    attention=True)``) for the subspace steps. The nulls' draws come from one generator seeded with ``seed``."""
    if draws < 2:
        raise ValueError(f"draws must be at least 2 (the nulls' spread is over draws), got {draws}")
    eps = default_eps(convention) if eps is None else eps
    generator = torch.Generator().manual_seed(seed)
    layers = []
    for block, trace in zip(blocks, traces, strict=True):
        norm = _norm_of(block)
        z = trace.z_in.to(torch.float64)
        U = trace.subspaces.to(torch.float64)
        with torch.no_grad():
            before = compression_rate(norm(z), U, eps, convention)
        subspace_steps = bool(getattr(getattr(block, "attn", None), "shared_query_key", False))
        directions = update_directions(trace, subspace_steps, draws, generator)
        response = LayerResponse(fractions=tuple(fractions), before=before, change={}, slope={}, relative_norm={})
        z_norm = z.flatten(1).norm(dim=1)
        for name, delta in directions.items():
            if delta is None:
                response.change[name] = response.slope[name] = response.relative_norm[name] = None
                continue
            delta = delta.to(z.device)
            response.change[name], response.slope[name] = _response(
                norm, z, delta, U, eps, convention, fractions, before
            )
            response.relative_norm[name] = delta.flatten(2).norm(dim=-1) / z_norm
        layers.append(response)
    return layers


def _over_draws(per_draw: torch.Tensor) -> tuple[float, float | None]:
    """The mean over draws of a per-draw figure (D,), and its standard deviation where there are draws."""
    mean = float(per_draw.mean())
    return mean, (float(per_draw.std()) if per_draw.numel() > 1 else None)


def summarise_responses(layers: list[LayerResponse]) -> dict:
    """Per direction, per layer, means over the images (then mean and spread over the nulls' draws):
    ``change`` (per layer, a list over the step fractions), ``change_spread`` (None for one draw), ``slope``,
    ``slope_spread``, ``relative_norm``; all None for a direction the layer does not have. With ``before``
    per layer and the step ``fractions`` the responses were measured at."""
    fractions = layers[0].fractions
    summary: dict = {"fractions": list(fractions), "before": [float(layer.before.mean()) for layer in layers]}
    for name in DIRECTIONS:
        entry: dict[str, list] = {key: [] for key in ("change", "change_spread", "slope", "slope_spread")}
        entry["relative_norm"] = []
        for layer in layers:
            change, slope = layer.change[name], layer.slope[name]
            if change is None or slope is None:
                for values in entry.values():
                    values.append(None)
                continue
            pairs = [_over_draws(change[f].mean(dim=-1)) for f in range(len(fractions))]
            entry["change"].append([mean for mean, _ in pairs])
            entry["change_spread"].append([spread for _, spread in pairs])
            slope_mean, slope_spread = _over_draws(slope.mean(dim=-1))
            entry["slope"].append(slope_mean)
            entry["slope_spread"].append(slope_spread)
            entry["relative_norm"].append(float(layer.relative_norm[name].mean()))
        summary[name] = entry
    return summary


def full_step(summary: dict, name: str, key: str = "change") -> list[float | None]:
    """The per-layer value at the full step (fraction 1) of direction ``name`` in a summary: its ``change``,
    or with ``key="change_spread"`` the spread of that change over the draws (None for one draw)."""
    if 1.0 not in summary["fractions"]:
        raise ValueError(f"the summary has no full step (fractions {summary['fractions']})")
    index = summary["fractions"].index(1.0)
    return [None if values is None else values[index] for values in summary[name][key]]
