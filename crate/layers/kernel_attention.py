"""Kernel attention (Wright & Gonzalez 2021): attention as a binary kernel machine.

Each head weighs the values by a kernel between its query and the keys, normalised over the keys:

    A_ij = kappa(q_i, k_j) / sum_j' kappa(q_i, k_j'),    out_i = sum_j A_ij v_j

with p the head width and these kernels (feature dimension = the dimension of a feature map phi with
kappa(q, k) = <phi(q), phi(k)>, where one exists):

    exp     exp(q.k / sqrt(p))                 softmax attention; infinite-dimensional features
    rbf     exp(-||q - k||^2 / (2 sqrt(p)))    Gaussian; infinite-dimensional features
    poly2   (1 + q.k / sqrt(p))^2              finite: the (p+1)(p+2)/2 monomials of degree <= 2 (about
                                               p^2/2); non-negative because it is a square
    linear  phi(q).phi(k), phi = elu + 1       finite: p features; positive, so the weights are defined,
                                               computed in O(N p^2) without forming the N x N map

exp is not a Mercer kernel on its own scale (the scores of a ViT are not symmetric); both infinite kernels
are the authors' better performers. The normaliser of poly2 and linear is guarded (at least 1e-6) so a
row whose kernel values all vanish gives zeros instead of NaN. The RBF weights are computed as a softmax
of q.k / sqrt(p) - ||k||^2 / (2 sqrt(p)): the ||q||^2 term is the same for every key of a row and cancels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .head_attention import HeadAttention

__all__ = [
    "KERNELS",
    "KernelAttention",
    "LinearKernelAttention",
    "Poly2KernelAttention",
    "RBFKernelAttention",
    "kernel_attention",
    "kernel_weights",
]

KERNELS = ("exp", "rbf", "poly2", "linear")


def _feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0, the linear kernel's feature map."""
    return F.elu(x) + 1.0


def kernel_weights(
    q: torch.Tensor, k: torch.Tensor, kernel: str, scale: float, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log kappa(q_i, k_j), A_ij): the log-kernel and the normalised weights, each (B, K, N, M).

    softmax(log kappa) over the keys is A wherever the normaliser is above ``eps``.
    """
    if kernel == "exp":
        logits = torch.matmul(q * scale, k.transpose(-2, -1))
        return logits, logits.softmax(dim=-1)
    if kernel == "rbf":
        dots = torch.matmul(q, k.transpose(-2, -1))
        squared = q.pow(2).sum(-1, keepdim=True) + k.pow(2).sum(-1).unsqueeze(-2) - 2.0 * dots
        logits = -0.5 * scale * squared
        return logits, logits.softmax(dim=-1)
    if kernel == "poly2":
        values = (1.0 + scale * torch.matmul(q, k.transpose(-2, -1))).pow(2)
    elif kernel == "linear":
        values = torch.matmul(_feature_map(q), _feature_map(k).transpose(-2, -1))
    else:
        raise ValueError("unknown kernel " + kernel + "; choose exp, rbf, poly2 or linear")
    weights = values / values.sum(-1, keepdim=True).clamp_min(eps)
    return torch.log(values.clamp_min(1e-30)), weights  # a zero poly2 value keeps a finite log


def kernel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kernel: str,
    scale: float,
    dropout_p: float = 0.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """sum_j A_ij v_j for the kernel's weights A, by the fastest route for each kernel (B, K, N, p)."""
    if kernel == "exp":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    if kernel == "rbf":
        key_bias = (-0.5 * scale) * k.pow(2).sum(-1).unsqueeze(-2)  # (B, K, 1, M), added to every row
        return F.scaled_dot_product_attention(q, k, v, attn_mask=key_bias.to(q.dtype), dropout_p=dropout_p, scale=scale)
    if kernel == "linear":
        if dropout_p > 0.0:
            raise ValueError("the linear kernel forms no attention map to drop out; use attn_drop=0")
        features_q, features_k = _feature_map(q), _feature_map(k)
        context = torch.matmul(features_k.transpose(-2, -1), v)  # (B, K, p, p): O(N p^2)
        normaliser = torch.matmul(features_q, features_k.sum(dim=-2).unsqueeze(-1))  # (B, K, N, 1)
        return torch.matmul(features_q, context) / normaliser.clamp_min(eps)
    _, weights = kernel_weights(q, k, kernel, scale, eps)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v)


class KernelAttention(HeadAttention):
    """timm's ``Attention`` (same parameters) with the weights of a kernel from ``KERNELS``.

    timm builds attention layers from a class with fixed arguments, so each kernel also has its own class:
    :class:`RBFKernelAttention`, :class:`Poly2KernelAttention`, :class:`LinearKernelAttention` (``exp`` is
    timm's own ``Attention``).
    """

    def __init__(self, dim: int, kernel: str = "exp", **kwargs) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; choose one of {KERNELS}")
        super().__init__(dim, **kwargs)
        if kernel == "linear" and self.attn_drop.p > 0:
            raise ValueError("the linear kernel forms no attention map to drop out; use attn_drop=0")
        self.kernel = kernel

    def _heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return kernel_attention(q, k, v, self.kernel, self.scale, self._dropout_p())

    def _weights(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return kernel_weights(q, k, self.kernel, self.scale)


class RBFKernelAttention(KernelAttention):
    """Kernel attention with the Gaussian kernel exp(-||q - k||^2 / (2 sqrt(p)))."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, kernel="rbf", **kwargs)


class Poly2KernelAttention(KernelAttention):
    """Kernel attention with the squared polynomial kernel (1 + q.k / sqrt(p))^2."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, kernel="poly2", **kwargs)


class LinearKernelAttention(KernelAttention):
    """Kernel attention with phi(q).phi(k), phi = elu + 1: linear in the number of tokens."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, kernel="linear", **kwargs)
