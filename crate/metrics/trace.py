"""Trace a whole model in one forward pass: every block's ``BlockTrace`` (see ``crate.layers.trace``).

The model runs its own ``forward_features`` (patch embedding, tokens, position embedding as it defines
them); while it runs, each block's ``forward`` is swapped for the block's ``forward_trace``, which returns
the same output and records what the block computed. Nothing of the model's code is repeated here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from crate.layers.trace import BlockTrace, block_tracer

__all__ = ["trace_model", "transformer_blocks"]


def transformer_blocks(model: nn.Module, attribute: str = "blocks") -> nn.Sequential:
    """The model's sequence of traceable blocks (``model.blocks``, or another attribute such as CRATE-MAE's
    ``decoder_blocks``), with a clear error for models that have none."""
    blocks = getattr(model, attribute, None)
    if not isinstance(blocks, nn.Sequential) or len(blocks) == 0:
        raise TypeError(
            f"{type(model).__name__} has no `{attribute}` sequence of transformer blocks; "
            "white-box measurements are defined for the zoo's transformers and timm ViTs"
        )
    for block in blocks:
        block_tracer(block)  # raises a TypeError that names the block type without a trace
    return blocks


@contextmanager
def _tracing(blocks: nn.Sequential, attention: bool) -> Iterator[list[BlockTrace]]:
    traces: list[BlockTrace] = []

    def traced(tracer):
        def forward(x: torch.Tensor) -> torch.Tensor:
            out, trace = tracer(x, attention)
            traces.append(trace)
            return out

        return forward

    for block in blocks:
        block.forward = traced(block_tracer(block))  # an instance attribute shadows the class's forward
    try:
        yield traces
    finally:
        for block in blocks:
            del block.forward


@torch.no_grad()
def trace_model(
    model: nn.Module,
    images: torch.Tensor,
    attention: bool = True,
    blocks: str = "blocks",
    forward: Callable[[torch.Tensor], Any] | None = None,
) -> list[BlockTrace]:
    """Run ``model.forward_features(images)`` once and return every block's trace, first layer first.

    ``attention=False`` leaves out the (B, K, N, N) scores and maps, for measurements that do not need them.
    ``blocks`` names another sequence of blocks and ``forward`` the call that runs through it (CRATE-MAE's
    decoder: ``blocks="decoder_blocks"``, ``forward`` its masked autoencoding pass).
    The model is run in whatever mode it is in; measurements call ``model.eval()`` first.
    """
    sequence = transformer_blocks(model, blocks)
    with _tracing(sequence, attention) as traces:
        (forward or model.forward_features)(images)
    if len(traces) != len(sequence):
        raise RuntimeError(f"traced {len(traces)} of {len(sequence)} blocks: the forward pass skipped some blocks")
    return traces
