"""Token statistics self-attention (TSSA): ToST's attention, linear in the number of tokens.

Wu et al. (ICLR 2025) unroll a gradient step on a variational form of the rate reduction objective, in
which each head needs only second moments of its tokens instead of their pairwise similarities. For K heads
of width p (K p = d) and tokens z_1..z_N:

    w[n, k]     = U_k^T z_n (+ b_k)                               one projection, no separate q, k, v
    w_bar[:, k, j] = w[:, k, j] / ||w[:, k, j]||_2                each coordinate normalised over the tokens
    Pi[n, k]    = softmax_k( tau_k * sum_j w_bar[n, k, j]^2 )     soft assignment of token n to the heads
    m[k, j]     = sum_n Pi[n, k] w[n, k, j]^2 / (sum_n Pi[n, k] + 1e-8)   Pi-weighted second moment
    out[n, k, j] = -Pi[n, k] w[n, k, j] / (1 + m[k, j])
    TSSA(Z)     = W_o [out[:, 1]; ...; out[:, K]] + b_o

tau (K x 1, learnable, initialised to 1) is excluded from weight decay. Every step is O(N d): no N x N map
exists, so the measurement trace of a TSSA block records no attention maps. Parameter names are those of
the reference code: ``qkv``, ``temp``, ``to_out.0``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TSSA"]


class TSSA(nn.Module):
    """Token statistics self-attention (see the module docstring for the formula)."""

    shared_query_key = False  # there are no query-key scores at all

    def __init__(
        self, dim: int, num_heads: int = 8, qkv_bias: bool = False, attn_drop: float = 0.0, proj_drop: float = 0.0
    ) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim, bias=qkv_bias)
        self.temp = nn.Parameter(torch.ones(num_heads, 1))
        self.attn_drop = nn.Dropout(attn_drop)
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(proj_drop))

    @property
    def subspaces(self) -> torch.Tensor:
        """U_[K] as (K, d, p): the projection's weight, its bias left out."""
        return self.qkv.weight.reshape(self.num_heads, self.head_dim, -1).transpose(1, 2)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """w = U^T z (+ b), (B, K, N, p)."""
        batch, tokens, _ = x.shape
        return self.qkv(x).reshape(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def memberships(self, w: torch.Tensor) -> torch.Tensor:
        """Pi (B, K, N): each token's soft assignment to the heads (sums to 1 over K)."""
        normalised = F.normalize(w, dim=-2)
        return (normalised.pow(2).sum(dim=-1) * self.temp).softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.project(x)
        pi = self.memberships(w)
        weights = pi / (pi.sum(dim=-1, keepdim=True) + 1e-8)
        moments = torch.matmul(weights.unsqueeze(-2), w.pow(2))  # (B, K, 1, p): m[k, j]
        gain = self.attn_drop(1.0 / (1.0 + moments))
        out = -(w * pi.unsqueeze(-1)) * gain
        batch, _, tokens, _ = out.shape
        return self.to_out(out.transpose(1, 2).reshape(batch, tokens, -1))
