"""The layout of timm's ``Attention`` with the per-head attention core replaced.

Kernel attention and the primal-dual attentions keep everything of a ViT attention (separate query, key
and value projections in one ``qkv`` Linear, optional query/key norm, output projection) and change only
how each head turns its queries, keys and values into an output. Subclasses implement two methods:

    _heads(q, k, v)  -> (B, K, N, p)                  the fast path used by ``forward``
    _weights(q, k)   -> (logits, weights), (B, K, N, N)  explicit maps for the measurement trace, with
                                                        weights = softmax(logits) over the keys

so that ``forward_trace`` can check itself: its maps applied to the values give ``forward``'s head outputs.
The parameter names are timm's, so a ViT twin's checkpoint loads into any of them.
"""

from __future__ import annotations

from typing import Optional

import torch
from timm.layers import Attention
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from .trace import AttentionTrace

__all__ = ["HeadAttention"]


class HeadAttention(Attention):
    """timm's ``Attention`` whose head computation is defined by a subclass (see the module docstring)."""

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        return self.q_norm(q), self.k_norm(k), v

    def _finish(self, heads: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Concatenate the heads (B, K, N, p) and apply timm's output norm, gate and projection."""
        batch, _, tokens, _ = heads.shape
        out = self.norm(heads.transpose(1, 2).reshape(batch, tokens, self.attn_dim))
        if self.gate is not None:
            out = out * self.gate(x).sigmoid()
        return self.proj_drop(self.proj(out))

    def _dropout_p(self) -> float:
        return self.attn_drop.p if self.training else 0.0

    def _heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _weights(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: Optional[torch.Tensor] = None,  # noqa: UP045 (TorchScript)
        is_causal: bool = False,
    ) -> torch.Tensor:
        if not torch.jit.is_scripting():  # TorchScript skips this block
            if not is_fx_symbolic_tracing() and (attn_mask is not None or is_causal):  # traced: a proxy
                raise ValueError(f"{type(self).__name__} takes no attention mask")
        q, k, v = self._qkv(x)
        return self._finish(self._heads(q, k, v), x)

    @torch.jit.ignore
    def forward_trace(self, x: torch.Tensor) -> tuple[torch.Tensor, AttentionTrace]:
        """``forward`` with explicit scores and maps, returned with the output (for measurements)."""
        q, k, v = self._qkv(x)
        logits, weights = self._weights(q, k)
        return self._finish(torch.matmul(self.attn_drop(weights), v), x), AttentionTrace(logits, weights, v)
