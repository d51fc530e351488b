"""The lenses of our sources on attention: the kernel view, head redundancy and selection sparsity.

For a head's pre-softmax kernel matrix S (N x N) and attention A = softmax(S):
- asymmetry ||S - S^T||_F / ||S||_F (0 for a symmetric kernel);
- indefiniteness: the share of negative eigenvalue mass of the symmetric part (S + S^T)/2,
  sum_{lambda < 0} |lambda| / sum |lambda| (0 for a positive semidefinite kernel);
- redundancy: the mean cosine similarity of the flattened attention maps of every pair of heads;
- selection: the entropy of each attention row, and the mass on its top-k tokens.
"""

from __future__ import annotations

import torch

__all__ = ["head_redundancy", "kernel_asymmetry", "kernel_negative_mass", "row_entropy", "top_k_mass"]


def kernel_asymmetry(S: torch.Tensor) -> torch.Tensor:
    """||S - S^T||_F / ||S||_F over the last two axes."""
    return torch.linalg.matrix_norm(S - S.transpose(-2, -1)) / torch.linalg.matrix_norm(S).clamp_min(1e-300)


def kernel_negative_mass(S: torch.Tensor) -> torch.Tensor:
    """Share of negative eigenvalue mass of (S + S^T)/2 over the last two axes, in [0, 1]."""
    eigenvalues = torch.linalg.eigvalsh(0.5 * (S + S.transpose(-2, -1)))
    return eigenvalues.clamp_max(0).abs().sum(-1) / eigenvalues.abs().sum(-1).clamp_min(1e-300)


def head_redundancy(A: torch.Tensor) -> torch.Tensor:
    """Mean pairwise cosine similarity of the K heads' maps; A (B, K, N, N) -> (B,). Needs K >= 2."""
    heads = A.shape[1]
    flat = torch.nn.functional.normalize(A.flatten(2), dim=-1)
    similarity = flat @ flat.transpose(1, 2)  # (B, K, K)
    off_diagonal = similarity.sum(dim=(1, 2)) - similarity.diagonal(dim1=1, dim2=2).sum(-1)
    return off_diagonal / (heads * (heads - 1))


def row_entropy(A: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of every attention row: -sum_j A_ij log A_ij."""
    return -(A * A.clamp_min(1e-300).log()).sum(-1)


def top_k_mass(A: torch.Tensor, k: int) -> torch.Tensor:
    """Attention mass each row puts on its k largest entries."""
    return A.topk(min(k, A.shape[-1]), dim=-1).values.sum(-1)
