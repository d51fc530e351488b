"""Weighted k-nearest-neighbour classification of frozen features, DINO's evaluation of self-supervised
encoders (Wu et al. 2018; Caron et al. 2021): each test feature votes with its k most cosine-similar bank
features, neighbour i weighing exp(s_i / T) for its class.

.. math::

    \\hat y(x) = \\arg\\max_c \\sum_{i \\in \\mathrm{top}_k(x)} e^{s_i / T}\\,[y_i = c], \\qquad
    s_i = \\frac{x \\cdot b_i}{\\lVert x \\rVert \\lVert b_i \\rVert}

Example:
    >>> import torch
    >>> from crate.metrics.knn import weighted_knn_accuracy
    >>> bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> weighted_knn_accuracy(bank, torch.tensor([0, 0, 1, 1]), torch.tensor([[1.0, 0.2], [0.2, 1.0]]),
    ...                       torch.tensor([0, 1]), num_classes=2, k=2)
    1.0
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["weighted_knn_accuracy", "weighted_knn_predict"]


@torch.no_grad()
def weighted_knn_predict(
    bank: torch.Tensor,
    bank_labels: torch.Tensor,
    queries: torch.Tensor,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
    chunk: int = 1024,
) -> torch.Tensor:
    """The predicted class of each query (Q,) from a bank of features (N, p) with labels (N,)."""
    if bank.ndim != 2 or queries.ndim != 2 or bank.shape[1] != queries.shape[1]:
        raise ValueError(
            f"bank (N, p) and queries (Q, p) of one width; got {tuple(bank.shape)}, {tuple(queries.shape)}"
        )
    if len(bank_labels) != len(bank):
        raise ValueError(f"{len(bank_labels)} labels for a bank of {len(bank)} features")
    if not 1 <= k <= len(bank):
        raise ValueError(f"k must lie in [1, {len(bank)}] (the bank's size); got {k}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive; got {temperature}")
    bank = F.normalize(bank.float(), dim=1)
    labels = bank_labels.long().to(bank.device)
    predictions = []
    for start in range(0, len(queries), chunk):
        block = F.normalize(queries[start : start + chunk].float().to(bank.device), dim=1)
        similarity, index = (block @ bank.T).topk(k, dim=1)
        votes = torch.zeros(len(block), num_classes, device=bank.device)
        votes.scatter_add_(1, labels[index], (similarity / temperature).exp())
        predictions.append(votes.argmax(dim=1))
    return torch.cat(predictions) if predictions else torch.zeros(0, dtype=torch.long)


def weighted_knn_accuracy(
    bank: torch.Tensor,
    bank_labels: torch.Tensor,
    queries: torch.Tensor,
    query_labels: torch.Tensor,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
) -> float:
    """Top-1 accuracy of :func:`weighted_knn_predict` on labelled queries."""
    if len(query_labels) != len(queries) or not len(queries):
        raise ValueError(f"need one label per query and at least one query; got {len(query_labels)}, {len(queries)}")
    predicted = weighted_knn_predict(bank, bank_labels, queries, num_classes, k, temperature)
    return float((predicted.cpu() == query_labels.long().cpu()).float().mean())
