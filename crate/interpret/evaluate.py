"""Every number of the interpretability evaluation, for one model on one dataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from torch import nn

from crate.metrics import layer_representations
from crate.metrics.functional import (
    Convention,
    coding_rate,
    compression_rate,
    sparse_rate_reduction,
    sparsity,
)
from crate.metrics.representations import transformer_blocks

from .attention import layer_attention
from .geometry import dictionary_coherence, gram_identity_distance, subspace_coherence
from .lenses import head_redundancy, kernel_asymmetry, kernel_negative_mass, row_entropy, top_k_mass
from .loading import EvalData

__all__ = ["evaluate_model", "layer_features", "linear_probe"]


def _mean(x: torch.Tensor) -> float:
    return float(x.to(torch.float64).mean())


def layerwise_curves(
    model: nn.Module, images: torch.Tensor, eps: float, convention: Convention, lam: float
) -> dict[str, list[float]]:
    """Per layer: R(Z^l), R^c(Z^l), R^c(Z^{l+1/2}), sparsity of Z^{l+1/2} and Z^{l+1}, SRR(Z^{l+1})."""
    curves: dict[str, list[float]] = {
        k: []
        for k in (
            "R",
            "Rc_before_attention",
            "Rc_after_attention",
            "sparsity_before_mlp",
            "sparsity_after_mlp",
            "srr",
        )
    }
    for rep in layer_representations(model, images):
        U = rep.subspaces
        curves["R"].append(_mean(coding_rate(rep.z_in, eps, convention)))
        curves["Rc_before_attention"].append(_mean(compression_rate(rep.z_in, U, eps, convention)))
        curves["Rc_after_attention"].append(_mean(compression_rate(rep.z_half, U, eps, convention)))
        curves["sparsity_before_mlp"].append(_mean(sparsity(rep.z_half)))
        curves["sparsity_after_mlp"].append(_mean(sparsity(rep.z_out)))
        curves["srr"].append(_mean(sparse_rate_reduction(rep.z_out, U, eps, lam, convention)))
    return curves


def attention_lenses(model: nn.Module, images: torch.Tensor, top_k: int) -> list[dict[str, Any]]:
    """Per layer and head: kernel asymmetry and negative mass, entropy, top-k mass; per layer: redundancy."""
    out = []
    for layer in layer_attention(model, images):
        S, A = layer.kernel, layer.attention
        out.append(
            {
                "asymmetry": kernel_asymmetry(S).mean(0).tolist(),
                "negative_mass": kernel_negative_mass(S).mean(0).tolist(),
                "entropy": row_entropy(A).mean(dim=(0, 2)).tolist(),
                "top_k_mass": top_k_mass(A, top_k).mean(dim=(0, 2)).tolist(),
                "redundancy": _mean(head_redundancy(A)) if A.shape[1] > 1 else None,
            }
        )
    return out


def _dictionary(block: nn.Module) -> torch.Tensor | None:
    ista = getattr(block, "ista", None)
    if ista is None:
        return None
    return (ista.dictionary if hasattr(ista, "dictionary") else ista.weight).detach()


def operator_geometry(model: nn.Module) -> dict[str, Any]:
    """Per layer: coherence between heads' subspaces, and (CRATE) the dictionary's coherence and Gram."""
    from crate.metrics import layer_subspaces

    result: dict[str, Any] = {"subspace_coherence": [], "mean_head_coherence": [], "max_head_coherence": []}
    dictionaries = []
    for block in transformer_blocks(model):
        C = subspace_coherence(layer_subspaces(block))
        K = C.shape[0]
        off = C[~torch.eye(K, dtype=torch.bool)]
        result["subspace_coherence"].append(C.tolist())
        result["mean_head_coherence"].append(float(off.mean()) if K > 1 else None)
        result["max_head_coherence"].append(float(off.max()) if K > 1 else None)
        dictionaries.append(_dictionary(block))
    if all(D is not None for D in dictionaries):
        result["dictionary_coherence"] = [dictionary_coherence(D) for D in dictionaries]
        result["dictionary_gram_identity_distance"] = [gram_identity_distance(D) for D in dictionaries]
    return result


@torch.no_grad()
def layer_features(model: nn.Module, images: torch.Tensor, batch_size: int = 256) -> list[np.ndarray]:
    """Per layer, each image's tokens Z^{l+1} averaged over tokens: a list of (B, d) arrays."""
    chunks: list[list[np.ndarray]] = []
    for start in range(0, len(images), batch_size):
        reps = layer_representations(model, images[start : start + batch_size])
        chunks.append([rep.z_out.to(torch.float64).mean(dim=1).numpy() for rep in reps])
    return [np.concatenate([chunk[layer] for chunk in chunks]) for layer in range(len(chunks[0]))]


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray) -> float:
    """Accuracy of a logistic regression fitted on standardised train features, on the validation split."""
    scaler = StandardScaler().fit(train_x)
    classifier = LogisticRegression(max_iter=2000).fit(scaler.transform(train_x), train_y)
    return float(classifier.score(scaler.transform(val_x), val_y))


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    data: EvalData,
    eps: float = 0.5,
    convention: Convention = "paper",
    lam: float = 0.1,
    probe_images: int = 128,
    top_k: int = 5,
) -> dict[str, Any]:
    """All numbers of the report for one model: accuracy, layerwise curves, lenses, geometry, probes."""
    model.eval()
    images = data.val_images[:probe_images]
    logits = torch.cat([model(data.val_images[i : i + 256]) for i in range(0, len(data.val_images), 256)])
    train_features = layer_features(model, data.train_images)
    val_features = layer_features(model, data.val_images)
    probes = [
        linear_probe(tr, data.train_labels.numpy(), va, data.val_labels.numpy())
        for tr, va in zip(train_features, val_features, strict=True)
    ]
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "data": data.name,
        "val_accuracy": float((logits.argmax(-1) == data.val_labels).float().mean()),
        "rate_settings": {"eps": eps, "convention": convention, "lambda": lam, "images": len(images)},
        "layerwise": layerwise_curves(model, images, eps, convention, lam),
        "attention": attention_lenses(model, images, top_k),
        "top_k": top_k,
        "geometry": operator_geometry(model),
        "linear_probe_accuracy": probes,
    }
