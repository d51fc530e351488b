"""Every number of the interpretability evaluation, for one model on one dataset, read from its trace."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from torch import nn

from crate.layers.trace import BlockTrace
from crate.metrics import QUANTITIES, layerwise_values, trace_model, transformer_blocks
from crate.metrics.functional import default_eps
from crate.metrics.representatives import representative_compression

from .controls import INIT_SEEDS, compression_control_curves, initialised, mean_of, uniform_map
from .geometry import (
    dictionary_coherence,
    gram_identity_distance,
    mean_off_diagonal,
    random_dictionary_baseline,
    random_subspace_coherence_draws,
    subspace_coherence,
)
from .lenses import (
    effective_rank,
    head_redundancy,
    kernel_agreement,
    kernel_agreement_baseline,
    kernel_asymmetry,
    kernel_negative_mass,
    key_subsampling_error,
    relative_dispersion,
    row_entropy,
    token_dispersion,
    top_k_mass,
)
from .loading import EvalData, held_out_accuracy
from .objective_table import SEEDS_TO_DECIDE
from .segmentation import attention_masks, foreground_patches, mask_iou, random_mask_iou
from .verdicts import null_counts, verdict_figures

__all__ = [
    "attention_lenses",
    "evaluate_model",
    "figure_controls",
    "layer_features",
    "layerwise_curves",
    "linear_probe",
    "operator_geometry",
    "segmentation_scores",
    "seed_lenses",
    "trace_figures",
]

CONVENTIONS = ("official", "paper")
SUBSAMPLED_KEYS = (4, 8, 16, 32)


def _mean(x: torch.Tensor) -> float:
    return float(x.to(torch.float64).mean())


def layerwise_curves(traces: list[BlockTrace], eps: float, convention: str, lam: float) -> dict[str, list]:
    """Per quantity of ``crate.metrics.QUANTITIES``: the per-layer means (None where it does not apply)."""
    values = layerwise_values(traces, eps, convention, lam)
    return {name: [None if v is None else _mean(v) for v in values[name]] for name in QUANTITIES}


def attention_lenses(trace: BlockTrace, top_k: int) -> dict[str, Any]:
    """One layer's kernel and attention statistics, per head (means over images and rows)."""
    S, A = trace.logits, trace.attention
    tokens, width = A.shape[-1], trace.values.shape[-1]
    return {
        "asymmetry": kernel_asymmetry(S).mean(0).tolist(),
        "negative_mass": kernel_negative_mass(S).mean(0).tolist(),
        "effective_rank": effective_rank(A).mean(0).tolist(),
        "kernel_agreement": kernel_agreement(S, A, width).mean(0).tolist(),
        "kernel_agreement_baseline": kernel_agreement_baseline(tokens, width),
        "entropy": row_entropy(A).mean(dim=(0, 2)).tolist(),
        "top_k_mass": top_k_mass(A, top_k).mean(dim=(0, 2)).tolist(),
        "redundancy": _mean(head_redundancy(A)) if A.shape[1] > 1 else None,
    }


def seed_lenses(trace: BlockTrace, keys: tuple[int, ...] = SUBSAMPLED_KEYS) -> dict[str, Any]:
    """Token dispersion at four points of the layer, and the head outputs' change under key subsampling
    (none for an attention without token-by-token weights, such as ToST's TSSA)."""
    points = {
        "before_attention": trace.z_in,
        "attention_input": trace.attn_input,
        "after_attention": trace.z_half,
        "after_norm": trace.mlp_input,
    }
    tokens = 0 if trace.logits is None else trace.logits.shape[-1]
    return {
        "dispersion": {name: _mean(token_dispersion(Z)) for name, Z in points.items()},
        "relative_dispersion": {name: _mean(relative_dispersion(Z)) for name, Z in points.items()},
        "subsampled_keys": [n for n in keys if n < tokens],
        "subsampling_error": [_mean(key_subsampling_error(trace.logits, trace.values, n)) for n in keys if n < tokens],
    }


def _dictionary(block: nn.Module) -> torch.Tensor | None:
    dictionary = getattr(getattr(block, "ista", None), "dictionary", None)
    return None if dictionary is None else dictionary.detach()


def operator_geometry(model: nn.Module, traces: list[BlockTrace]) -> dict[str, Any]:
    """Per layer: coherence between heads' subspaces and (where there is one) of the sparse-coding
    dictionary, each next to its random baseline of the same shape."""
    heads, dim, width = traces[0].subspaces.shape
    draws = random_subspace_coherence_draws(heads, dim, width) if heads > 1 else None
    result: dict[str, Any] = {
        "subspace_coherence": [],
        "mean_head_coherence": [],
        "random_head_coherence": float(np.mean(draws)) if draws else None,
        "random_head_coherence_sd": float(np.std(draws, ddof=1)) if draws else None,
    }
    for trace in traces:
        C = subspace_coherence(trace.subspaces)
        result["subspace_coherence"].append(C.tolist())
        result["mean_head_coherence"].append(mean_off_diagonal(C) if heads > 1 else None)
    dictionaries = [_dictionary(block) for block in transformer_blocks(model)]
    if all(D is not None for D in dictionaries):
        result["dictionary_coherence"] = [dictionary_coherence(D) for D in dictionaries]
        result["dictionary_gram_identity_distance"] = [gram_identity_distance(D) for D in dictionaries]
        result["random_dictionary"] = [random_dictionary_baseline(D) for D in dictionaries]
    return result


def attention_shown(prefix: int) -> str:
    """What :func:`class_attention` gives a model with ``prefix`` tokens before its patches, in words."""
    return "class-token attention" if prefix else "attention each patch receives (mean over the queries)"


def class_attention(traces: list[BlockTrace], prefix: int) -> list[torch.Tensor]:
    """Per layer, the class token's attention over the patches: (B, K, N_patches); for a model without a class
    token (``prefix`` 0: sequence or mean pooling), the attention the patches receive, averaged over queries."""
    if prefix == 0:
        return [trace.attention.mean(dim=2) for trace in traces]
    return [trace.attention[:, :, 0, prefix:] for trace in traces]


@torch.no_grad()
def segmentation_scores(
    model: nn.Module, images: torch.Tensor, pixels: torch.Tensor, layers: int = 2, mass: float = 0.6
) -> dict[str, Any]:
    """IoU of each head's thresholded class-token attention with the foreground patches, in the last
    ``layers`` layers, averaged over the images; with the best head, the mean over heads and chance."""
    patch = tuple(model.patch_embed.patch_size)
    target = foreground_patches(pixels, patch)
    depth = len(transformer_blocks(model))
    chosen = list(range(max(depth - layers, 0), depth))
    ious: dict[int, list[torch.Tensor]] = {layer: [] for layer in chosen}
    chance: dict[int, list[torch.Tensor]] = {layer: [] for layer in chosen}
    for start in range(0, len(images), 128):
        traces = trace_model(model, images[start : start + 128])
        maps = class_attention(traces, model.num_prefix_tokens)
        for layer in chosen:
            predicted = attention_masks(maps[layer], mass)
            ious[layer].append(mask_iou(predicted, target[start : start + 128]))
            chance[layer].append(random_mask_iou(predicted, target[start : start + 128]))
    result: dict[str, Any] = {"mass": mass, "foreground_share": _mean(target.to(torch.float64)), "layers": {}}
    for layer in chosen:
        per_head = torch.cat(ious[layer]).mean(0)
        result["layers"][str(layer)] = {
            "per_head": per_head.tolist(),
            "mean_over_heads": _mean(per_head),
            "best_head": int(per_head.argmax()),
            "best_head_iou": float(per_head.max()),
            "chance": _mean(torch.cat(chance[layer])),
        }
    return result


@torch.no_grad()
def layer_features(model: nn.Module, images: torch.Tensor, batch_size: int = 256) -> list[np.ndarray]:
    """Per layer, each image's tokens Z^{l+1} averaged over tokens: a list of (B, d) arrays."""
    chunks: list[list[np.ndarray]] = []
    for start in range(0, len(images), batch_size):
        traces = trace_model(model, images[start : start + batch_size], attention=False)
        chunks.append([trace.z_out.to(torch.float64).mean(dim=1).numpy() for trace in traces])
    return [np.concatenate([chunk[layer] for chunk in chunks]) for layer in range(len(chunks[0]))]


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray) -> float:
    """Accuracy of a logistic regression fitted on standardised train features, on the validation split."""
    scaler = StandardScaler().fit(train_x)
    classifier = LogisticRegression(max_iter=2000).fit(scaler.transform(train_x), train_y)
    return float(classifier.score(scaler.transform(val_x), val_y))


def probe_accuracies(model: nn.Module, data: EvalData) -> list[float]:
    """Per layer, the linear probe's accuracy on the mean-pooled tokens (fitted on the sampled training images,
    scored on the sampled validation images)."""
    train_features = layer_features(model, data.train_images)
    val_features = layer_features(model, data.val_images)
    return [
        linear_probe(tr, data.train_labels.numpy(), va, data.val_labels.numpy())
        for tr, va in zip(train_features, val_features, strict=True)
    ]


def trace_figures(
    model: nn.Module,
    data: EvalData,
    eps: dict[str, float],
    lam: float,
    probe_images: int,
    top_k: int,
    mass: float,
    traces: list[BlockTrace] | None = None,
) -> dict[str, Any]:
    """The figures read from the model's traces (of the first ``probe_images`` validation images; traced here
    unless given): layerwise curves, lenses, seeds' lenses, segmentation (where the data has foreground masks)
    and geometry."""
    if traces is None:
        traces = trace_model(model, data.val_images[:probe_images])
    segmentation = None
    if data.val_masks is not None and traces[0].attention is not None:  # TSSA (ToST) forms no attention maps
        segmentation = segmentation_scores(model, data.val_images, data.val_masks, mass=mass)
    return {
        "layerwise": {c: layerwise_curves(traces, eps[c], c, lam) for c in CONVENTIONS},
        "attention": [attention_lenses(trace, top_k) if trace.attention is not None else None for trace in traces],
        "seeds": [seed_lenses(trace) for trace in traces],
        "segmentation": segmentation,
        "geometry": operator_geometry(model, traces),
        # CBSA's representatives around their contraction step (paper convention); None without CBSA
        "representatives": [
            asdict(r)
            for r in representative_compression(model, data.val_images[:probe_images], eps["paper"], traces=traces)
        ]
        or None,
    }


def _split_objective(curves: dict[str, Any]) -> dict[str, Any]:
    """The control curves as the report reads them: R^c per convention under ``compression``, the other terms
    under ``objective`` and the ISTA step under ``sparse_coding``."""
    curves = dict(curves)
    return {
        "objective": curves.pop("objective", None),
        "sparse_coding": curves.pop("sparse_coding", None),
        "compression": curves,
    }


def verdict_null_counts(model: nn.Module, traces: list[BlockTrace], eps: dict[str, float]) -> dict[str, int | None]:
    """:func:`crate.interpret.verdicts.null_counts` of ``model`` from its traces, computing only what the counts
    read (the official convention, R - R^c and the ISTA step, at the full step): the untrained architecture's
    counts under each seed, against which a trained model's are judged."""
    curves = compression_control_curves(model, traces, eps, ("official",), ("rate_reduction",), (1.0,))
    return null_counts(_split_objective(curves))


def untrained_null_counts(
    model: nn.Module, images: torch.Tensor, eps: dict[str, float], seeds: range, known: dict[int, Any] | None = None
) -> dict[str, dict[str, int | None]]:
    """:func:`verdict_null_counts` of ``model``'s architecture at its initialisation under each of ``seeds`` on
    ``images``, keyed by seed; seeds in ``known`` keep the counts given (measured with their full figures)."""
    counts = dict(known or {})
    for seed in (seed for seed in seeds if seed not in counts):
        fresh = initialised(model, seed)
        counts[seed] = verdict_null_counts(fresh, trace_model(fresh, images), eps)
    return {str(seed): value for seed, value in counts.items()}


def figure_controls(
    model: nn.Module,
    data: EvalData,
    eps: dict[str, float],
    lam: float,
    probe_images: int,
    top_k: int,
    mass: float,
    init_seeds: tuple[int, ...] = INIT_SEEDS,
    traces: list[BlockTrace] | None = None,
    count_seeds: int = SEEDS_TO_DECIDE,
) -> dict[str, Any]:
    """The controls of :mod:`crate.interpret.controls`: the trace figures and probes of the architecture at its
    initialisation (mean over ``init_seeds``, and each seed's verdict figures), its counts of layers beating
    their nulls under seeds 0 to ``count_seeds`` - 1 and ``init_seeds``, the compression controls and the
    uniform map's values."""
    if traces is None:  # the trained model's traces, as its own figures were read from
        traces = trace_model(model, data.val_images[:probe_images])
    initial, per_seed = [], []
    for seed in init_seeds:
        fresh = initialised(model, seed)
        fresh_traces = trace_model(fresh, data.val_images[:probe_images])
        figures = trace_figures(fresh, data, eps, lam, probe_images, top_k, mass, traces=fresh_traces)
        figures["linear_probe_accuracy"] = probe_accuracies(fresh, data)
        initial.append(figures)
        seed_figures = verdict_figures(figures, figures["linear_probe_accuracy"])
        # the counts of layers beating their nulls, which the verdicts read against the trained model's
        seed_figures["null_counts"] = verdict_null_counts(fresh, fresh_traces, eps)
        per_seed.append(seed_figures)
    known = {seed: figures["null_counts"] for seed, figures in zip(init_seeds, per_seed, strict=True)}
    counts = untrained_null_counts(model, data.val_images[:probe_images], eps, range(count_seeds), known)
    first = traces[0]
    uniform = None
    if first.attention is not None:
        uniform = uniform_map(first.attention.shape[1], first.attention.shape[-1], top_k)
    return {
        "random_init": dict(
            mean_of(initial),
            init_seeds=list(init_seeds),
            per_seed=per_seed,
            null_counts_per_seed=counts,
        ),
        **_split_objective(compression_control_curves(model, traces, eps)),
        "uniform_map": uniform,
    }


def _decoder_parameters(model: nn.Module) -> int:
    """The parameters of a masked-pretraining decoder (CRATE-MAE's ``decoder_*`` and ``mask_token``), counted in
    ``parameters`` though no figure of the report reads them but the reconstruction; 0 without one."""
    names = ("decoder_", "mask_token")
    return sum(p.numel() for name, p in model.named_parameters() if name.startswith(names))


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    data: EvalData,
    eps: dict[str, float] | None = None,
    lam: float = 0.1,
    probe_images: int = 128,
    top_k: int = 5,
    mass: float = 0.6,
    controls: bool = True,
    count_seeds: int = SEEDS_TO_DECIDE,
) -> dict[str, Any]:
    """All numbers of the report for one model: accuracy, layerwise curves in both conventions (``eps``
    per convention, defaults 0.01 official and 0.5 paper), lenses, seeds' lenses, segmentation (where the
    data has foreground masks), geometry and linear probes; with ``controls``, each trace figure also for
    the untrained architecture and the compression and uniform-map controls (``result["controls"]``), with the
    untrained counts of layers beating their nulls under seeds 0 to ``count_seeds`` - 1 and the figures' seeds
    (fewer than 19 cannot make a count a finding)."""
    model.eval()
    eps = {convention: (eps or {}).get(convention, default_eps(convention)) for convention in CONVENTIONS}
    traces = trace_model(model, data.val_images[:probe_images])  # once, for the figures and their controls
    figures = trace_figures(model, data, eps, lam, probe_images, top_k, mass, traces=traces)
    # on the whole validation split; a model without a classifier (a masked-pretraining checkpoint) has none
    accuracy = held_out_accuracy(model, data.val_set) if getattr(model, "num_classes", 1) else None
    probes = probe_accuracies(model, data)
    result = {
        "architecture": type(model).__name__,
        # query = key: symmetric PSD scores by construction, whatever the weights
        "shared_query_key": all(getattr(b.attn, "shared_query_key", False) for b in transformer_blocks(model)),
        "parameters": sum(p.numel() for p in model.parameters()),
        "decoder_parameters": _decoder_parameters(model),
        "data": data.name,
        "val_accuracy": accuracy,
        "val_images": len(data.val_set),
        # the images the lenses, probes and segmentation read (a seeded random sample where a split is larger)
        "sampled_images": {"train": len(data.train_images), "val": len(data.val_images)},
        "rate_settings": {"eps": eps, "lambda": lam, "images": min(probe_images, len(data.val_images))},
        **figures,
        "top_k": top_k,
        "linear_probe_accuracy": probes,
        "probe_classes": int(torch.unique(data.train_labels).numel()),  # the probe's chance level is 1 / this
    }
    if controls:
        result["controls"] = figure_controls(
            model, data, eps, lam, probe_images, top_k, mass, traces=traces, count_seeds=count_seeds
        )
    return result
