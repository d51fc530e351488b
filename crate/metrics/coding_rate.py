"""torchmetrics Metrics of the sparse rate reduction objective: R, R^c, sparsity and their combination."""

from __future__ import annotations

import math
from typing import Any

import torch

from .functional import (
    Convention,
    check_rate_settings,
    coding_rate,
    compression_rate,
    sparse_rate_reduction,
    sparsity,
)
from .mean_over_samples import MeanOverSamples

__all__ = ["CodingRate", "CompressionRate", "SparseRateReduction", "Sparsity"]


class _RateMetric(MeanOverSamples):
    """A coding-rate quantity with its distortion ``eps`` and ``convention`` (see ``functional``)."""

    plot_lower_bound = 0.0

    def __init__(self, eps: float = 0.5, convention: Convention = "paper", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_rate_settings(eps, convention)
        self.eps = eps
        self.convention = convention


class CodingRate(_RateMetric):
    """Mean per-sample coding rate R(Z) = 1/2 logdet(I + d/(N eps^2) Z^T Z) of token sets Z (B, N, d)."""

    higher_is_better = True

    def update(self, Z: torch.Tensor) -> None:
        self._accumulate(coding_rate(Z, self.eps, self.convention))


class CompressionRate(_RateMetric):
    """Mean per-sample compression term R^c(Z | U_[K]) = sum_k R(Z U_k); ``update(Z, U)`` with U (K, d, p)."""

    higher_is_better = False

    def update(self, Z: torch.Tensor, U: torch.Tensor) -> None:
        self._accumulate(compression_rate(Z, U, self.eps, self.convention))


class Sparsity(MeanOverSamples):
    """Mean per-sample fraction of exact zeros of Z (B, N, d)."""

    higher_is_better = True
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def update(self, Z: torch.Tensor) -> None:
        self._accumulate(sparsity(Z))


class SparseRateReduction(_RateMetric):
    """Mean per-sample R(Z) - R^c(Z | U_[K]) - lam ||Z||_1 / N; ``update(Z, U)``."""

    higher_is_better = True
    plot_lower_bound = None

    def __init__(self, eps: float = 0.5, lam: float = 0.1, convention: Convention = "paper", **kwargs: Any) -> None:
        super().__init__(eps, convention, **kwargs)
        if not math.isfinite(lam):
            raise ValueError(f"lam must be a finite number, got {lam!r}")
        self.lam = lam

    def update(self, Z: torch.Tensor, U: torch.Tensor) -> None:
        self._accumulate(sparse_rate_reduction(Z, U, self.eps, self.lam, self.convention))
