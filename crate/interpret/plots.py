"""The report's figures, drawn with matplotlib's object API (no global state, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure, SubFigure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

from crate.metrics.controls import full_step

__all__ = [
    "attention_figure",
    "coherence_figure",
    "layerwise_figure",
    "lenses_figure",
    "pca_figure",
    "probe_figure",
    "save",
    "seeds_figure",
    "segmentation_figure",
]

MARKERS = ("o", "s", "^", "D")
_PALETTE = "tab20"  # 20 distinct colours: one per curve of the layer-wise panels (4 a model)


def _curve_colour(model: int, curve: int) -> tuple[float, ...]:
    """The colour of curve ``curve`` (0-3) of model ``model`` in the layer-wise panels: each its own."""
    from matplotlib import colormaps

    return colormaps[_PALETTE]((4 * model + curve) % 20)


def _init_values(result: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The random-init control's figures merged over the trained model's (None without controls)."""
    initial = (result.get("controls") or {}).get("random_init")
    return None if initial is None or key not in initial else dict(result, **initial)


def save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=100)
    return path


def _layers(values: list) -> np.ndarray:
    return np.arange(len(values))


def _layer_axis(axis: Any, title: str, ylabel: str = "", **settings: Any) -> None:
    """A panel over layers: whole-number layer ticks, a title, a y-axis label, and where there are labels a
    legend below the panel (outside the curves)."""
    axis.set(title=title, xlabel="layer l", ylabel=ylabel, **settings)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)


LEGEND_FONT_SIZE = 8
_LEGEND_KEY_WIDTH = 0.75  # inches a legend column takes beside its text: the line sample and the padding


def _legend_below(figure: Figure | SubFigure, axes: Any) -> int:
    """One legend under the panels ``axes`` share, in as many columns as the figure's width holds (each as wide
    as the longest label, measured in the legend's font), in place of the panels' own legends; labels that
    repeat are listed once. Returns the legend's number of rows (0: nothing to list)."""
    entries: dict[str, Any] = {}
    for axis in axes:
        if axis.get_legend() is not None:
            axis.get_legend().remove()
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return 0
    font = FontProperties(size=LEGEND_FONT_SIZE)
    widest = max(TextToPath().get_text_width_height_descent(label, font, ismath=False)[0] for label in entries) / 72
    width = figure.get_figure(root=True).get_figwidth()
    columns = max(1, min(len(entries), int(0.95 * width // (widest + _LEGEND_KEY_WIDTH))))
    figure.legend(
        list(entries.values()), list(entries), loc="outside lower center", ncol=columns,
        fontsize=LEGEND_FONT_SIZE, frameon=False,
    )  # fmt: skip
    return -(-len(entries) // columns)


def _grow_for_legend(figure: Figure, rows: int) -> None:
    """Make ``figure`` taller by the height of a legend of ``rows`` rows below it, so its panels keep theirs."""
    figure.set_figheight(figure.get_figheight() + rows * 1.6 * LEGEND_FONT_SIZE / 72)


def _values(values: list | None) -> np.ndarray:
    """Per-layer values as floats, a layer without the quantity (None) as NaN (not drawn)."""
    return np.array([np.nan if v is None else v for v in values or []], dtype=float)


# The compression controls drawn beside the trained step: (direction, label, marker, colour, line style).
CONTROL_STYLES = (
    ("negated", "trained update negated", "v", "C3", "--"),
    ("mean_removed", "update without its token mean", "P", "C1", ":"),
    ("shared_null", "null: shared random vector (same norm)", "x", "C4", "-"),
    ("iid_null", "null: i.i.d. noise (same norm)", "+", "C5", "-"),
    ("theory_step", "theory's MSSA step (with shrink)", "^", "C2", "-."),
    ("subspace_output", "heads' outputs through U_[K] (same norm)", "*", "C8", ":"),
)


def _control_curves(axis: Any, summary: dict[str, Any], x: np.ndarray, slope: bool) -> None:
    """The controls' curves of one panel: full-step changes, or slopes at 0; the nulls with their spread."""
    for name, label, marker, color, line in CONTROL_STYLES:
        values = _values(summary[name]["slope"] if slope else full_step(summary, name))
        if not np.isfinite(values).any():  # not defined for this model (no subspaces U_[K], no maps)
            continue
        spread = _values(summary[name]["slope_spread"] if slope else full_step(summary, name, "change_spread"))
        axis.plot(x, values, marker=marker, color=color, linestyle=line, label=label, markersize=5)
        if np.isfinite(spread).any():  # the nulls' standard deviation over their draws
            axis.errorbar(x, values, yerr=spread, fmt="none", ecolor=color, capsize=3)


def _controls_panel(axis: Any, label: str, result: dict[str, Any], convention: str = "official") -> None:
    """The attention step's change of R^c per layer (after minus before; below 0: compressed), trained,
    beside its controls: the same architecture at initialisation and the directions of
    ``crate.metrics.controls`` (the update negated and without its token mean, the matched-norm nulls with
    their spread over draws, the theory's step), each at its full step."""
    curves = result["layerwise"][convention]
    before, after = _values(curves["Rc_before_attention"]), _values(curves["Rc_after_attention"])
    x = _layers(before)
    axis.axhline(0.0, color="gray", linewidth=0.8)
    axis.plot(x, after - before, marker="o", color="C0", linewidth=2, label="trained")
    controls = result.get("controls") or {}
    initial = controls.get("random_init") or {}
    initial_curves = initial.get("layerwise", {}).get(convention, {})  # the mean over the init seeds
    init_change = _values(initial_curves.get("Rc_after_attention")) - _values(initial_curves.get("Rc_before_attention"))
    if init_change.size == before.size and np.isfinite(init_change).any():
        seeds = initial.get("init_seeds", [])
        axis.plot(
            x, init_change, marker="s", color="C7",
            label=f"untrained ({len(seeds)} init seeds)" if seeds else "untrained",
        )  # fmt: skip
    summary = (controls.get("compression") or {}).get(convention)
    if summary:
        _control_curves(axis, summary, x, slope=False)
    _layer_axis(
        axis, f"{label}\nfull step: R^c after - before attention ({convention})", "change of R^c (< 0: compressed)"
    )


def _slopes_panel(axis: Any, label: str, result: dict[str, Any], convention: str = "official") -> None:
    """d/dt R^c(LN(Z + t delta) | U) at t = 0 per layer for the trained update and the controls' directions:
    the first-order effect (below 0: compresses at small steps)."""
    summary = ((result.get("controls") or {}).get("compression") or {}).get(convention)
    if not summary:
        axis.set_axis_off()
        return
    x = _layers(summary["before"])
    axis.axhline(0.0, color="gray", linewidth=0.8)
    axis.plot(x, _values(summary["trained"]["slope"]), marker="o", color="C0", linewidth=2, label="trained")
    _control_curves(axis, summary, x, slope=True)
    _layer_axis(axis, f"{label}\nslope at t = 0 of R^c(LN(Z + t delta)) ({convention})", "d R^c / dt at t = 0")


def layerwise_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """Top row: R^c before/after each attention step (official and paper conventions, measured on what the
    attention sees), the raw residual stream's R^c, and the sparsity of the sparse code; per layer, per
    model. Second row, one panel per model: the step's change of R^c beside the untrained model and the
    compression controls at full step; third row: the same directions' slopes at 0 (first order)."""
    models = len(results)
    figure = Figure(figsize=(4.8 * max(4, models), 15.5), layout="constrained")
    upper, lower = figure.subfigures(2, 1, height_ratios=(1.0, 2.1))
    top = upper.subplots(1, 4)
    panels = (
        ("official", "Rc", "R^c(LN Z | U^l), official (eps 0.01)"),
        ("paper", "Rc", "R^c(LN Z | U^l), paper convention"),
        ("paper", "Rc_raw", "R^c of the raw stream Z (paper)"),
    )
    for index, ((label, result), marker) in enumerate(zip(results.items(), MARKERS, strict=False)):
        for axis, (convention, stem, _) in zip(top, panels, strict=False):
            curves = result["layerwise"][convention]
            x = _layers(curves[f"{stem}_before_attention"])
            before = curves[f"{stem}_before_attention"]
            axis.plot(x, before, marker=marker, color=_curve_colour(index, 0), label=f"{label}: before")
            axis.plot(
                x, curves[f"{stem}_after_attention"], marker=marker, color=_curve_colour(index, 1), linestyle="--",
                markerfacecolor="none", label=f"{label}: after",
            )  # fmt: skip
        curves = result["layerwise"]["official"]
        code, output = curves["sparsity_of_code"], curves["sparsity_of_output"]
        if all(v is not None for v in code) and np.allclose(_values(code), _values(output)):
            # CRATE's block output is its sparse code (ISTA has no residual): one curve, said so
            top[3].plot(
                _layers(code), code, marker=marker, color=_curve_colour(index, 2),
                label=f"{label}: sparse code = block output",
            )  # fmt: skip
            continue
        if all(v is not None for v in code):
            top[3].plot(
                _layers(code), code, marker=marker, color=_curve_colour(index, 2), markersize=4,
                label=f"{label}: sparse code",
            )  # fmt: skip
        top[3].plot(
            _layers(code), output, marker=marker, color=_curve_colour(index, 3), linestyle=":", markersize=9,
            markerfacecolor="none", linewidth=2.5, label=f"{label}: block output",
        )  # fmt: skip
    for axis, (_, _, title) in zip(top, panels, strict=False):
        _layer_axis(axis, title, "R^c (nats)")
    _layer_axis(top[3], "fraction of exact zeros", "share of zeros", ylim=(-0.02, 1))
    _legend_below(upper, top)  # one legend for the row: the four panels share their curves
    rows = lower.subplots(2, models, squeeze=False)
    for axis, (label, result) in zip(rows[0], results.items(), strict=True):
        _controls_panel(axis, label, result)
    for axis, (label, result) in zip(rows[1], results.items(), strict=True):
        _slopes_panel(axis, label, result)
    return figure


def _per_layer(result: dict[str, Any], key: str) -> list[float]:
    return [np.nan if layer is None or layer[key] is None else np.mean(layer[key]) for layer in result["attention"]]


def lenses_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """Effective rank, agreement with the kernel (and its chance level), head redundancy, row entropy and
    top-k mass of the attention maps; per layer, mean over heads; each model beside its random init (dashed)."""
    figure = Figure(figsize=(19, 4.6), layout="constrained")
    axes = figure.subplots(1, 5)
    keys = ("effective_rank", "kernel_agreement", "redundancy", "entropy", "top_k_mass")
    titles = (
        "effective rank of A",
        "share of A on the kernel's top-p eigenvectors",
        "head redundancy",
        "row entropy (nats)",
        "top-k mass",
    )
    for index, ((label, result), marker) in enumerate(zip(results.items(), MARKERS, strict=False)):
        initial = _init_values(result, "attention")
        for axis, key in zip(axes, keys, strict=True):
            values = _per_layer(result, key)
            axis.plot(_layers(values), values, marker=marker, color=f"C{index}", label=label)
            if initial is not None:
                values = _per_layer(initial, key)
                axis.plot(
                    _layers(values), values, marker=marker, color=f"C{index}", linestyle="--", markerfacecolor="none",
                    alpha=0.7, label=f"{label}: random init",
                )  # fmt: skip
    with_maps = [r["attention"][0] for r in results.values() if r["attention"][0] is not None]
    if with_maps:
        baseline = with_maps[0]["kernel_agreement_baseline"]
        axes[1].axhline(baseline, color="gray", linestyle=":", label=f"chance p/(N-1) = {baseline:.2f}")
    ylabels = ("effective rank", "share of A", "redundancy", "entropy (nats)", "mass")
    for axis, title, ylabel in zip(axes, titles, ylabels, strict=True):
        _layer_axis(axis, title, ylabel)
    _grow_for_legend(figure, _legend_below(figure, axes))  # the five panels share their curves
    return figure


def seeds_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """Relative token dispersion at four points of each layer, and the change of the heads' outputs when
    their keys are subsampled, against the number of keys kept (every layer)."""
    figure = Figure(figsize=(13, 4.6), layout="constrained")
    axes = figure.subplots(1, 2)
    points = ("before_attention", "attention_input", "after_attention", "after_norm")
    for index, ((label, result), marker) in enumerate(zip(results.items(), MARKERS, strict=False)):
        depth = len(result["seeds"])
        for layer, seed in enumerate(result["seeds"]):
            offset = layer * (len(points) + 1)
            values = [seed["relative_dispersion"][p] for p in points]
            axes[0].plot(
                range(offset, offset + len(points)),
                values,
                marker=marker,
                color=f"C{index}",
                label=label if layer == 0 else None,
            )
            axes[1].plot(
                seed["subsampled_keys"],
                seed["subsampling_error"],
                marker=marker,
                color=f"C{index}",
                alpha=0.3 + 0.7 * (layer + 1) / depth,
                label=f"{label}, layer {layer}",
            )
    depth = max(len(r["seeds"]) for r in results.values())
    names = ("Z", "LN Z", "Z+attn", "LN(Z+attn)")
    ticks = [layer * (len(points) + 1) + k for layer in range(depth) for k in range(len(points))]
    axes[0].set_xticks(ticks, [names[k] for _ in range(depth) for k in range(len(points))], rotation=90, fontsize=7)
    for layer in range(depth):
        axes[0].axvspan(layer * (len(points) + 1) - 0.5, layer * (len(points) + 1) + 3.5, alpha=0.06, color="gray")
        axes[0].text(layer * (len(points) + 1) + 1.5, 1.0, f"layer {layer}", ha="center", va="top", fontsize=7)
    axes[0].set(
        title="relative dispersion of the tokens at four points of each layer", ylabel="relative dispersion",
        ylim=(0, 1.05),
    )  # fmt: skip
    kept = sorted({n for r in results.values() for seed in r["seeds"] for n in seed["subsampled_keys"]})
    axes[1].set(
        title="relative change of head outputs with N' keys", xlabel="keys kept N'", xscale="log",
        ylabel="relative change",
    )  # fmt: skip
    axes[1].set_xticks(kept)
    axes[1].xaxis.set_major_formatter(ScalarFormatter())
    axes[1].xaxis.set_minor_formatter(NullFormatter())
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    _grow_for_legend(figure, _legend_below(figure, axes[:1]))  # the models, under both panels
    return figure


def segmentation_figure(
    label: str,
    images: torch.Tensor,
    foreground: torch.Tensor,
    kept: torch.Tensor,
    grid: tuple[int, int],
    what: str = "class-token attention",
) -> Figure:
    """Rows: images; columns: the image, its foreground patches, then each head's kept patches (of ``what``)."""
    rows, heads = kept.shape[:2]
    figure = Figure(figsize=(1.5 * (heads + 2), 1.5 * rows), layout="constrained")
    axes = figure.subplots(rows, heads + 2, squeeze=False)
    for row in range(rows):
        axes[row, 0].imshow(_display(images[row]), cmap="gray")
        axes[row, 1].imshow(foreground[row].reshape(grid).numpy(), cmap="gray", vmin=0, vmax=1)
        for head in range(heads):
            axes[row, head + 2].imshow(kept[row, head].reshape(grid).numpy(), cmap="magma", vmin=0, vmax=1)
            if row == 0:
                axes[row, head + 2].set_title(f"head {head}", fontsize=8)
    axes[0, 0].set_title("image", fontsize=8)
    axes[0, 1].set_title("foreground", fontsize=8)
    for axis in axes.flat:
        axis.set_axis_off()
    figure.suptitle(f"{label}: {what} holding 60% of the mass, last layer", fontsize=9)
    return figure


def probe_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """Linear-probe accuracy per layer beside the random init's (dashed), with the chance level of the probe's
    classes (1 / classes)."""
    figure = Figure(figsize=(6, 4.2), layout="constrained")
    axis = figure.subplots()
    for index, ((label, result), marker) in enumerate(zip(results.items(), MARKERS, strict=False)):
        values = result["linear_probe_accuracy"]
        axis.plot(_layers(values), values, marker=marker, color=f"C{index}", label=label)
        initial = _init_values(result, "linear_probe_accuracy")
        if initial is not None:
            values = initial["linear_probe_accuracy"]
            axis.plot(
                _layers(values), values, marker=marker, color=f"C{index}", linestyle="--", markerfacecolor="none",
                label=f"{label}: random init",
            )  # fmt: skip
    classes = {r.get("probe_classes") for r in results.values() if r.get("probe_classes")}
    for count in sorted(classes):
        axis.axhline(1 / count, color="gray", linestyle=":", label=f"chance, {count} classes: {1 / count:.2f}")
    _layer_axis(axis, "linear probe accuracy per layer", "accuracy", ylim=(0, 1.02))
    _grow_for_legend(figure, _legend_below(figure, [axis]))
    return figure


def coherence_figure(label: str, result: dict[str, Any]) -> Figure:
    """Heatmaps of sigma_max(Q_i^T Q_j) between heads, first and last layer."""
    matrices = result["geometry"]["subspace_coherence"]
    baseline = result["geometry"]["random_head_coherence"]
    figure = Figure(figsize=(7, 3.6), layout="constrained")
    axes = figure.subplots(1, 2)
    for axis, index in zip(axes, (0, len(matrices) - 1), strict=True):
        image = axis.imshow(np.array(matrices[index]), vmin=0, vmax=1, cmap="viridis")
        axis.set(title=f"layer {index}", xlabel="head j", ylabel="head i")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    chance = f"\nrandom subspaces of the same shape: {baseline:.3f} off the diagonal" if baseline is not None else ""
    figure.suptitle(f"{label}: coherence of head subspaces, sigma_max(Q_i^T Q_j){chance}", fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.8, label="coherence")
    return figure


def _display(image: torch.Tensor | np.ndarray) -> np.ndarray:
    array = image.numpy() if isinstance(image, torch.Tensor) else image
    if array.ndim == 3 and array.shape[0] in (1, 3):
        array = np.moveaxis(array, 0, -1)
    array = (array - array.min()) / max(float(array.max() - array.min()), 1e-12)
    return array[..., 0] if array.shape[-1] == 1 else array


def attention_figure(
    label: str,
    images: list,
    cls_attention: torch.Tensor,
    grid: tuple[int, int],
    layer: int,
    what: str = "class-token attention",
) -> Figure:
    """Rows: images; columns: the image, then each head's class-token attention over patches (``what``: what
    the maps are, for a model without a class token), overlaid."""
    rows, heads = cls_attention.shape[:2]
    top = float(cls_attention.max())
    figure = Figure(figsize=(1.6 * (heads + 1) + 1.2, 1.6 * rows), layout="constrained")
    axes = figure.subplots(rows, heads + 1, squeeze=False)
    for row in range(rows):
        picture = _display(images[row])
        extent = (0, picture.shape[1], picture.shape[0], 0)
        axes[row, 0].imshow(picture, cmap="gray")
        for head in range(heads):
            axis = axes[row, head + 1]
            axis.imshow(picture, cmap="gray", extent=extent)
            heat = cls_attention[row, head].reshape(grid).numpy()
            shown = axis.imshow(heat, cmap="inferno", alpha=0.6, extent=extent, vmin=0.0, vmax=top)
            if row == 0:
                axis.set_title(f"head {head}", fontsize=8)
    for axis in axes.flat:
        axis.set_axis_off()
    figure.colorbar(shown, ax=axes, shrink=0.6, label="attention weight of the patch")
    figure.suptitle(f"{label}: {what}, layer {layer} (one colour scale for all)", fontsize=9)
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
    axes[0, 0].set_title("image", fontsize=8)
    axes[0, 1].set_title("3 PCs as RGB", fontsize=8)
    figure.suptitle(f"{label}\nPCA of last-layer patch features", fontsize=8)
    return figure
