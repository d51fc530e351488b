"""Geometry of the learned operators: subspace coherence between heads and the ISTA dictionary.

- Coherence of subspaces U_i, U_j (d x p): orthonormalise each (Q_i from a QR factorisation) and take
  the largest singular value of Q_i^T Q_j, the cosine of the smallest principal angle: 0 for orthogonal
  subspaces, 1 when they share a direction.
- Dictionary D (d x m, atoms as columns): mutual coherence max_{i != j} |<d_i, d_j>| / (||d_i|| ||d_j||),
  and the distance of the Gram matrix from the identity ||D^T D - I||_F / ||I||_F.

Each comes with a random baseline of the same shape (Gaussian entries, fixed seed; the mean over draws, and for
subspaces their spread):
K random p-dimensional subspaces of R^d already have a large coherence when K p is not small against d
(two random 24-dimensional subspaces of R^96 have coherence about 0.8), so a learned value means
something only next to its baseline.
"""

from __future__ import annotations

import torch

__all__ = [
    "dictionary_coherence",
    "gram_identity_distance",
    "mean_off_diagonal",
    "random_dictionary_baseline",
    "random_subspace_coherence_draws",
    "subspace_coherence",
]

_DRAWS = 16


def subspace_coherence(U: torch.Tensor) -> torch.Tensor:
    """U (K, d, p) -> (K, K) matrix of sigma_max(Q_i^T Q_j) (ones on the diagonal)."""
    Q = torch.linalg.qr(U.to(torch.float64)).Q
    return torch.linalg.matrix_norm(Q.unsqueeze(1).transpose(-2, -1) @ Q.unsqueeze(0), ord=2)


def dictionary_coherence(D: torch.Tensor) -> float:
    """Mutual coherence of the columns of D."""
    atoms = torch.nn.functional.normalize(D.to(torch.float64), dim=0)
    gram = (atoms.T @ atoms).abs()
    gram.fill_diagonal_(0.0)
    return gram.max().item()


def gram_identity_distance(D: torch.Tensor) -> float:
    """||D^T D - I||_F / ||I||_F."""
    D = D.to(torch.float64)
    eye = torch.eye(D.shape[1], dtype=torch.float64)
    return (torch.linalg.matrix_norm(D.T @ D - eye) / torch.linalg.matrix_norm(eye)).item()


def mean_off_diagonal(C: torch.Tensor) -> float:
    """Mean of the off-diagonal entries of a square matrix."""
    size = C.shape[0]
    return float(C[~torch.eye(size, dtype=torch.bool)].mean())


def random_subspace_coherence_draws(
    heads: int, dim: int, width: int, draws: int = _DRAWS, seed: int = 0
) -> list[float]:
    """Mean off-diagonal :func:`subspace_coherence` of ``heads`` Gaussian subspaces U (heads, dim, width), one
    value per draw: their spread says how far a learned value must lie from their mean to differ from chance."""
    generator = torch.Generator().manual_seed(seed)
    return [
        mean_off_diagonal(subspace_coherence(torch.randn(heads, dim, width, generator=generator, dtype=torch.float64)))
        for _ in range(draws)
    ]


def random_dictionary_baseline(D: torch.Tensor, draws: int = _DRAWS, seed: int = 0) -> dict[str, float]:
    """Coherence and Gram distance of Gaussian dictionaries of D's shape and Frobenius norm (the distance
    depends on the scale, so the random dictionaries are scaled to D's)."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.linalg.matrix_norm(D.to(torch.float64))
    coherences, distances = [], []
    for _ in range(draws):
        R = torch.randn(D.shape, generator=generator, dtype=torch.float64)
        R = R * scale / torch.linalg.matrix_norm(R)
        coherences.append(dictionary_coherence(R))
        distances.append(gram_identity_distance(R))
    return {"coherence": sum(coherences) / draws, "gram_identity_distance": sum(distances) / draws}
