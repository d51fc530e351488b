"""Base of the coding-rate metrics: a per-sample quantity averaged exactly over all samples seen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.utilities.plot import _AX_TYPE, _PLOT_OUT_TYPE

__all__ = ["MeanOverSamples"]


class MeanOverSamples(Metric):
    """Keeps the sum of a per-sample value and the number of samples (both synced by summing), so the
    result over batches and processes is the mean over the union of the samples, never a mean of means.
    """

    is_differentiable = False
    full_state_update = False
    plot_lower_bound: float | None = None
    plot_upper_bound: float | None = None

    total: torch.Tensor
    count: torch.Tensor

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def _accumulate(self, per_sample: torch.Tensor) -> None:
        self.total += per_sample.to(torch.float64).sum()
        self.count += per_sample.numel()

    def compute(self) -> torch.Tensor:
        return self.total / self.count

    def plot(
        self, val: torch.Tensor | Sequence[torch.Tensor] | None = None, ax: _AX_TYPE | None = None
    ) -> _PLOT_OUT_TYPE:
        """Plot one value or a sequence of values (e.g. one per step) of the metric."""
        return self._plot(val, ax)
