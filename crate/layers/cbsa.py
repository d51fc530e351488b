"""Contract-and-broadcast self-attention (CBSA): the attention of CBT (Wen et al., NeurIPS 2025).

The compression objective of CRATE, unrolled on a few representatives instead of on every token: each head
compresses M representatives (an average pool of its projected tokens onto an r x r grid, M = r^2) against
the tokens, then broadcasts the representatives' change back to every token. For K heads of width p, the
shared projection w = U^T z (no bias; B x K x N x p) and scale = p^{-1/2}:

    R       = pool(w)                                    (B, K, M, p): the representatives
    A       = softmax_over_tokens(scale R w^T)           (B, K, M, N): how each representative reads the tokens
    R'      = R + s_R A w                                the representatives contracted (s_R per head, learned)
    S       = softmax(scale R' R'^T)                     (B, K, M, M)
    out     = s_X A^T S R'                               broadcast to the N tokens (s_X per head, learned)
    CBSA(Z) = W_o [out_1 ... out_K] + b_o

Its cost is linear in N (M fixed). With M = N and R = w it is a softmax attention, with one representative a
linear one (the authors' paper gives the special cases).

The pooling: the authors' code pools ``w[:, :-1]`` reshaped to an int(sqrt(N)) square, although its class
token is first, so the class token is pooled and the last patch token is not (``rep_pool="reference"``,
what their files were trained with). ``rep_pool="patches"`` pools the patch tokens alone on their square
grid (any side), the corrected form. Parameter names are the zoo's: ``qkv`` (the authors' ``proj``),
``step_x``, ``step_rep``, ``proj`` (their ``to_out``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from timm.layers import register_notrace_function
from torch import nn

__all__ = ["CBSA", "RepPool", "cbsa_representatives"]

RepPool = Literal["reference", "patches"]


@register_notrace_function  # the grid side comes from the token count: a leaf of timm's FX graphs
def cbsa_representatives(w: torch.Tensor, rep_grid: int, patches_only: bool, num_prefix_tokens: int) -> torch.Tensor:
    """Average-pool tokens w (B, N, C) onto ``rep_grid`` x ``rep_grid`` representatives (B, rep_grid^2, C):
    the first int(sqrt(N))^2 tokens on a square (the authors' pooling, class token included), or with
    ``patches_only`` the tokens after the ``num_prefix_tokens`` prefix on their square grid."""
    batch, tokens, channels = w.shape
    if patches_only:
        patches = tokens - num_prefix_tokens
        side = int(math.sqrt(patches))
        if side * side != patches:
            raise ValueError("rep_pool='patches' needs a square grid of patch tokens")
        grid = w[:, num_prefix_tokens:]
    else:
        side = int(math.sqrt(tokens))  # the authors' int(n ** 0.5)
        grid = w[:, : side * side]  # the authors' w[:, :-1] where N = side^2 + 1; class token first
    grid = grid.transpose(1, 2).reshape(batch, channels, side, side)
    return F.adaptive_avg_pool2d(grid, rep_grid).flatten(2).transpose(1, 2)


class CBSA(nn.Module):
    """Contract-and-broadcast self-attention (see the module docstring for the formula)."""

    shared_query_key = False  # no token-by-token map: the measurement trace records none

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        head_dim: int | None = None,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        rep_grid: int = 8,
        rep_pool: RepPool = "reference",
        num_prefix_tokens: int = 1,
    ) -> None:
        super().__init__()
        if head_dim is None and dim % num_heads != 0:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        if rep_pool not in ("reference", "patches"):
            raise ValueError(f"rep_pool must be 'reference' (the authors' pooling) or 'patches'; got {rep_pool!r}")
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        self.scale = self.head_dim**-0.5
        self.rep_grid = rep_grid
        self.rep_pool = rep_pool
        self.num_prefix_tokens = num_prefix_tokens  # the class token, first (0: a model without one)
        inner = num_heads * self.head_dim
        self.qkv = nn.Linear(dim, inner, bias=False)
        self.step_x = nn.Parameter(torch.randn(num_heads, 1, 1))
        self.step_rep = nn.Parameter(torch.randn(num_heads, 1, 1))
        self.attn_drop = attn_drop
        self.proj = nn.Linear(inner, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def subspaces(self) -> torch.Tensor:
        """U_[K] as (K, d, p): the shared projection's weight."""
        return self.qkv.weight.reshape(self.num_heads, self.head_dim, -1).transpose(1, 2)

    def representatives(self, w: torch.Tensor) -> torch.Tensor:
        """The pooled representatives of the projected tokens w (B, N, K p) -> (B, M, K p)."""
        return cbsa_representatives(w, self.rep_grid, self.rep_pool == "patches", self.num_prefix_tokens)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = t.shape
        return t.reshape(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def forward_trace(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``forward``, and no per-head record: CBSA forms no token-by-token softmax map to trace."""
        return self.forward(x), None

    def contract(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The contraction of the representatives, per head: the projected tokens w (B, K, N, p), the pooled
        representatives before their step (B, K, M, p), the read-out maps (B, K, M, N) and the step
        ``step_rep * read w`` (B, K, M, p), for the input x (B, N, d) the attention sees."""
        flat = self.qkv(x)
        w = self._heads(flat)
        reps = self._heads(self.representatives(flat))
        read = torch.matmul(reps, w.transpose(-2, -1)).mul(self.scale).softmax(dim=-1)  # (B, K, M, N)
        if self.training and self.attn_drop > 0:
            read = F.dropout(read, p=self.attn_drop)
        return w, reps, read, self.step_rep * torch.matmul(read, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._attend(x)

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        _, reps, read, step = self.contract(x)
        reps = reps + step
        mixed = torch.matmul(torch.matmul(reps, reps.transpose(-2, -1)).mul(self.scale).softmax(dim=-1), reps)
        out = self.step_x * torch.matmul(read.transpose(-2, -1), mixed)  # (B, K, N, p)
        batch, _, tokens, _ = out.shape
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, tokens, -1)))


class ViTCBSA(CBSA):
    """CBSA taking the arguments timm's ViT block passes its attention (``attn_layer``), for a ViT twin with
    CBSA in place of softmax attention: CBSA's one projection has no bias and no norms, so ``qkv_bias``,
    ``qk_norm`` and ``scale_norm`` must be off (an error says so rather than dropping them)."""

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        scale_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: type[nn.Module] | None = None,
        rep_grid: int = 4,
        rep_pool: RepPool = "patches",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        for name, value in (("qkv_bias", qkv_bias), ("qk_norm", qk_norm), ("scale_norm", scale_norm)):
            if value:
                raise ValueError(f"CBSA's projection has no bias and no norms: build the ViT with {name}=False")
        super().__init__(dim, num_heads, None, proj_bias, attn_drop, proj_drop, rep_grid, rep_pool)
        if device is not None or dtype is not None:  # timm's factory arguments
            self.to(device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        # isinstance, not "is not None": under FX tracing the arguments are proxies, which pass through
        if isinstance(attn_mask, torch.Tensor) or (isinstance(is_causal, bool) and is_causal):
            raise ValueError("CBSA attends through pooled representatives and takes no attention mask")
        return self._attend(x)  # not super().forward: TorchScript compiles no super() call
