"""Figures that training logs and the white-box report both draw, with matplotlib's object API (no global
state, no display needed)."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

__all__ = ["reconstruction_figure"]


def reconstruction_figure(
    originals: torch.Tensor, masked: torch.Tensor, reconstructions: torch.Tensor, title: str = ""
) -> Figure:
    """Rows: images; columns: masked input (masked patches blank), reconstruction (visible patches pasted
    in), original; the three of a row on the original's intensity scale."""
    rows = len(originals)
    figure = Figure(figsize=(4.2, 1.4 * rows + 0.3), layout="constrained")
    axes = figure.subplots(rows, 3, squeeze=False)
    for row in range(rows):
        low, high = float(originals[row].min()), float(originals[row].max())
        for column, image in enumerate((masked[row], reconstructions[row], originals[row])):
            array = np.moveaxis(image.detach().float().cpu().numpy(), 0, -1)
            array = np.clip((array - low) / max(high - low, 1e-12), 0, 1)
            axes[row, column].imshow(array[..., 0] if array.shape[-1] == 1 else array, cmap="gray", vmin=0, vmax=1)
    for column, name in enumerate(("masked input", "reconstruction", "original")):
        axes[0, column].set_title(name, fontsize=8)
    for axis in axes.flat:
        axis.set_axis_off()
    if title:
        figure.suptitle(title, fontsize=9)
    return figure
