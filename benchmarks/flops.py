"""Model FLOPs counted the same way on every torch release.

``torch.utils.flop_counter.FlopCounterMode`` counts an operator only when that torch release registered a
formula for the exact ATen operator the call dispatches to. Scaled dot-product attention dispatches to a
different fused operator per backend and release (``_scaled_dot_product_flash_attention_for_cpu`` on the
CPU, flash / efficient / cuDNN kernels on CUDA), and some releases count nothing for some of them (torch
2.14.1 has no formula for the CPU one): the same model then reports fewer FLOPs and a lower MFU. Here the
counter is given our own formula for every fused attention operator the installed torch has, so the count
depends on the model only.

The attention formula is the two matmuls of the definition: for queries (B, H, L, E), keys (B, H, S, E) and
values (B, H, S, Ev), ``Q K^T`` costs 2 B H L S E and the weighted sum of values 2 B H L S Ev. Softmax,
scaling and masking are not counted (as for every other elementwise operator). Only forward operators are
given a formula: the benchmarks count a forward pass and take a training step as three times it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FUSED_ATTENTION_OPS", "attention_flops", "flop_counter"]

# forward fused-attention operators of the ATen library (whichever the installed torch has)
_FUSED_ATTENTION_NAMES = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)
FUSED_ATTENTION_OPS = tuple(
    getattr(torch.ops.aten, name) for name in _FUSED_ATTENTION_NAMES if hasattr(torch.ops.aten, name)
)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else tuple(value)


def attention_flops(query: Sequence[int], key: Sequence[int], value: Sequence[int]) -> int:
    """2 B H L S E + 2 B H L S Ev for (B, H, L, E) queries, (B, H, S, E) keys and (B, H, S, Ev) values."""
    *batch, length, embed = query
    keys = key[-2]
    batch_size = 1
    for size in batch:
        batch_size *= size
    return 2 * batch_size * length * keys * embed + 2 * batch_size * length * keys * value[-1]


def _fused_attention_formula(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    # FlopCounterMode hands a custom formula the shapes of the operator's tensors (or the tensors, in some
    # releases); both are read the same way
    return attention_flops(_shape(query), _shape(key), _shape(value))


def flop_counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` (no display) that also counts every fused attention operator by
    :func:`attention_flops`, whatever formulas the installed torch registered for them."""
    return FlopCounterMode(display=False, custom_mapping={op: _fused_attention_formula for op in FUSED_ATTENTION_OPS})
