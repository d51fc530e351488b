"""Multi-head subspace self-attention (MSSA): the compression step of a CRATE layer."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from .precision import cpu_autocast_dtype
from .trace import AttentionTrace

__all__ = ["MSSA", "subspace_attention"]


def _prefers_explicit_matmuls(w: torch.Tensor) -> bool:
    """True where explicit bf16 matmuls beat ``scaled_dot_product_attention`` (measured on AVX-512 bf16 CPUs).

    On CPU under bf16 autocast SDPA is not autocast and stays in fp32, and on bf16 inputs its CPU
    kernel is slower than two bf16 matmuls; everywhere else SDPA is the faster (or equal) choice.
    """
    if w.device.type != "cpu":
        return False
    return w.dtype == torch.bfloat16 or cpu_autocast_dtype(w) == torch.bfloat16


class _SharedQKVAttention(torch.autograd.Function):
    """softmax(scale w w^T) w for one tensor w (B, K, N, p), with the backward pass written for q = k = v.

    With S = scale w w^T, A = softmax(S) row-wise and O = A w, the gradient of O with respect to w has three
    terms, one through each use of w:

        dA = dO w^T,    dS = A * (dA - rowsum(A * dA)),    dw = A^T dO + scale (dS w + dS^T w).

    Autograd of the explicit form computes the same products, but through the copies and transposed layouts
    of three separate operands (query, key, value); here w is one contiguous tensor that all six matmuls
    read in place, and the scale is applied once.
    """

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, scale: float) -> torch.Tensor:
        # the scale goes on w (N x p per head), not on the N x N scores: a third of the elements at
        # CRATE-T's N = 197, p = 64
        attn = torch.matmul(w * scale, w.transpose(-2, -1)).softmax(dim=-1)
        ctx.save_for_backward(w, attn)
        ctx.scale = scale
        return torch.matmul(attn, w)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        w, attn = ctx.saved_tensors
        grad_scores = torch._softmax_backward_data(torch.matmul(grad, w.transpose(-2, -1)), attn, -1, attn.dtype)
        grad_w = torch.matmul(attn.transpose(-2, -1), grad)
        grad_w = torch.baddbmm(grad_w.flatten(0, -3), grad_scores.flatten(0, -3), w.flatten(0, -3), alpha=ctx.scale)
        grad_w = torch.baddbmm(grad_w, grad_scores.transpose(-2, -1).flatten(0, -3), w.flatten(0, -3), alpha=ctx.scale)
        return grad_w.view_as(w), None


def subspace_attention(w: torch.Tensor, scale: float, dropout_p: float = 0.0) -> torch.Tensor:
    """Attention with one tensor as query, key and value: softmax(w w^T * scale) w.

    ``w`` has shape (B, K, N, p): per head k the projected tokens w_k = U_k^T z as rows. On CPU in bf16
    (bf16 tensors or CPU bf16 autocast), eager or under ``torch.compile``, explicit bf16 matmuls are used,
    through :class:`_SharedQKVAttention` when there is no attention dropout; elsewhere, and in scripted,
    traced or exported graphs, SDPA.
    """
    if not torch.jit.is_scripting():  # TorchScript skips this block; FX tracing takes SDPA
        if not is_fx_symbolic_tracing() and _prefers_explicit_matmuls(w):
            if dropout_p == 0.0:
                low = cpu_autocast_dtype(w) or w.dtype
                with torch.autocast("cpu", enabled=False):
                    return _SharedQKVAttention.apply(w.to(low).contiguous(), scale)
            attn = torch.matmul(w * scale, w.transpose(-2, -1))
            attn = attn.softmax(dim=-1)
            if dropout_p > 0.0:
                attn = F.dropout(attn, p=dropout_p)
            return torch.matmul(attn, w)
    return F.scaled_dot_product_attention(w, w, w, dropout_p=dropout_p, scale=scale)


class MSSA(nn.Module):
    """Multi-head subspace self-attention, one gradient step on the compression term R^c.

    For tokens Z (rows are tokens here) and K subspaces U_k in R^{d x p}:

        w_k = U_k^T z                         (one shared projection is query, key and value)
        A_k = softmax(w_k^T w_k / sqrt(p))    (token-by-token similarity inside subspace k)
        MSSA(Z) = W_o [w_1 A_1; ...; w_K A_K] + b_o

    ``qkv`` stores the stacked U_k^T as a bias-free ``Linear(d, K p)``; the output projection W_o is
    a learned ``Linear(K p, d)`` (with bias, as in the official CRATE; without for CRATE-alpha).
    The CRATE block applies it as Z^{l+1/2} = Z^l + MSSA(LN(Z^l)).

    Because query and key are one projection, the pre-softmax scores w w^T / sqrt(p) are symmetric and
    positive semidefinite for any weights (``shared_query_key``): a property of the layout, not a finding.
    """

    shared_query_key = True

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        head_dim: int | None = None,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if head_dim is None:
            if dim % num_heads != 0:
                raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}; pass head_dim explicitly")
            head_dim = dim // num_heads
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, num_heads * head_dim, bias=False)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(num_heads * head_dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def subspaces(self) -> torch.Tensor:
        """The subspace bases U_[K] as a tensor of shape (K, d, p)."""
        weight = self.qkv.weight  # (K p, d): row block k is U_k^T
        return weight.reshape(self.num_heads, self.head_dim, -1).transpose(1, 2)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head coordinates w_k = U_k^T z, shape (B, K, N, p)."""
        batch, tokens, _ = x.shape
        return self.qkv(x).reshape(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def _output(self, heads: torch.Tensor) -> torch.Tensor:
        """Concatenate the heads' outputs (B, K, N, p) and apply the output projection."""
        batch, _, tokens, _ = heads.shape
        out = heads.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropout_p = self.attn_drop if self.training else 0.0
        return self._output(subspace_attention(self.project(x), self.scale, dropout_p))

    def forward_trace(self, x: torch.Tensor) -> tuple[torch.Tensor, AttentionTrace]:
        """``forward`` with explicit scores and maps, returned with the output (for measurements)."""
        w = self.project(x)
        logits = torch.matmul(w, w.transpose(-2, -1)) * self.scale
        attention = logits.softmax(dim=-1)
        dropped = F.dropout(attention, p=self.attn_drop) if self.training and self.attn_drop > 0 else attention
        return self._output(torch.matmul(dropped, w)), AttentionTrace(logits, attention, w)
