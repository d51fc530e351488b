"""Weighted k-NN (crate.metrics.knn) against a float64 numpy transcription of DINO's vote."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crate.metrics.knn import weighted_knn_accuracy, weighted_knn_predict


def _numpy_knn(bank, labels, queries, classes, k, temperature):
    bank = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    out = []
    for q in queries:
        s = bank @ (q / np.linalg.norm(q))
        top = np.argsort(-s, kind="stable")[:k]
        votes = np.zeros(classes)
        for i in top:
            votes[labels[i]] += np.exp(s[i] / temperature)
        out.append(int(np.argmax(votes)))
    return np.array(out)


@pytest.mark.parametrize(("k", "temperature"), [(1, 0.07), (5, 0.07), (20, 0.5)])
def test_predictions_equal_the_numpy_vote(k: int, temperature: float) -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 8))
    labels = rng.integers(0, 4, 300)
    bank = centres[labels] + 0.8 * rng.normal(size=(300, 8))
    query_labels = rng.integers(0, 4, 70)
    queries = centres[query_labels] + 0.8 * rng.normal(size=(70, 8))
    expected = _numpy_knn(bank, labels, queries, 4, k, temperature)
    got = weighted_knn_predict(
        torch.tensor(bank), torch.tensor(labels), torch.tensor(queries), 4, k, temperature, chunk=16
    )
    assert np.array_equal(got.numpy(), expected)
    accuracy = weighted_knn_accuracy(
        torch.tensor(bank), torch.tensor(labels), torch.tensor(queries), torch.tensor(query_labels), 4, k, temperature
    )
    assert accuracy == pytest.approx(float(np.mean(expected == query_labels)))
    assert accuracy > 0.5  # separable clusters: far above the 0.25 of chance


def test_bad_arguments_are_refused() -> None:
    bank, labels = torch.randn(10, 4), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match="k must"):
        weighted_knn_predict(bank, labels, torch.randn(2, 4), 2, k=11)
    with pytest.raises(ValueError, match="one width"):
        weighted_knn_predict(bank, labels, torch.randn(2, 5), 2)
    with pytest.raises(ValueError, match="temperature"):
        weighted_knn_predict(bank, labels, torch.randn(2, 4), 2, k=3, temperature=0.0)
    with pytest.raises(ValueError, match="labels"):
        weighted_knn_predict(bank, labels[:3], torch.randn(2, 4), 2)
