"""Coding-rate quantities of the sparse rate reduction objective, per sample, tokens as rows.

For one sample Z in R^{N x d} (N tokens of dimension d; the paper writes its transpose):

    R(Z)           = 1/2 logdet(I_d + alpha Z^T Z) = 1/2 logdet(I_N + alpha Z Z^T)
    R^c(Z | U_[K]) = sum_k R(Z U_k)                  with p in place of d
    SRR(Z | U_[K]) = R(Z) - R^c(Z | U_[K]) - lambda ||Z||_1 / N

Two conventions for alpha:

- ``"paper"``: alpha = d / (N eps^2) (Yu et al., NeurIPS 2023), eps given by the caller;
- ``"official"``: the measurement code of Ma-Lab-Berkeley/CRATE: every token of every head is
  scaled to unit l2 norm first, and alpha = d / (N eps) with eps = 0.01 (note: eps, not eps^2).

Log-determinants are taken on the smaller of the two Gram matrices, in float64, by Cholesky (with
``slogdet`` as the fallback where Cholesky fails), so they are exact for N < d, N > d, rank-deficient
Z and small eps.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

__all__ = [
    "Convention",
    "OFFICIAL_EPS",
    "check_rate_settings",
    "coding_rate",
    "compression_rate",
    "default_eps",
    "identity_plus_gram",
    "logdet_identity_plus_gram",
    "sparse_rate_reduction",
    "sparsity",
]

Convention = Literal["paper", "official"]
OFFICIAL_EPS = 0.01
PAPER_EPS = 0.5


def default_eps(convention: Convention) -> float:
    """The distortion each convention is used with: 0.01 (``official``, the CRATE figures) or 0.5 (``paper``)."""
    _check_convention(convention)
    return OFFICIAL_EPS if convention == "official" else PAPER_EPS


def identity_plus_gram(Z: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """I + alpha Z Z^T or I + alpha Z^T Z for Z of shape (..., N, d), whichever is smaller (min(N, d) square; the
    two have the same determinant), in Z's dtype."""
    tokens, dim = Z.shape[-2], Z.shape[-1]
    gram = Z @ Z.transpose(-2, -1) if tokens < dim else Z.transpose(-2, -1) @ Z
    return torch.eye(gram.shape[-1], dtype=Z.dtype, device=Z.device) + alpha * gram


def logdet_identity_plus_gram(Z: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """logdet(I + alpha Z^T Z) for Z of shape (..., N, d), on the smaller Gram matrix, in float64."""
    matrix = identity_plus_gram(Z.to(torch.float64), alpha)
    factor, info = torch.linalg.cholesky_ex(matrix)
    logdet = 2.0 * torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum(-1)
    failed = info != 0
    if failed.any():
        logdet = torch.where(failed, torch.linalg.slogdet(matrix)[1], logdet)
    return logdet


def _as_batch(Z: torch.Tensor) -> torch.Tensor:
    if Z.ndim not in (2, 3):
        raise ValueError(f"expected tokens of shape (B, N, d) or (N, d), got {tuple(Z.shape)}")
    if Z.shape[-2] == 0 or Z.shape[-1] == 0:  # a rate per token (N) or per dimension (d) of nothing is no number
        raise ValueError(f"expected at least one token of at least one dimension, got shape {tuple(Z.shape)}")
    return Z.unsqueeze(0) if Z.ndim == 2 else Z


def _check_convention(convention: str) -> None:
    if convention not in ("paper", "official"):
        raise ValueError(f"convention must be 'paper' or 'official', got {convention!r}")


def check_rate_settings(eps: float, convention: str) -> None:
    """Raise a ValueError for a distortion ``eps`` that is not a finite number above 0 (the paper's squares it, so
    a negative one would pass for its absolute value) or an unknown ``convention``."""
    _check_convention(convention)
    try:
        value = float(eps)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"eps must be a finite number above 0, got {eps!r}")


def _rate(Z: torch.Tensor, eps: float, convention: Convention) -> torch.Tensor:
    """R of (B, N, d) or (B, K, N, p) tokens under a convention, shape (B,) or (B, K)."""
    tokens, dim = Z.shape[-2], Z.shape[-1]
    if convention == "official":
        Z = Z.to(torch.float64)
        Z = Z / Z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        alpha = dim / (tokens * eps)
    else:
        alpha = dim / (tokens * eps**2)
    return 0.5 * logdet_identity_plus_gram(Z, alpha)


def coding_rate(Z: torch.Tensor, eps: float = 0.5, convention: Convention = "paper") -> torch.Tensor:
    """Per-sample coding rate R(Z) = 1/2 logdet(I + d/(N eps^2) Z^T Z); Z (B, N, d) -> (B,).

    With ``convention="official"`` tokens are scaled to unit norm and alpha = d/(N eps); with
    ``eps=OFFICIAL_EPS``, applied to what the attention sees (``crate.metrics.layerwise``), this gives the
    numbers of the CRATE authors' measurement code.
    """
    check_rate_settings(eps, convention)
    return _rate(_as_batch(Z), eps, convention)


def _project(Z: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """Z (B, N, d) and U (K, d, p) -> the per-subspace coordinates Z U_k, shape (B, K, N, p)."""
    if U.ndim != 3 or U.shape[1] != Z.shape[-1]:
        raise ValueError(f"expected subspaces U of shape (K, d={Z.shape[-1]}, p), got {tuple(U.shape)}")
    return torch.einsum("bnd,kdp->bknp", Z.to(torch.float64), U.to(device=Z.device, dtype=torch.float64))


def compression_rate(
    Z: torch.Tensor, U: torch.Tensor, eps: float = 0.5, convention: Convention = "paper"
) -> torch.Tensor:
    """Per-sample compression term R^c(Z | U_[K]) = sum_k R(Z U_k), p in place of d; -> (B,)."""
    check_rate_settings(eps, convention)
    return _rate(_project(_as_batch(Z), U), eps, convention).sum(dim=-1)


def sparsity(Z: torch.Tensor) -> torch.Tensor:
    """Per-sample fraction of exact zeros of Z (B, N, d) -> (B,)."""
    Z = _as_batch(Z)
    return (Z == 0).flatten(1).to(torch.float64).mean(dim=1)


def sparse_rate_reduction(
    Z: torch.Tensor,
    U: torch.Tensor,
    eps: float = 0.5,
    lam: float = 0.1,
    convention: Convention = "paper",
) -> torch.Tensor:
    """Per-sample R(Z) - R^c(Z | U_[K]) - lam ||Z||_1 / N (the l1 norm summed over all entries); -> (B,)."""
    Z = _as_batch(Z)
    l1_per_token = Z.to(torch.float64).abs().sum(dim=(1, 2)) / Z.shape[1]
    return coding_rate(Z, eps, convention) - compression_rate(Z, U, eps, convention) - lam * l1_per_token
