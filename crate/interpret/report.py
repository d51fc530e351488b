"""Run the whole evaluation for one model or a pair, and write metrics.json, the PNGs and report.md.

The report's sentences are computed from the numbers (how many layers compress, whether a figure beats
its random baseline), never written in advance; properties that hold by construction are marked so.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from crate.figures import reconstruction_figure
from crate.metrics import full_step, trace_model, transformer_blocks
from crate.models import is_hub_name

from . import plots
from .compression_table import (
    NULL_MARGIN,
    compression_controls_table,
    compression_verdict,
    representatives_table,
)
from .evaluate import attention_shown, class_attention, evaluate_model
from .loading import EvalData, sample_photographs
from .objective_table import SEEDS_TO_DECIDE, objective_table
from .segmentation import attention_masks, foreground_patches
from .verdicts import plain_verdicts

__all__ = ["REPORT_FILES", "figure_tag", "write_report"]

# the files that mark a folder as holding a report: crate-interpret replaces them only when asked to
REPORT_FILES = ("report.md", "metrics.json")


def _pca_rgb(model: nn.Module, images: torch.Tensor) -> np.ndarray:
    """First three principal components of the last layer's patch tokens, scaled to [0, 1], on the grid."""
    last = trace_model(model, images, attention=False)[-1]
    prefix = last.z_out.shape[1] - model.patch_embed.num_patches  # ToST's layers carry no class token
    tokens = last.z_out[:, prefix:].to(torch.float64)
    batch, patches, dim = tokens.shape
    flat = tokens.reshape(-1, dim)
    flat = flat - flat.mean(0)
    _, _, vh = torch.linalg.svd(flat, full_matrices=False)
    comps = flat @ vh[:3].T
    comps = (comps - comps.min(0).values) / (comps.max(0).values - comps.min(0).values).clamp_min(1e-12)
    grid = model.patch_embed.grid_size
    return comps.reshape(batch, *grid, 3).numpy()


def _last_class_attention(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Class-token attention over the patches in the last layer: (B, K, N_patches)."""
    return class_attention(trace_model(model, images)[-1:], model.num_prefix_tokens)[0]


def _pictures(model: nn.Module, label: str, data: EvalData, out: Path, tag: str, count: int) -> list[str]:
    """Attention overlays and PCA images for dataset images and the bundled photographs, and the
    segmentation examples where the data has foreground masks."""
    photos, photo_rgb = sample_photographs(model)
    grid = model.patch_embed.grid_size
    layer = len(model.blocks) - 1
    files = []
    sources = {
        "data": (data.val_images[:count], list(data.val_images[:count])),
        "photos": (photos, list(photo_rgb)),
    }
    has_maps = trace_model(model, data.val_images[:1])[-1].attention is not None  # not for TSSA (ToST)
    for source, (inputs, shown) in sources.items():
        with torch.no_grad():
            pca = _pca_rgb(model, inputs)
        if has_maps:
            with torch.no_grad():
                cls = _last_class_attention(model, inputs).float()
            name = f"attention_{source}_{tag}.png"
            figure = plots.attention_figure(label, shown, cls, grid, layer, attention_shown(model.num_prefix_tokens))
            plots.save(figure, out / name)
            files.append(name)
        name = f"pca_{source}_{tag}.png"
        plots.save(plots.pca_figure(label, shown, pca), out / name)
        files.append(name)
    if getattr(model, "decoder_depth", 0) and hasattr(model, "masked_views"):  # CRATE-MAE: its reconstructions
        images = data.val_images[:count]
        noise = torch.rand(len(images), model.patch_embed.num_patches, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            masked, pasted = model.masked_views(images, noise)
        name = f"reconstruction_{tag}.png"
        title = f"{label}: mask ratio {model.mask_ratio}"
        plots.save(reconstruction_figure(images, masked, pasted, title=title), out / name)
        files.append(name)
    if data.val_masks is not None and has_maps:
        images = data.val_images[:count]
        foreground = foreground_patches(data.val_masks[:count], tuple(model.patch_embed.patch_size))
        kept = attention_masks(_last_class_attention(model, images))
        name = f"segmentation_{tag}.png"
        figure = plots.segmentation_figure(
            label, images, foreground, kept, grid, attention_shown(model.num_prefix_tokens)
        )
        plots.save(figure, out / name)
        files.append(name)
    return files


def _sampled(result: dict[str, Any]) -> str:
    """Which images the segmentation and the probes read, in words."""
    sampled, total = result.get("sampled_images"), result["val_images"]
    if not sampled or sampled["val"] >= total:
        return f"accuracy, segmentation and probes on the whole validation split ({total} images)"
    return (
        f"accuracy on the whole validation split ({total} images), segmentation and probes on a seeded random "
        f"sample of {sampled['val']} validation and {sampled['train']} training images"
    )


def _data_words(results: dict[str, dict[str, Any]], eps: dict[str, float]) -> str:
    """The data the models were read on and how many images each figure read: once where every model read the
    same, else for each model (each was evaluated on its own run's data, so their figures are not of one data)."""
    conventions = f"official convention eps={eps['official']}, paper convention eps={eps['paper']}"
    first = next(iter(results.values()))
    same = ("data", "val_images", "sampled_images")
    if all(
        [r.get(key) for key in same] == [first.get(key) for key in same]
        and r["rate_settings"]["images"] == first["rate_settings"]["images"]
        for r in results.values()
    ):
        images = first["rate_settings"]["images"]
        return (
            f"Data: {first['data']}. Rates and lenses on {images} validation images ({conventions}); {_sampled(first)}"
        )
    each = "; ".join(
        f"`{label}` on {result['data']} (rates and lenses on {result['rate_settings']['images']} validation images; "
        f"{_sampled(result)})"
        for label, result in results.items()
    )
    return f"Each model was read on its own run's data, so their figures are not of one data set: {each}; {conventions}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _arrows(before: list[float], after: list[float]) -> str:
    return ", ".join(f"{b:.1f} -> {a:.1f}" for b, a in zip(before, after, strict=True))


def _falls(before: list[float], after: list[float | None]) -> str:
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if a is not None]
    if not pairs:
        return "n/a"
    falls = sum(a < b for b, a in pairs)
    return f"falls in {falls}/{len(pairs)} layers: {_arrows(*zip(*pairs, strict=True))}"


def _parameters(result: dict[str, Any]) -> str:
    """The model's parameters; a masked-pretraining decoder's apart, as the encoder is what the figures read."""
    total, decoder = result["parameters"], result.get("decoder_parameters") or 0
    return f"{total:,}" + (f" (encoder {total - decoder:,}, decoder {decoder:,})" if decoder else "")


def _compression_row(result: dict[str, Any], convention: str, stem: str) -> str:
    """The trained figure, then the same architecture at its initialisation and the update negated, where the
    result has controls (the other directions are in the compression-controls table)."""
    curves = result["layerwise"][convention]
    before = curves[f"{stem}_before_attention"]
    cell = "trained " + _falls(before, curves[f"{stem}_after_attention"])
    controls = result.get("controls")
    if controls is None:
        return cell
    initial = controls["random_init"]["layerwise"][convention]
    cell += "; random init " + _falls(initial[f"{stem}_before_attention"], initial[f"{stem}_after_attention"])
    if stem == "Rc":
        summary = controls["compression"][convention]
        negated = [b + c for b, c in zip(summary["before"], full_step(summary, "negated"), strict=True)]
        cell += "; update negated " + _falls(summary["before"], negated)
    return cell


def _verdict_row(result: dict[str, Any], convention: str) -> str:
    controls = result.get("controls")
    return "n/a (no controls)" if controls is None else compression_verdict(controls["compression"][convention])


def _with_init(result: dict[str, Any], cell: Callable[[dict[str, Any]], str]) -> str:
    """``cell`` of the trained model, then the same cell of the untrained architecture, side by side (no nesting)."""
    controls = result.get("controls")
    if controls is None:
        return cell(result)
    return f"trained {cell(result)} · random init {cell(dict(result, **controls['random_init']))}"


def _with_uniform(result: dict[str, Any], key: str) -> str:
    value = _with_init(result, lambda r: _fmt(_mean_over_layers(r, key)))
    uniform = (result.get("controls") or {}).get("uniform_map") or {}
    return value if uniform.get(key) is None else f"{value} · uniform map {uniform[key]:.3f}"


def _mean_over_layers(result: dict[str, Any], key: str) -> float | None:
    values = [np.mean(layer[key]) for layer in result["attention"] if layer is not None and layer[key] is not None]
    return float(np.mean(values)) if values else None


def _kernel_cell(result: dict[str, Any], key: str) -> str:
    value = _fmt(_mean_over_layers(result, key))
    return f"{value} (0 by construction)" if result["shared_query_key"] else value


def _segmentation_cell(result: dict[str, Any]) -> str:
    seg = result["segmentation"]
    if seg is None:
        return "n/a (no masks)" if result["attention"][0] is not None else "n/a (no attention maps)"
    return "; ".join(
        f"layer {layer}: best head {scores['best_head_iou']:.3f}"
        + (f" (head {scores['best_head']})" if scores["best_head"] is not None else "")
        + ", "
        f"mean {scores['mean_over_heads']:.3f}, chance {scores['chance']:.3f}"
        for layer, scores in sorted(seg["layers"].items(), key=lambda item: int(item[0]))
    )


def _geometry_cell(result: dict[str, Any]) -> str:
    return _fmt(result["geometry"]["mean_head_coherence"][-1])


def _dictionary_cell(result: dict[str, Any]) -> str:
    geometry = result["geometry"]
    if "dictionary_coherence" not in geometry:
        return "n/a"
    return f"{np.mean(geometry['dictionary_coherence']):.3f}"


def _dictionary_row(result: dict[str, Any]) -> str:
    geometry = result["geometry"]
    if "dictionary_coherence" not in geometry:
        return "n/a"
    random = np.mean([r["coherence"] for r in geometry["random_dictionary"]])
    return f"{_with_init(result, _dictionary_cell)} · random dictionary {random:.3f}"


def _summary_rows(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| quantity | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]

    def sparsity(r: dict[str, Any]) -> str:
        code = r["layerwise"]["official"]["sparsity_of_code"]
        if all(v is not None for v in code):
            return "code: " + ", ".join(f"{v:.2f}" for v in code)
        output = r["layerwise"]["official"]["sparsity_of_output"]
        return "no sparse code; output: " + ", ".join(f"{v:.2f}" for v in output)

    def agreement(r: dict[str, Any]) -> str:
        if r["attention"][0] is None:
            return "n/a (no attention maps)"
        chance = r["attention"][0]["kernel_agreement_baseline"]
        return f"{_fmt(_mean_over_layers(r, 'kernel_agreement'))} (chance {chance:.3f})"

    rows = {
        "validation accuracy": lambda r: (
            "n/a (no head)" if r["val_accuracy"] is None else f"{r['val_accuracy']:.4f} on {r['val_images']} images"
        ),
        "parameters": _parameters,
        "R^c(LN Z \\| U) across attention, official (eps 0.01)": lambda r: _compression_row(r, "official", "Rc"),
        "R^c(LN Z \\| U) across attention, paper (eps 0.5)": lambda r: _compression_row(r, "paper", "Rc"),
        "compression against its controls, official": lambda r: _verdict_row(r, "official"),
        "compression against its controls, paper": lambda r: _verdict_row(r, "paper"),
        "R^c of the raw stream Z across attention, paper": lambda r: _compression_row(r, "paper", "Rc_raw"),
        "sparsity (fraction of exact zeros) per layer": sparsity,
        "kernel asymmetry of J S J (mean)": lambda r: _kernel_cell(r, "asymmetry"),
        "negative eigenvalue mass of J S J (mean)": lambda r: _kernel_cell(r, "negative_mass"),
        "effective rank of attention maps (mean)": lambda r: _with_init(
            r, lambda x: _fmt(_mean_over_layers(x, "effective_rank"), 2)
        ),
        "attention on the kernel's top-p eigenvectors (mean)": lambda r: _with_init(r, agreement),
        "head redundancy (mean over layers)": lambda r: _with_uniform(r, "redundancy"),
        "row entropy, nats (mean)": lambda r: _with_init(r, lambda x: _fmt(_mean_over_layers(x, "entropy"))),
        "top-k mass (mean)": lambda r: _with_uniform(r, "top_k_mass"),
        "segmentation IoU (last two layers)": lambda r: _with_init(r, _segmentation_cell),
        "head subspace coherence, last layer": lambda r: (
            f"{_with_init(r, _geometry_cell)} · random subspaces {_fmt(r['geometry']['random_head_coherence'])}"
        ),
        "dictionary coherence (mean over layers)": lambda r: _dictionary_row(r),
        "linear probe, last layer": lambda r: _fmt(r["linear_probe_accuracy"][-1]),
    }
    for name, value in rows.items():
        lines.append(f"| {name} | " + " | ".join(value(r) for r in results.values()) + " |")
    return "\n".join(lines)


def _seed_rows(results: dict[str, dict[str, Any]]) -> str:
    """Per model and layer: relative dispersion at four points, and the subsampling error at each N'; each
    model followed by its architecture at initialisation (mean over the control's seeds)."""
    keys = max((r["seeds"][0]["subsampled_keys"] for r in results.values()), key=len)
    head = "| model | layer | dispersion Z / LN Z / Z+attn / LN(Z+attn) | " + " | ".join(f"N'={n}" for n in keys)
    lines = [head + " |", "|---|---|---|" + "---|" * len(keys)]
    rows: list[tuple[str, dict[str, Any]]] = []
    for label, result in results.items():
        rows.append((label, result))
        if result.get("controls") is not None:
            rows.append((f"{label} (random init)", result["controls"]["random_init"]))
    for label, result in rows:
        for layer, seed in enumerate(result["seeds"]):
            d = seed["relative_dispersion"]
            points = " / ".join(
                f"{d[p]:.3f}" for p in ("before_attention", "attention_input", "after_attention", "after_norm")
            )
            errors = " | ".join(f"{e:.3f}" for e in seed["subsampling_error"]) or " | ".join(["n/a"] * len(keys))
            lines.append(f"| {label} | {layer} | {points} | {errors} |")
    return "\n".join(lines)


def figure_tag(index: int, label: str) -> str:
    """The part of a model's figure file names that names it: its place among the models compared and its label
    without a pretrained tag's suffix, with what a path would read as folders or drives (``local-dir:DIR``) made
    underscores."""
    name = label if is_hub_name(label) else label.split(".")[0]
    return f"{index}_{re.sub(r'[^A-Za-z0-9_-]+', '_', name).strip('_')}"


def _seconds_left(elapsed: float, layers: list[int], index: int) -> float | None:
    """How long the models from ``index`` on will take, from the ``elapsed`` seconds the ones before took, each
    model's share in proportion to its ``layers``; None before the first model has been timed."""
    if index == 0:
        return None
    return elapsed / sum(layers[:index]) * sum(layers[index:])


def write_report(
    models: dict[str, tuple[nn.Module, EvalData]],
    out: str | Path,
    images: int = 4,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> dict:
    """Evaluate each labelled (model, data) pair, write everything under ``out``, return the metrics;
    ``progress`` (if given) is told which model is being evaluated and about how long the rest will take."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    layers = [len(transformer_blocks(model)) for model, _ in models.values()]  # each figure is measured per layer
    start = time.perf_counter()
    for index, (label, (model, data)) in enumerate(models.items()):
        if progress is not None:
            seconds = _seconds_left(time.perf_counter() - start, layers, index)
            left = f"; about {seconds / 60:.0f} min left" if seconds is not None else ""
            progress(f"evaluating {label} ({index + 1} of {len(models)}: rates, controls, lenses, probes){left}")
        results[label] = evaluate_model(model, data, **options)
    if progress is not None:
        progress(f"writing figures and report.md into {out}")
    (out / "metrics.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    plots.save(plots.layerwise_figure(results), out / "layerwise.png")
    plots.save(plots.lenses_figure(results), out / "lenses.png")
    plots.save(plots.seeds_figure(results), out / "seeds.png")
    plots.save(plots.probe_figure(results), out / "probe.png")
    pictures: dict[str, list[str]] = {}
    for index, (label, (model, data)) in enumerate(models.items()):
        tag = figure_tag(index, label)
        pictures[label] = _pictures(model, label, data, out, tag, images)
        plots.save(plots.coherence_figure(label, results[label]), out / f"coherence_{tag}.png")
        pictures[label].append(f"coherence_{tag}.png")
    (out / "report.md").write_text(_markdown(results, pictures), encoding="utf-8")
    return results


def _controls_text(results: dict[str, dict[str, Any]]) -> str:
    """How the compression-controls table is read, with the settings the numbers were computed with."""
    summary = next((r["controls"]["compression"]["official"] for r in results.values() if r.get("controls")), None)
    if summary is None:
        return "No controls were computed (`--no-controls`)."
    fractions = ", ".join(f"{f:g}" for f in summary["fractions"])
    return (
        "Change of R^c(LN(Z + t delta) | U) - R^c(LN Z | U), official convention, one layer's update changed at a"
        f" time, at t = 1 (full step) and, in brackets, its slope at t = 0 by autograd (the first-order effect, the"
        " one the theory's \"a gradient step lowers R^c\" claims); the trained update's change per unit step at"
        f" t = {fractions}. Directions: the trained update Delta; negated; without its token mean (own norm); a"
        " Gaussian vector shared by all tokens and i.i.d. Gaussian noise, both at ||Delta||_F per image"
        f" ({summary['draws']} draws, generator seed {summary['seed']}; mean ± standard deviation over the draws);"
        " the theory's MSSA step with its shrink term, kappa gamma (gamma sum_k A_k W_k U_k^T - sum_k W_k U_k^T),"
        f" W_k = LN(Z) U_k, the model's own maps A_k, gamma = p/(N eps^2) with eps = {summary['theory_eps']} and"
        f" kappa gamma = {summary['theory_step_size']} (at its own size, given in square brackets); and the heads'"
        " outputs through U_[K] at ||Delta||_F (no shrink term). The last two exist only where the attention"
        " scores one shared projection U_[K] (not a ViT, whose U is its query projection, nor ToST)."
        f" A fall counts as beyond the shared null when it is below the null's mean minus {NULL_MARGIN:g} sd.\n\n"
        + "\n".join(f"- `{label}`: {_verdict_row(r, 'official')}." for label, r in results.items())
    )


def _representatives_section(results: dict[str, dict[str, Any]]) -> list[str]:
    """CBSA's representatives around their contraction step, where a model has CBSA (else nothing)."""
    table = representatives_table(results)
    if not table:
        return []
    text = (
        "CBSA contracts M pooled representatives of the projected tokens by one step, reps + step_rep softmax(reps"
        " w^T / sqrt(p)) w, then broadcasts them to the tokens. Change of the head-summed coding rate of the"
        " representatives, sum_k 1/2 logdet(I + p/(M eps^2) reps_k^T reps_k) (paper convention), across that"
        " step, along it negated, and for the architecture at its initialisation (mean over its seeds; step_rep is"
        " drawn at random there, so its sign per head is chance). Negative: the step compressed the"
        " representatives."
    )
    return ["## CBSA's representatives", "", text, "", table, ""]


# The report's fixed prose: how each figure is measured, per section
HOW_MEASURED = (
    "- Controls (`controls` in metrics.json): every figure read from the traces is also given for the same"
    " architecture at its initialisation (`random init`: built with the same arguments under seeds 0, 1, 2,"
    " seed 0 being the initialisation the zoo's recipes train from; the mean over the seeds); the"
    " compression figure also along the controls' directions (next section); head redundancy and top-k"
    " mass also for a uniform attention map. A figure a control reaches as well is not a finding. A control"
    " of several seeds reaches as far as another seed could: the 95% prediction interval for one more draw.",
    "- R^c across attention: R^c(LN_1(Z^l) | U^l) before and R^c(LN_1(Z^{l+1/2}) | U^l) after the attention"
    " step, the same norm and subspaces, on what the attention sees (the CRATE authors' measurement; with"
    " the official convention it equals their code's figure). For a ViT, U is its query projection."
    " The raw-stream row measures Z itself, whose norm grows with depth: it mixes scale with compression.",
    "- Kernel statistics are taken on the double-centred scores J S J, which softmax cannot tell apart"
    " from S. Where query and key are one projection (CRATE), J S J is symmetric PSD for any weights:"
    " those two rows are 0 by construction and are not findings. Effective rank and agreement with the"
    " kernel's top eigenvectors can differ between models; the agreement's chance level is p/(N-1).",
    "- Segmentation: per head, the patches holding 60% of the class token's attention (for a model without"
    " one, such as the sequence-pooling members, of the attention each patch receives, averaged over the"
    " queries) against the foreground patches (at least half their pixels foreground); chance: random patch"
    " sets of the same size.",
    "- Coherence: mean over head pairs of the largest cosine between their subspaces, next to Gaussian"
    " subspaces of the same shape.",
)
OBJECTIVE_TEXT = (
    "CRATE's layers are derived from the sparse rate reduction R(Z) - R^c(Z | U) - lambda ||Z||_1, not from"
    " R^c alone: a shared update that aligns unit-norm tokens lowers R^c and R together. Per layer, the"
    " full-step change of R^c, R and R - R^c (official convention, on LN(Z)) along the trained attention step;"
    " of R - R^c also along the nulls (mean ± sd over their draws), the theory's MSSA step and the objective's"
    " own gradient step at the trained step's norm; each direction's cosine with grad (R - R^c) at Z (1 for"
    " the gradient step, about 0 for the nulls); and the ISTA step's change of its LASSO objective"
    " lambda ||x||_1 + 1/2 ||y - D x||^2 (mean over tokens) beside nulls of its size and the LASSO's own"
    " descent step. A step beats a null when it lies beyond the null's mean by 2 sd in the improving direction."
)
SEEDS_TEXT = (
    "Relative dispersion is the tokens' mean squared distance from their mean over their mean squared"
    " norm: 0 when all tokens are equal. Read the four points of a layer left to right: the raw input,"
    " the attention's input after its norm, after the attention's residual update, after the next norm."
    " The N' columns give the mean relative change of each head's output when its keys are a random"
    " N' of the N tokens: attention read as inference from the tokens improves as N' grows."
)
PROBE_TEXT = (
    "How linearly separable the classes are in each layer's mean-pooled tokens: a logistic regression on a"
    " sample of training images' mean token per layer, scored on a sample of validation images. Where the"
    " model has a classifier, the probe can sit below its accuracy: the head reads its pooled token (the class"
    " token, or the"
    " sequence pooling's weighted mean) after the final norm and was"
    " trained on every training image with augmentation, the probe reads the mean of the tokens and sees a"
    " sample. The dotted line is chance, 1 / classes."
)


def _seeds_sentence(results: dict[str, dict[str, Any]]) -> str:
    """The untrained seeds the counts of layers beating their nulls were read against (``--count-seeds``), and
    how often another untrained draw would pass them all."""
    if not all(result.get("controls") for result in results.values()):
        return ""
    counted = (result["controls"]["random_init"].get("null_counts_per_seed", {}) for result in results.values())
    seeds = sorted({int(seed) for counts in counted for seed in counts})
    if not seeds:
        return ""
    run = len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
    words = (
        f"seeds {seeds[0]}-{seeds[-1]}" if run else f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    )
    few = "" if len(seeds) >= SEEDS_TO_DECIDE else f"; with fewer than {SEEDS_TO_DECIDE} seeds no count is a finding"
    return (
        f" The counts of layers whose steps beat their nulls are read against {words}, which another untrained draw"
        f" would all pass one time in {len(seeds) + 1}{few}."
    )


def _markdown(results: dict[str, dict[str, Any]], pictures: dict[str, list[str]]) -> str:
    command = shlex.join(["python", "-m", "crate.interpret", *sys.argv[1:]]) if sys.argv[1:] else ""
    eps = next(iter(results.values()))["rate_settings"]["eps"]
    parts = [
        "# Interpretability report",
        "",
        f"Models: {', '.join(f'`{label}`' for label in results)}. {_data_words(results, eps)};"
        " every number is in `metrics.json`.",
        "",
        f"```bash\n{command}\n```" if command else "",
        "",
        "## Verdicts",
        "",
        "Each sentence is read from the numbers below, against the figure's own control.",
        "",
        *[line for label, result in results.items() for line in plain_verdicts(label, result)],
        "## Summary",
        "",
        _summary_rows(results),
        "",
        "How each figure is measured:",
        "",
        HOW_MEASURED[0] + _seeds_sentence(results),
        *HOW_MEASURED[1:],
        "",
        "## Layer-wise white-box curves",
        "",
        "![layerwise](layerwise.png)",
        "",
        "## Compression against its controls",
        "",
        _controls_text(results),
        "",
        compression_controls_table(results),
        "",
        "## The whole objective",
        "",
        OBJECTIVE_TEXT,
        "",
        objective_table(results),
        "",
        *_representatives_section(results),
        "## Lenses on attention",
        "",
        "![lenses](lenses.png)",
        "",
        "## The seeds' lenses",
        "",
        "![seeds](seeds.png)",
        "",
        SEEDS_TEXT,
        "",
        _seed_rows(results),
        "",
        "## Linear probes",
        "",
        "![probe](probe.png)",
        "",
        PROBE_TEXT,
    ]
    for label, files in pictures.items():
        parts += ["", f"## `{label}`: attention, segmentation, PCA and subspaces", ""]
        for name in files:
            parts.append(f"![{name}]({name})")
        parts += [
            "",
            "Bright patches are where the class token looks (without one: the patches the others attend to),"
            " per head, in the last layer; PCA colours"
            " group patches whose features agree; the heatmaps show how much heads' subspaces overlap"
            " (0 orthogonal, 1 shared direction).",
        ]
    return "\n".join(parts) + "\n"
