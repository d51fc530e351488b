"""How well an encoder's frozen features classify, the evaluation of self-supervised encoders: each image's
pooled feature (the model's ``forward_head(pre_logits=True)``: no classifier is used or needed), then DINO's
weighted k-NN (k 20, temperature 0.07; the bank is every training image) and a logistic-regression probe on the
standardised features, both scored on every validation image."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from crate.metrics.knn import weighted_knn_accuracy

from .evaluate import linear_probe

__all__ = [
    "KNN_K",
    "KNN_TEMPERATURE",
    "frozen_feature_scores",
    "knn_k",
    "pooled_features",
    "same_inputs",
    "unscorable",
]

KNN_K, KNN_TEMPERATURE = 20, 0.07


def knn_k(bank_images: int) -> int:
    """The neighbours each query's vote counts: DINO's 20, or the whole bank where it holds fewer images (as the
    k-NN logged while training takes them)."""
    return min(KNN_K, bank_images)


def same_inputs(model: nn.Module, other: nn.Module) -> bool:
    """Whether two encoders take the same images (mean, std and input size of their pretrained cfgs), so that one
    evaluation set scores both."""
    keys = ("mean", "std", "input_size")
    return [model.pretrained_cfg.get(k) for k in keys] == [other.pretrained_cfg.get(k) for k in keys]


@torch.no_grad()
def pooled_features(model: nn.Module, images: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """The model's pooled features (its ``forward_head(pre_logits=True)``) of every image, float32."""
    chunks = []
    for start in range(0, len(images), batch_size):
        tokens = model.forward_features(images[start : start + batch_size])
        chunks.append(model.forward_head(tokens, pre_logits=True).float())
    return torch.cat(chunks)


def unscorable(data: Any) -> str | None:
    """Why :func:`frozen_feature_scores` cannot score features on ``data`` (its images hold fewer than two
    classes: unlabelled images in one class folder), or None."""
    classes = len(set(data.train_labels.tolist()) | set(data.val_labels.tolist()))
    if classes >= 2:
        return None
    return f"its data has {classes} class, and the k-NN and the probe need labelled images of 2 or more"


def frozen_feature_scores(model: nn.Module, data: Any) -> dict[str, Any]:
    """``{"knn_top1", "linear_probe_top1", "feature_dim"}`` of ``model`` (put in eval mode) on ``data`` (an
    :class:`crate.interpret.loading.EvalData`: its train images are the bank and the probe's training set, its
    val images are scored)."""
    model.eval()
    train = pooled_features(model, data.train_images)
    val = pooled_features(model, data.val_images)
    classes = int(max(data.train_labels.max(), data.val_labels.max())) + 1
    k = knn_k(len(train))
    knn = weighted_knn_accuracy(train, data.train_labels, val, data.val_labels, classes, k, KNN_TEMPERATURE)
    probe = linear_probe(
        train.double().numpy(), data.train_labels.numpy(), val.double().numpy(), data.val_labels.numpy()
    )
    return {"knn_top1": knn, "linear_probe_top1": probe, "feature_dim": int(train.shape[1])}
