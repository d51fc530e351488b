"""Per-layer white-box quantities read from a model trace: the one place they are computed and named.

The compression figure is measured the way the CRATE authors' measurement code does it: on what the
attention step actually sees, the projection U^T LN(Z^l) of the LayerNorm'd layer input, with the same
subspaces and the same norm before and after the step:

    Rc_before_attention[l] = R^c(LN_1^l(Z^l)       | U^l)
    Rc_after_attention[l]  = R^c(LN_1^l(Z^{l+1/2}) | U^l)

Under the ``official`` convention (tokens of each head scaled to unit length, alpha = p/(N eps),
eps = 0.01) ``Rc_before_attention`` equals the official code's figure (a hook on ``qkv``) on the same
weights and images. The raw residual stream Z^l grows in norm from layer to layer, so R^c of the raw
stream mixes that growth with compression; it is kept under its own names (``Rc_raw_*``), never as the
compression figure. Sparsity is the fraction of exact zeros of the sparse code where the block has one
(CRATE: the ISTA output; CRATE-alpha: the overcomplete code a_2), and of the block output for every block.
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import Metric

from crate.layers.trace import BlockTrace

from .functional import Convention, coding_rate, compression_rate, default_eps, sparse_rate_reduction, sparsity

__all__ = ["MONITORED", "QUANTITIES", "LayerwiseRates", "check_quantities", "layerwise_values", "series"]

QUANTITIES: dict[str, str] = {
    "R": "coding rate R(LN(Z^l)) of the attention input",
    "Rc_before_attention": "compression term R^c(LN(Z^l) | U^l), what the attention sees (the paper's figure)",
    "Rc_after_attention": "compression term R^c(LN(Z^{l+1/2}) | U^l), same norm and subspaces after the step",
    "Rc_raw_before_attention": "R^c(Z^l | U^l) of the raw residual stream (mixes token norm with compression)",
    "Rc_raw_after_attention": "R^c(Z^{l+1/2} | U^l) of the raw residual stream",
    "sparsity_of_code": "fraction of exact zeros of the sparse code (CRATE: ISTA output; CRATE-alpha: a_2)",
    "sparsity_of_output": "fraction of exact zeros of the block output Z^{l+1}",
    "srr": "sparse rate reduction R(Z^{l+1}) - R^c(Z^{l+1} | U^l) - lambda ||Z^{l+1}||_1 / N",
}
# What the coding-rate monitor logs by default: the paper's figures (the rest costs more per probe).
MONITORED = ("R", "Rc_before_attention", "Rc_after_attention", "sparsity_of_code", "sparsity_of_output")


def check_quantities(quantities: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """The requested quantities (all of :data:`QUANTITIES` for None), refusing unknown names."""
    if quantities is None:
        return tuple(QUANTITIES)
    unknown = [q for q in quantities if q not in QUANTITIES]
    if unknown:
        raise ValueError(f"unknown quantities {unknown}; choose from {list(QUANTITIES)}")
    return tuple(quantities)


def _value(name: str, trace: BlockTrace, eps: float, convention: Convention, lam: float) -> torch.Tensor | None:
    U = trace.subspaces
    if name == "R":
        return coding_rate(trace.attn_input, eps, convention)
    if name == "Rc_before_attention":
        return compression_rate(trace.attn_input, U, eps, convention)
    if name == "Rc_after_attention":
        return compression_rate(trace.attn_input_after, U, eps, convention)
    if name == "Rc_raw_before_attention":
        return compression_rate(trace.z_in, U, eps, convention)
    if name == "Rc_raw_after_attention":
        return compression_rate(trace.z_half, U, eps, convention)
    if name == "sparsity_of_code":
        return None if trace.sparse_code is None else sparsity(trace.sparse_code)
    if name == "sparsity_of_output":
        return sparsity(trace.z_out)
    return sparse_rate_reduction(trace.z_out, U, eps, lam, convention)


def layerwise_values(
    traces: list[BlockTrace],
    eps: float | None = None,
    convention: Convention = "official",
    lam: float = 0.1,
    quantities: tuple[str, ...] | None = None,
) -> dict[str, list[torch.Tensor | None]]:
    """Per quantity (all of :data:`QUANTITIES` by default), per layer: the per-sample values (B,) in
    float64, or None where the quantity does not apply (no sparse code). ``eps`` defaults to the
    convention's (see ``default_eps``)."""
    eps = default_eps(convention) if eps is None else eps
    return {
        name: [_value(name, trace, eps, convention, lam) for trace in traces] for name in check_quantities(quantities)
    }


def series(values: dict[str, float], quantity: str, prefix: str = "") -> list[float]:
    """The per-layer list of ``quantity`` from flat keys ``{prefix}{quantity}/layer_{l}``, layer order."""
    head = f"{prefix}{quantity}/layer_"
    layers = sorted(int(key[len(head) :]) for key in values if key.startswith(head))
    return [values[f"{head}{layer}"] for layer in layers]


class LayerwiseRates(Metric):
    r"""Means over all samples seen of every per-layer quantity of :data:`QUANTITIES`, read from traces.

    .. math::
        R^c_{\text{before}}[l] = \frac{1}{B}\sum_b \sum_k R\big(\mathrm{LN}_1^l(Z_b^l)\, U_k^l\big),\qquad
        R(Z) = \tfrac12 \log\det\big(I + \alpha Z^\top Z\big)

    with alpha = p/(N eps) on unit-norm tokens (``official``) or d/(N eps^2) (``paper``); the other
    quantities likewise (see the module docstring). States are sums and counts per quantity and layer,
    synced by summing, so the result over batches and processes is the mean over their union.

    Args:
        num_layers: the model's number of blocks.
        eps: distortion of the coding rate; None takes the convention's default (0.01 official, 0.5 paper).
        convention: ``official`` or ``paper``.
        lam: the sparsity weight lambda of the sparse rate reduction.
        quantities: which of :data:`QUANTITIES` to compute (default: all).

    Example:
        >>> import timm, torch, crate
        >>> from crate.metrics import LayerwiseRates, trace_model
        >>> model = timm.create_model("crate_nano_patch4_32", in_chans=1).eval()
        >>> metric = LayerwiseRates(num_layers=4)
        >>> metric.update(trace_model(model, torch.randn(2, 1, 32, 32), attention=False))
        >>> sorted(metric.compute())[0]
        'R/layer_0'
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False

    total: torch.Tensor
    count: torch.Tensor

    def __init__(
        self,
        num_layers: int,
        eps: float | None = None,
        convention: Convention = "official",
        lam: float = 0.1,
        quantities: tuple[str, ...] | list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        if convention not in ("paper", "official"):
            raise ValueError(f"convention must be 'paper' or 'official', got {convention!r}")
        if eps is not None and eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.num_layers = num_layers
        self.eps = default_eps(convention) if eps is None else eps
        self.convention = convention
        self.lam = lam
        self.quantities = check_quantities(quantities)
        shape = (len(self.quantities), num_layers)
        self.add_state("total", default=torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(shape, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, traces: list[BlockTrace]) -> None:
        if len(traces) != self.num_layers:
            raise ValueError(f"expected the traces of {self.num_layers} layers, got {len(traces)}")
        values = layerwise_values(traces, self.eps, self.convention, self.lam, self.quantities)
        for row, name in enumerate(self.quantities):
            for layer, per_sample in enumerate(values[name]):
                if per_sample is not None:
                    self.total[row, layer] += per_sample.sum().to(self.total.device)
                    self.count[row, layer] += per_sample.numel()

    def compute(self) -> dict[str, torch.Tensor]:
        """``{quantity}/layer_{l}`` -> mean, for every quantity and layer that had values."""
        return {
            f"{name}/layer_{layer}": self.total[row, layer] / self.count[row, layer]
            for row, name in enumerate(self.quantities)
            for layer in range(self.num_layers)
            if self.count[row, layer] > 0
        }
