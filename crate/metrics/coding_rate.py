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
    """Mean per-sample coding rate of token sets: how many nats their tokens take to code up to distortion eps.

        R(Z) = 1/2 logdet(I + alpha Z^T Z),  alpha = d / (N eps^2)

    for one sample's N tokens of dimension d (``convention="official"``: the CRATE measurement's alpha and unit
    tokens, see :mod:`crate.metrics.functional`). The mean is over every sample seen, in every process.

    As input to ``forward`` and ``update`` the metric accepts the following input:

    - ``Z`` (tensor): token sets of shape (B, N, d), or one set (N, d)

    As output of ``forward`` and ``compute`` the metric returns the following output:

    - ``coding_rate`` (tensor): the mean R over the samples, float64

    Args:
        eps: the distortion.
        convention: ``"paper"`` or ``"official"``.
        kwargs: torchmetrics' ``Metric`` arguments.

    Example:
        Two orthonormal tokens in 2 dimensions: alpha = 2 / (2 * 0.25) = 4, so R = 1/2 logdet(5 I) = log 5:

        >>> import torch
        >>> from crate.metrics import CodingRate
        >>> metric = CodingRate(eps=0.5)
        >>> metric(torch.eye(2).unsqueeze(0))
        tensor(1.6094, dtype=torch.float64)
    """

    higher_is_better = True

    def update(self, Z: torch.Tensor) -> None:
        self._accumulate(coding_rate(Z, self.eps, self.convention))


class CompressionRate(_RateMetric):
    """Mean per-sample compression term: the coding rate of the tokens within each of K subspaces, summed.

        R^c(Z | U_[K]) = sum over k of R(Z U_k)

    with each R(Z U_k) taken at the subspace's dimension p in place of d (MSSA's step descends it).

    As input to ``forward`` and ``update`` the metric accepts the following input:

    - ``Z`` (tensor): token sets of shape (B, N, d), or one set (N, d)
    - ``U`` (tensor): the subspaces U_[K], shape (K, d, p)

    As output of ``forward`` and ``compute`` the metric returns the following output:

    - ``compression_rate`` (tensor): the mean R^c over the samples, float64

    Args:
        eps: the distortion.
        convention: ``"paper"`` or ``"official"``.
        kwargs: torchmetrics' ``Metric`` arguments.

    Example:
        Two orthonormal tokens against the two coordinate axes: each axis holds one token, R(Z U_k) = 1/2 log(1 +
        1 / (2 * 0.25)) = 1/2 log 3, and the two sum to log 3:

        >>> import torch
        >>> from crate.metrics import CompressionRate
        >>> metric = CompressionRate(eps=0.5)
        >>> metric(torch.eye(2).unsqueeze(0), torch.eye(2).reshape(2, 2, 1))
        tensor(1.0986, dtype=torch.float64)
    """

    higher_is_better = False

    def update(self, Z: torch.Tensor, U: torch.Tensor) -> None:
        self._accumulate(compression_rate(Z, U, self.eps, self.convention))


class Sparsity(MeanOverSamples):
    """Mean per-sample fraction of exact zeros of the tokens: what the ISTA step makes sparse.

    As input to ``forward`` and ``update`` the metric accepts the following input:

    - ``Z`` (tensor): token sets of shape (B, N, d), or one set (N, d)

    As output of ``forward`` and ``compute`` the metric returns the following output:

    - ``sparsity`` (tensor): the mean fraction of zeros over the samples, float64

    Args:
        kwargs: torchmetrics' ``Metric`` arguments.

    Example:
        >>> import torch
        >>> from crate.metrics import Sparsity
        >>> metric = Sparsity()
        >>> metric(torch.tensor([[[0.0, 1.0], [0.0, 0.0]]]))
        tensor(0.7500, dtype=torch.float64)
    """

    higher_is_better = True
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def update(self, Z: torch.Tensor) -> None:
        self._accumulate(sparsity(Z))


class SparseRateReduction(_RateMetric):
    """Mean per-sample sparse rate reduction, the objective CRATE's layers are steps of.

        R(Z) - R^c(Z | U_[K]) - lam ||Z||_1 / N

    As input to ``forward`` and ``update`` the metric accepts the following input:

    - ``Z`` (tensor): token sets of shape (B, N, d), or one set (N, d)
    - ``U`` (tensor): the subspaces U_[K], shape (K, d, p)

    As output of ``forward`` and ``compute`` the metric returns the following output:

    - ``sparse_rate_reduction`` (tensor): the mean objective over the samples, float64

    Args:
        eps: the distortion.
        lam: the weight of the sparsity term.
        convention: ``"paper"`` or ``"official"``.
        kwargs: torchmetrics' ``Metric`` arguments.

    Example:
        The tokens and subspaces of the other examples: log 5 - log 3 - 0.1 * 2 / 2:

        >>> import torch
        >>> from crate.metrics import SparseRateReduction
        >>> metric = SparseRateReduction(eps=0.5, lam=0.1)
        >>> metric(torch.eye(2).unsqueeze(0), torch.eye(2).reshape(2, 2, 1))
        tensor(0.4108, dtype=torch.float64)
    """

    higher_is_better = True
    plot_lower_bound = None

    def __init__(self, eps: float = 0.5, lam: float = 0.1, convention: Convention = "paper", **kwargs: Any) -> None:
        super().__init__(eps, convention, **kwargs)
        if not math.isfinite(lam):
            raise ValueError(f"lam must be a finite number, got {lam!r}")
        self.lam = lam

    def update(self, Z: torch.Tensor, U: torch.Tensor) -> None:
        self._accumulate(sparse_rate_reduction(Z, U, self.eps, self.lam, self.convention))
