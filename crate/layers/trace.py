"""The measurement trace: what one transformer block computes, recorded by the block itself.

Every block family of the zoo implements ``forward_trace(x, attention=True) -> (output, BlockTrace)``:
the same computation as ``forward`` (same output), and a record of the tensors a white-box measurement
needs. Blocks that cannot be edited (timm's ViT ``Block``) get an adapter through
:func:`register_trace_adapter`; :func:`block_tracer` finds the one to use. Metrics and lenses read the
trace and never inspect block types, so a new family joins every measurement by implementing the
protocol once.

For layer l with input Z^l (rows are tokens, B x N x d):

    attn_input        LN_1(Z^l), what the attention step sees
    subspaces         U_[K] (K, d, p): the projection the attention's compression is measured against
                      (CRATE: the shared projection; a ViT: its query projection, bias left out)
    logits            (B, K, N, N) pre-softmax attention scores, as the model computes them
    attention         (B, K, N, N) the attention maps softmax(logits)
    values            (B, K, N, p) what each head's attention averages (CRATE: w = U^T LN_1(Z^l))
    z_half            Z^{l+1/2}, after the attention step and its residual
    attn_input_after  LN_1(Z^{l+1/2}): the same layer's attention norm applied after the step, so that
                      "before" and "after" are one measurement at two points
    mlp_input         the input of the second step (LN_2(Z^{l+1/2}))
    sparse_code       the code the second step makes sparse, where it has one (CRATE: the ISTA output;
                      CRATE-alpha: the overcomplete code a_2); None for a dense MLP
    z_out             Z^{l+1}, the block output

``logits``, ``attention`` and ``values`` are None when the trace is taken with ``attention=False``
(the coding-rate monitor does not need the N x N maps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

__all__ = [
    "AttentionTrace",
    "BlockTrace",
    "TraceableBlock",
    "block_tracer",
    "register_trace_adapter",
]


@dataclass
class AttentionTrace:
    """Per-head scores, maps and values of one attention call, each (B, K, N, .)."""

    logits: torch.Tensor
    attention: torch.Tensor
    values: torch.Tensor


@dataclass
class BlockTrace:
    """What one block computed on one batch; see the module docstring for each field."""

    z_in: torch.Tensor
    attn_input: torch.Tensor
    subspaces: torch.Tensor
    logits: torch.Tensor | None
    attention: torch.Tensor | None
    values: torch.Tensor | None
    z_half: torch.Tensor
    attn_input_after: torch.Tensor
    mlp_input: torch.Tensor
    sparse_code: torch.Tensor | None
    z_out: torch.Tensor

    @classmethod
    def record(
        cls,
        z_in: torch.Tensor,
        attn_input: torch.Tensor,
        subspaces: torch.Tensor,
        heads: AttentionTrace | None,
        z_half: torch.Tensor,
        attn_input_after: torch.Tensor,
        mlp_input: torch.Tensor,
        sparse_code: torch.Tensor | None,
        z_out: torch.Tensor,
    ) -> BlockTrace:
        """A trace of detached tensors (the recorded values never hold the autograd graph)."""

        def keep(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach()

        return cls(
            z_in=keep(z_in),
            attn_input=keep(attn_input),
            subspaces=keep(subspaces),
            logits=keep(heads.logits) if heads is not None else None,
            attention=keep(heads.attention) if heads is not None else None,
            values=keep(heads.values) if heads is not None else None,
            z_half=keep(z_half),
            attn_input_after=keep(attn_input_after),
            mlp_input=keep(mlp_input),
            sparse_code=keep(sparse_code),
            z_out=keep(z_out),
        )


@runtime_checkable
class TraceableBlock(Protocol):
    """A block that records its own trace while computing its output."""

    def forward_trace(self, x: torch.Tensor, attention: bool = True) -> tuple[torch.Tensor, BlockTrace]: ...


Tracer = Callable[[torch.Tensor, bool], tuple[torch.Tensor, BlockTrace]]
_ADAPTERS: dict[type, Callable[[nn.Module, torch.Tensor, bool], tuple[torch.Tensor, BlockTrace]]] = {}


def register_trace_adapter(
    block_type: type, adapter: Callable[[nn.Module, torch.Tensor, bool], tuple[torch.Tensor, BlockTrace]]
) -> None:
    """Let blocks of ``block_type`` (a class the zoo does not own) be traced by ``adapter(block, x, attention)``."""
    _ADAPTERS[block_type] = adapter


def block_tracer(block: nn.Module) -> Tracer:
    """The ``forward_trace`` of ``block``: its own, or the adapter registered for its exact type."""
    if isinstance(block, TraceableBlock):
        return block.forward_trace
    adapter = _ADAPTERS.get(type(block))
    if adapter is None:
        raise TypeError(
            f"{type(block).__name__} does not implement forward_trace(x, attention) and has no trace adapter; "
            "white-box measurements need one (see crate.layers.trace)"
        )
    return lambda x, attention=True: adapter(block, x, attention)
