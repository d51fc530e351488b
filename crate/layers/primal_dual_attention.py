"""Attention-BN and Attention-SH (Nguyen et al., ICLR 2023, "A Primal-Dual Framework for Transformers and
Neural Networks"): attentions derived as the dual of a support vector regression on normalised or
downsampled data.

Attention-BN. Per head and per sequence, the keys' mean mu and per-feature variance s^2 (over the N keys of
that sequence and head: never over the batch) centre the queries and keys and scale the keys:

    A_ij = softmax_j( (q_i - mu)^T ((k_j - mu) / (s^2 + eps)) / sqrt(p) ),    out_i = sum_j A_ij v_j

Attention-SH. Head h fits on fewer keys: its keys and values are averaged over windows of s_h consecutive
tokens (the class tokens are kept as they are; a last window shorter than s_h averages what it holds),
while the queries keep all N tokens. Its cost is N * (n_prefix + ceil((N - n_prefix) / s_h)) per head.
Seen on the N original keys, pooled weight a_m spreads as a_m / |window m| over the keys of window m, so
the maps in the trace are N x N and row-stochastic like every other attention's.

BN+SH. Both: the statistics are those of the keys the head sees (after pooling).

The functions take (B, K, N, p) queries, keys and values, so the same math serves timm's ViT layout
(:class:`PrimalDualAttention`) and CRATE's shared projection (:class:`PrimalDualMSSA`, q = k = v = U^T z).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .head_attention import HeadAttention
from .mssa import MSSA
from .trace import AttentionTrace

__all__ = [
    "AttentionBN",
    "AttentionBNSH",
    "AttentionSH",
    "PrimalDualAttention",
    "PrimalDualMSSA",
    "bn_normalise",
    "head_groups",
    "pool_tokens",
    "primal_dual_attention",
    "primal_dual_weights",
]

BN_EPS = 1e-5


def head_groups(factors: list[int] | None, num_heads: int) -> list[tuple[int, int, int]]:
    """Runs of consecutive heads with one pooling factor: [(first, end, factor), ...]; one run of 1 if None."""
    if factors is None:
        return [(0, num_heads, 1)]
    groups: list[tuple[int, int, int]] = []
    for head, factor in enumerate(factors):
        if groups and groups[-1][2] == factor:
            groups[-1] = (groups[-1][0], head + 1, factor)
        else:
            groups.append((head, head + 1, factor))
    return groups


def bn_normalise(q: torch.Tensor, k: torch.Tensor, eps: float = BN_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(q - mu, (k - mu) / (s^2 + eps)) with the keys' mean and biased variance over the sequence (dim -2)."""
    mean = k.mean(dim=-2, keepdim=True)
    variance = k.var(dim=-2, unbiased=False, keepdim=True)
    return q - mean, (k - mean) / (variance + eps)


def pool_tokens(x: torch.Tensor, factor: int, prefix: int) -> torch.Tensor:
    """(B, K, N, p) -> (B, K, prefix + ceil((N - prefix) / factor), p): windows of ``factor`` tokens
    averaged, the first ``prefix`` tokens kept."""
    if factor == 1:
        return x
    batch, heads, tokens, width = x.shape
    rest = x[:, :, prefix:].reshape(batch * heads, tokens - prefix, width).transpose(1, 2)
    pooled = F.avg_pool1d(rest, factor, factor, ceil_mode=True)
    pooled = pooled.transpose(1, 2).reshape(batch, heads, -1, width)
    return torch.cat([x[:, :, :prefix], pooled], dim=2)


def _spread(weights: torch.Tensor, factor: int, prefix: int, tokens: int) -> torch.Tensor:
    """Weights over pooled keys (..., prefix + M) -> the same weights over the N original keys."""
    if factor == 1:
        return weights
    sizes = torch.full((weights.shape[-1] - prefix,), float(factor), device=weights.device, dtype=weights.dtype)
    sizes[-1] = tokens - prefix - factor * (sizes.numel() - 1)  # the last window may be shorter
    spread = (weights[..., prefix:] / sizes).repeat_interleave(factor, dim=-1)[..., : tokens - prefix]
    return torch.cat([weights[..., :prefix], spread], dim=-1)


def primal_dual_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bn: bool,
    groups: list[tuple[int, int, int]],
    prefix: int,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Head outputs (B, K, N, p) of Attention-BN / -SH / -BN+SH, one SDPA call per run of heads."""
    outs: list[torch.Tensor] = []
    for first, end, factor in groups:
        keys = pool_tokens(k[:, first:end], factor, prefix)
        values = pool_tokens(v[:, first:end], factor, prefix)
        queries = q[:, first:end]
        if bn:
            queries, keys = bn_normalise(queries, keys)
        outs.append(F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout_p, scale=scale))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)


def primal_dual_weights(
    q: torch.Tensor, k: torch.Tensor, scale: float, bn: bool, groups: list[tuple[int, int, int]], prefix: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, weights) over the N original keys, (B, K, N, N); weights = softmax(logits)."""
    logits: list[torch.Tensor] = []
    maps: list[torch.Tensor] = []
    for first, end, factor in groups:
        queries, keys = q[:, first:end], pool_tokens(k[:, first:end], factor, prefix)
        if bn:
            queries, keys = bn_normalise(queries, keys)
        scores = torch.matmul(queries * scale, keys.transpose(-2, -1))
        if factor == 1:
            logits.append(scores)
            maps.append(scores.softmax(dim=-1))
        else:
            spread = _spread(scores.softmax(dim=-1), factor, prefix, q.shape[-2])
            logits.append(torch.log(spread))
            maps.append(spread)
    return torch.cat(logits, dim=1), torch.cat(maps, dim=1)


def _check_factors(num_heads: int, factors: tuple[int, ...] | None) -> list[int] | None:
    if factors is None:
        return None
    factors = [int(f) for f in factors]
    if len(factors) != num_heads or min(factors) < 1:
        raise ValueError(f"sh_factors must give one pooling factor >= 1 per head ({num_heads} heads), got {factors}")
    return factors


def default_sh_factors(num_heads: int) -> tuple[int, ...]:
    """Half the heads on all keys, half on keys pooled by 2."""
    return (1,) * (num_heads // 2) + (2,) * (num_heads - num_heads // 2)


class PrimalDualAttention(HeadAttention):
    """timm's ``Attention`` (same parameters) with Attention-BN (``bn=True``), Attention-SH (``sh_factors``,
    one pooling factor per head) or both; ``num_prefix_tokens`` leading tokens are never pooled."""

    def __init__(
        self,
        dim: int,
        bn: bool = False,
        sh_factors: tuple[int, ...] | None = None,
        num_prefix_tokens: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(dim, **kwargs)
        self.bn = bn
        self.sh_factors = _check_factors(self.num_heads, sh_factors)
        self.groups = head_groups(self.sh_factors, self.num_heads)
        self.num_prefix_tokens = num_prefix_tokens

    def _heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return primal_dual_attention(
            q, k, v, self.scale, self.bn, self.groups, self.num_prefix_tokens, self._dropout_p()
        )

    def _weights(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return primal_dual_weights(q, k, self.scale, self.bn, self.groups, self.num_prefix_tokens)


class AttentionBN(PrimalDualAttention):
    """Attention-BN in timm's ViT layout."""

    def __init__(self, dim: int, num_heads: int = 8, **kwargs) -> None:
        super().__init__(dim, bn=True, num_heads=num_heads, **kwargs)


class AttentionSH(PrimalDualAttention):
    """Attention-SH in timm's ViT layout, with :func:`default_sh_factors`."""

    def __init__(self, dim: int, num_heads: int = 8, **kwargs) -> None:
        super().__init__(dim, sh_factors=default_sh_factors(num_heads), num_heads=num_heads, **kwargs)


class AttentionBNSH(PrimalDualAttention):
    """Attention-BN and -SH together in timm's ViT layout, with :func:`default_sh_factors`."""

    def __init__(self, dim: int, num_heads: int = 8, **kwargs) -> None:
        super().__init__(dim, bn=True, sh_factors=default_sh_factors(num_heads), num_heads=num_heads, **kwargs)


class PrimalDualMSSA(MSSA):
    """MSSA whose heads are those of Attention-BN / -SH with q = k = v = w = U^T z (CRATE's shared projection).

    With BN the scores (w_i - mu)^T ((w_j - mu) / (s^2 + eps)) stay symmetric and positive semidefinite, as
    MSSA's are; with SH the queries see pooled keys, and the scores are no longer a Gram matrix.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        bn: bool = False,
        sh_factors: tuple[int, ...] | None = None,
        num_prefix_tokens: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(dim, num_heads, **kwargs)
        self.bn = bn
        self.sh_factors = _check_factors(num_heads, sh_factors)
        self.groups = head_groups(self.sh_factors, num_heads)
        self.num_prefix_tokens = num_prefix_tokens
        self.shared_query_key = self.sh_factors is None or max(self.sh_factors) == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.project(x)
        dropout_p = self.attn_drop if self.training else 0.0
        heads = primal_dual_attention(w, w, w, self.scale, self.bn, self.groups, self.num_prefix_tokens, dropout_p)
        return self._output(heads)

    @torch.jit.ignore
    def forward_trace(self, x: torch.Tensor) -> tuple[torch.Tensor, AttentionTrace]:
        w = self.project(x)
        logits, weights = primal_dual_weights(w, w, self.scale, self.bn, self.groups, self.num_prefix_tokens)
        dropped = F.dropout(weights, p=self.attn_drop) if self.training and self.attn_drop > 0 else weights
        return self._output(torch.matmul(dropped, w)), AttentionTrace(logits, weights, w)


def crate_attention_bn(dim: int, num_heads: int, **kwargs) -> nn.Module:
    """MSSA with BN statistics (for ``CrateBlock(attn_layer=...)``)."""
    return PrimalDualMSSA(dim, num_heads, bn=True, **kwargs)


def crate_attention_sh(dim: int, num_heads: int, **kwargs) -> nn.Module:
    """MSSA with per-head pooled keys and values, :func:`default_sh_factors` (for ``CrateBlock``)."""
    return PrimalDualMSSA(dim, num_heads, sh_factors=default_sh_factors(num_heads), **kwargs)
