"""The report's figures, drawn with matplotlib's object API (no global state, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

__all__ = [
    "attention_figure",
    "coherence_figure",
    "layerwise_figure",
    "lenses_figure",
    "pca_figure",
    "probe_figure",
    "save",
]

MARKERS = ("o", "s", "^", "D")


def save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=100)
    return path


def _layers(values: list) -> np.ndarray:
    return np.arange(len(values))


def layerwise_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """R, R^c before/after attention, sparsity after the MLP/ISTA step and SRR, per layer, per model."""
    figure = Figure(figsize=(15, 3.4), layout="constrained")
    axes = figure.subplots(1, 4)
    for (label, result), marker in zip(results.items(), MARKERS, strict=False):
        curves = result["layerwise"]
        x = _layers(curves["R"])
        axes[0].plot(x, curves["R"], marker=marker, label=label)
        axes[1].plot(x, curves["Rc_before_attention"], marker=marker, label=f"{label}: before attention")
        axes[1].plot(x, curves["Rc_after_attention"], marker=marker, linestyle="--", label=f"{label}: after")
        axes[2].plot(x, curves["sparsity_after_mlp"], marker=marker, label=label)
        axes[3].plot(x, curves["srr"], marker=marker, label=label)
    titles = (
        "coding rate R(Z^l)",
        "compression term R^c(Z | U^l)",
        "sparsity after ISTA / MLP",
        "sparse rate reduction",
    )
    for axis, title in zip(axes, titles, strict=True):
        axis.set(title=title, xlabel="layer l")
        axis.legend(fontsize=7)
    axes[2].set_ylim(0, 1)
    return figure


def lenses_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """Kernel asymmetry, negative eigenvalue mass, head redundancy, entropy; per layer, mean over heads."""
    figure = Figure(figsize=(15, 3.4), layout="constrained")
    axes = figure.subplots(1, 4)
    keys = ("asymmetry", "negative_mass", "redundancy", "entropy")
    titles = (
        "kernel asymmetry ||S-S^T||/||S||",
        "negative eigenvalue mass of sym(S)",
        "head redundancy",
        "row entropy",
    )
    for (label, result), marker in zip(results.items(), MARKERS, strict=False):
        for axis, key in zip(axes, keys, strict=True):
            values = [np.mean(layer[key]) if layer[key] is not None else np.nan for layer in result["attention"]]
            axis.plot(_layers(values), values, marker=marker, label=label)
    for axis, title in zip(axes, titles, strict=True):
        axis.set(title=title, xlabel="layer l")
        axis.legend(fontsize=7)
    return figure


def probe_figure(results: dict[str, dict[str, Any]]) -> Figure:
    figure = Figure(figsize=(5, 3.4), layout="constrained")
    axis = figure.subplots()
    for (label, result), marker in zip(results.items(), MARKERS, strict=False):
        values = result["linear_probe_accuracy"]
        axis.plot(_layers(values), values, marker=marker, label=label)
    axis.set(title="linear probe accuracy per layer", xlabel="layer l", ylim=(0, 1.02))
    axis.legend(fontsize=7)
    return figure


def coherence_figure(label: str, result: dict[str, Any]) -> Figure:
    """Heatmaps of sigma_max(Q_i^T Q_j) between heads, first and last layer."""
    matrices = result["geometry"]["subspace_coherence"]
    figure = Figure(figsize=(7, 3.4), layout="constrained")
    axes = figure.subplots(1, 2)
    for axis, index in zip(axes, (0, len(matrices) - 1), strict=True):
        image = axis.imshow(np.array(matrices[index]), vmin=0, vmax=1, cmap="viridis")
        axis.set(title=f"{label}: layer {index}", xlabel="head j", ylabel="head i")
    figure.colorbar(image, ax=axes, shrink=0.8, label="coherence")
    return figure


def _display(image: torch.Tensor | np.ndarray) -> np.ndarray:
    array = image.numpy() if isinstance(image, torch.Tensor) else image
    if array.ndim == 3 and array.shape[0] in (1, 3):
        array = np.moveaxis(array, 0, -1)
    array = (array - array.min()) / max(float(array.max() - array.min()), 1e-12)
    return array[..., 0] if array.shape[-1] == 1 else array


def attention_figure(
    label: str, images: list, cls_attention: torch.Tensor, grid: tuple[int, int], layer: int
) -> Figure:
    """Rows: images; columns: the image, then each head's class-token attention over patches, overlaid."""
    rows, heads = cls_attention.shape[:2]
    figure = Figure(figsize=(1.6 * (heads + 1), 1.6 * rows), layout="constrained")
    axes = figure.subplots(rows, heads + 1, squeeze=False)
    for row in range(rows):
        picture = _display(images[row])
        extent = (0, picture.shape[1], picture.shape[0], 0)
        axes[row, 0].imshow(picture, cmap="gray")
        for head in range(heads):
            axis = axes[row, head + 1]
            axis.imshow(picture, cmap="gray", extent=extent)
            heat = cls_attention[row, head].reshape(grid).numpy()
            axis.imshow(heat, cmap="inferno", alpha=0.6, extent=extent)
            if row == 0:
                axis.set_title(f"head {head}", fontsize=8)
    for axis in axes.flat:
        axis.set_axis_off()
    figure.suptitle(f"{label}: class-token attention, layer {layer}", fontsize=9)
    return figure


def pca_figure(label: str, images: list, components: np.ndarray) -> Figure:
    """Each image next to the first three principal components of its patch features, as RGB."""
    rows = len(images)
    figure = Figure(figsize=(3.2, 1.6 * rows), layout="constrained")
    axes = figure.subplots(rows, 2, squeeze=False)
    for row in range(rows):
        axes[row, 0].imshow(_display(images[row]), cmap="gray")
        axes[row, 1].imshow(components[row])
    for axis in axes.flat:
        axis.set_axis_off()
    figure.suptitle(f"{label}: PCA of last-layer patch features", fontsize=9)
    return figure
