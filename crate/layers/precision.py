"""Which low-precision path a layer takes under CPU autocast."""

from __future__ import annotations

import torch

__all__ = ["cpu_autocast_dtype"]


def cpu_autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The autocast dtype when ``x`` is on the CPU and CPU autocast is on, else ``None``.

    Eager code only: callers skip it under TorchScript (``torch.jit.is_scripting()``) and FX tracing.
    """
    if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return None
    return torch.get_autocast_dtype("cpu")
