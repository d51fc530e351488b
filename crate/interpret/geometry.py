"""Geometry of the learned operators: subspace coherence between heads and the ISTA dictionary.

- Coherence of subspaces U_i, U_j (d x p): orthonormalise each (Q_i from a QR factorisation) and take
  the largest singular value of Q_i^T Q_j, the cosine of the smallest principal angle: 0 for orthogonal
  subspaces, 1 when they share a direction.
- Dictionary D (d x m, atoms as columns): mutual coherence max_{i != j} |<d_i, d_j>| / (||d_i|| ||d_j||),
  and the distance of the Gram matrix from the identity ||D^T D - I||_F / ||I||_F.
"""

from __future__ import annotations

import torch

__all__ = ["dictionary_coherence", "gram_identity_distance", "subspace_coherence"]


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
