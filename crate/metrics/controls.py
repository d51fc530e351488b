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

The whole objective. CRATE's layers are derived from the sparse rate reduction R(Z) - R^c(Z | U) - lambda
||Z||_1, not from R^c alone, and a shared update that aligns unit-norm tokens lowers R^c and R together. So
the same responses are measured for each term of :data:`TERMS` (the term is an argument of one code path):
R^c (the attention step should lower it), R (the expansion term) and R - R^c (the rate reduction, which the
step should raise). Per direction and term, the alignment is the cosine, per image, between the direction and
the term's improving direction at Z (-grad R^c, +grad R, +grad (R - R^c), through LN): 1 for the gradient step
(``gradient_step``, the improving direction scaled to ||Delta||_F), 0 in expectation for the nulls, with a
spread of about 1/sqrt(N d) for the i.i.d. null; a first-order figure that the update's size cannot fake.

The two subspace steps exist only for attentions whose maps are softmax scores of the same projection U
(``shared_query_key``: CRATE, CRATE-alpha); a ViT's "U" is its query projection, which no theory steps along,
and ToST has no token-by-token maps: None there.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from crate.layers.trace import BlockTrace

from .functional import PAPER_EPS, Convention, coding_rate, compression_rate, default_eps

__all__ = [
    "DIRECTIONS",
    "NULL_DRAWS",
    "NULL_SEED",
    "NULLS",
    "STEP_FRACTIONS",
    "TERMS",
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
    "gradient_step": "the term's improving direction at Z (its gradient, signed), at ||Delta||_F",
}
NULLS = ("shared_null", "iid_null")
# term: (what it is, the sign of the direction that improves it: +1 raise, -1 lower)
TERMS: dict[str, tuple[str, float]] = {
    "compression": ("R^c(LN(Z) | U), lowered by a compressing step", -1.0),
    "expansion": ("R(LN(Z)), the coding rate of all tokens, raised by the objective", 1.0),
    "rate_reduction": ("R(LN(Z)) - R^c(LN(Z) | U), raised by the objective", 1.0),
}


def objective_term(
    term: str, U: torch.Tensor, eps: float, convention: Convention
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The per-image value (B,) of a term of :data:`TERMS` on normalised tokens (B, N, d)."""
    if term == "compression":
        return lambda Y: compression_rate(Y, U, eps, convention)
    if term == "expansion":
        return lambda Y: coding_rate(Y, eps, convention)
    if term == "rate_reduction":
        return lambda Y: coding_rate(Y, eps, convention) - compression_rate(Y, U, eps, convention)
    raise ValueError(f"term must be one of {sorted(TERMS)}, got {term!r}")


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


def matched_norm(direction: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """``direction`` (D, B, N, d) scaled to the Frobenius norm ``norms`` (B,) per image."""
    own = direction.flatten(2).norm(dim=-1).clamp_min(1e-300)
    return direction * (norms / own)[..., None, None]


def update_directions(
    trace: BlockTrace, subspace_steps: bool, draws: int = NULL_DRAWS, generator: torch.Generator | None = None
) -> dict[str, torch.Tensor | None]:
    """Per direction of :data:`DIRECTIONS` but the gradient step (which depends on the term measured): the
    update (D, B, N, d) in float64, D = ``draws`` for the nulls
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
        "shared_null": matched_norm(shared, norms),
        "iid_null": matched_norm(noise, norms),
        "subspace_output": None,
        "theory_step": None,
    }
    if subspace_steps and trace.attention is not None and trace.values is not None:
        output = subspace_output(trace.attention, trace.values, trace.subspaces)
        directions["subspace_output"] = matched_norm(output[None], norms)
        step = theory_step(trace.attn_input, trace.subspaces, trace.attention)
        directions["theory_step"] = step[None]
    return directions


@dataclass
class LayerResponse:
    """One layer's controls on one term f (:data:`TERMS`), per sample, float64: ``before`` (B,) is f(LN(Z)); per
    direction (None where it does not exist) ``change`` (F, D, B) at each of the step ``fractions``, ``slope``
    (D, B) the derivative at t = 0 of f(LN(Z + t delta)), ``relative_norm`` (D, B) = ||delta||_F / ||Z||_F and
    ``alignment`` (D, B) the cosine of delta with f's improving direction at Z."""

    fractions: tuple[float, ...]
    before: torch.Tensor
    change: dict[str, torch.Tensor | None]
    slope: dict[str, torch.Tensor | None]
    relative_norm: dict[str, torch.Tensor | None]
    alignment: dict[str, torch.Tensor | None] = field(default_factory=dict)
    term: str = "compression"


def _norm_of(block: nn.Module) -> nn.Module:
    norm = getattr(block, "norm1", None)
    if norm is None:
        raise TypeError(f"{type(block).__name__} has no norm1: the compression figure needs the attention's norm")
    return copy.deepcopy(norm).to(torch.float64).eval()  # one precision for every point of a curve


def _response(
    rate: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor, delta: torch.Tensor,
    fractions: tuple[float, ...], before: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(F, D, B) changes and (D, B) slopes of ``rate`` ((B, N, d) -> (B,)), one draw at a time (a (D B, N, d)
    float64 batch would be hundreds of megabytes, and fresh memory of that size costs more than the arithmetic)."""

    changes, slopes = [], []
    for step in delta:
        with torch.no_grad():
            changes.append(torch.stack([rate(z + fraction * step) - before for fraction in fractions]))
        with torch.enable_grad():
            t = torch.zeros(len(step), dtype=torch.float64, requires_grad=True)
            (slope,) = torch.autograd.grad(rate(z + t[:, None, None] * step).sum(), t)
        slopes.append(slope)
    return torch.stack(changes, dim=1), torch.stack(slopes)


def improving_direction(rate: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor, sign: float) -> torch.Tensor:
    """``sign`` times the gradient of ``rate`` ((B, N, d) -> (B,)) at z: the direction that improves the term."""
    with torch.enable_grad():
        point = z.detach().clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(rate(point).sum(), point)
    return sign * gradient


def alignment(delta: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Cosine per image between updates (D, B, N, d) and a direction (B, N, d): (D, B)."""
    flat, target = delta.flatten(2), direction.flatten(1)[None]
    return (flat * target).sum(-1) / (flat.norm(dim=-1) * target.norm(dim=-1)).clamp_min(1e-300)


def compression_responses(
    blocks: nn.Sequential,
    traces: list[BlockTrace],
    eps: float | None = None,
    convention: Convention = "official",
    fractions: tuple[float, ...] = STEP_FRACTIONS,
    draws: int = NULL_DRAWS,
    seed: int = NULL_SEED,
    term: str = "compression",
) -> list[LayerResponse]:
    """Per layer, the change of a term of :data:`TERMS` (default R^c) along every direction of
    :data:`DIRECTIONS` at ``fractions`` of the step, its slope at 0 and each direction's alignment with the
    term's improving direction (module docstring); ``traces`` must hold the attention maps (``trace_model(...,
    attention=True)``) for the subspace steps. The nulls' draws come from one generator seeded with ``seed``."""
    if draws < 2:
        raise ValueError(f"draws must be at least 2 (the nulls' spread is over draws), got {draws}")
    if term not in TERMS:
        raise ValueError(f"term must be one of {sorted(TERMS)}, got {term!r}")
    eps = default_eps(convention) if eps is None else eps
    generator = torch.Generator().manual_seed(seed)
    layers = []
    for block, trace in zip(blocks, traces, strict=True):
        norm = _norm_of(block)
        z = trace.z_in.to(torch.float64)
        objective = objective_term(term, trace.subspaces.to(torch.float64), eps, convention)

        def rate(points: torch.Tensor, norm: nn.Module = norm, objective=objective) -> torch.Tensor:
            return objective(norm(points))

        with torch.no_grad():
            before = rate(z)
        subspace_steps = bool(getattr(getattr(block, "attn", None), "shared_query_key", False))
        directions = update_directions(trace, subspace_steps, draws, generator)
        improving = improving_direction(rate, z, TERMS[term][1])
        norms = (trace.z_half.to(torch.float64) - z).flatten(1).norm(dim=1)
        directions["gradient_step"] = matched_norm(improving[None], norms)
        response = LayerResponse(tuple(fractions), before, {}, {}, {}, {}, term)
        z_norm = z.flatten(1).norm(dim=1)
        for name, delta in directions.items():
            if delta is None:
                response.change[name] = response.slope[name] = response.relative_norm[name] = None
                response.alignment[name] = None
                continue
            delta = delta.to(z.device)
            response.change[name], response.slope[name] = _response(rate, z, delta, fractions, before)
            response.relative_norm[name] = delta.flatten(2).norm(dim=-1) / z_norm
            response.alignment[name] = alignment(delta, improving)
        layers.append(response)
    return layers


def _over_draws(per_draw: torch.Tensor) -> tuple[float, float | None]:
    """The mean over draws of a per-draw figure (D,), and its standard deviation where there are draws."""
    mean = float(per_draw.mean())
    return mean, (float(per_draw.std()) if per_draw.numel() > 1 else None)


def summarise_responses(layers: list[LayerResponse]) -> dict:
    """Per direction, per layer, means over the images (then mean and spread over the nulls' draws):
    ``change`` (per layer, a list over the step fractions), ``change_spread`` (None for one draw), ``slope``,
    ``slope_spread``, ``alignment``, ``alignment_spread``, ``relative_norm``; all None for a direction the layer
    does not have. With ``before`` per layer, the ``term`` and the step ``fractions`` measured at."""
    fractions = layers[0].fractions
    summary: dict = {"fractions": list(fractions), "before": [float(layer.before.mean()) for layer in layers]}
    summary["term"] = layers[0].term
    for name in DIRECTIONS:
        keys = ("change", "change_spread", "slope", "slope_spread", "alignment", "alignment_spread")
        entry: dict[str, list] = {key: [] for key in keys}
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
            aligned = layer.alignment.get(name)
            mean, spread = _over_draws(aligned.mean(dim=-1)) if aligned is not None else (None, None)
            entry["alignment"].append(mean)
            entry["alignment_spread"].append(spread)
        summary[name] = entry
    return summary


def full_step(summary: dict, name: str, key: str = "change") -> list[float | None]:
    """The per-layer value at the full step (fraction 1) of direction ``name`` in a summary: its ``change``,
    or with ``key="change_spread"`` the spread of that change over the draws (None for one draw)."""
    if 1.0 not in summary["fractions"]:
        raise ValueError(f"the summary has no full step (fractions {summary['fractions']})")
    index = summary["fractions"].index(1.0)
    return [None if values is None else values[index] for values in summary[name][key]]
