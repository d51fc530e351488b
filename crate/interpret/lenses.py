"""Lenses of our sources on attention, computed on the scores and maps the model itself computed.

Kernel view (attention as a kernel machine). A head's scores S (N x N, query rows) define its weights
only up to a constant per row: softmax(S + c 1^T) = softmax(S). So every kernel statistic here is taken on
the double-centred scores C = J S J (J = I - 11^T / N), which no per-row constant changes:
- asymmetry ||C - C^T||_F / ||C||_F. Among all S + c 1^T, the smallest antisymmetric part has
  Frobenius norm ||J (S - S^T) J||_F = ||C - C^T||_F, so this is the asymmetry softmax cannot hide.
- indefiniteness: the share of negative eigenvalue mass of (C + C^T) / 2.
For CRATE's shared projection S = w w^T / sqrt(p), so C is symmetric and PSD for any weights: both are 0
by construction and say nothing about the trained model. Statistics that can differ between models:
- effective rank of the attention map A: exp of the entropy of its normalised singular values;
- kernel agreement: the share of the centred map's energy ||A J V_r||^2 / ||A J||^2 that lies on the
  top-r eigenvectors V_r of (C + C^T)/2 (r = head width p); the rows' constant part (each row sums to 1)
  is left out, so a map unrelated to its kernel scores about r / (N - 1), which
  :func:`kernel_agreement_baseline` gives.
Heads and selection: redundancy (mean pairwise cosine of the heads' maps), row entropy, top-k mass.

Seeds' lenses, per layer:
- dispersion (attention as a gradient step of a log-partition function: it moves tokens outward, the
  norm pulls them back): mean squared distance of the tokens from their mean, and the same divided by
  their mean squared norm (scale free);
- key subsampling (attention as posterior inference, whose error falls as the number of tokens grows):
  the relative change of each head's output when its keys are a random subset of N' of the N tokens.
"""

from __future__ import annotations

import torch

__all__ = [
    "double_centre",
    "effective_rank",
    "head_redundancy",
    "kernel_agreement",
    "kernel_agreement_baseline",
    "kernel_asymmetry",
    "kernel_negative_mass",
    "key_subsampling_error",
    "relative_dispersion",
    "row_entropy",
    "token_dispersion",
    "top_k_mass",
]

_TINY = 1e-300


def double_centre(S: torch.Tensor) -> torch.Tensor:
    """J S J over the last two axes, in float64: S without what per-row (and per-column) constants add."""
    S = S.to(torch.float64)
    S = S - S.mean(dim=-1, keepdim=True)
    return S - S.mean(dim=-2, keepdim=True)


def kernel_asymmetry(S: torch.Tensor) -> torch.Tensor:
    """||C - C^T||_F / ||C||_F with C = J S J: the asymmetry no per-row constant can remove."""
    C = double_centre(S)
    return torch.linalg.matrix_norm(C - C.transpose(-2, -1)) / torch.linalg.matrix_norm(C).clamp_min(_TINY)


def _symmetric_eigh(S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    C = double_centre(S)
    return torch.linalg.eigh(0.5 * (C + C.transpose(-2, -1)))


def kernel_negative_mass(S: torch.Tensor) -> torch.Tensor:
    """Share of negative eigenvalue mass of sym(J S J), in [0, 1] (0: positive semidefinite)."""
    C = double_centre(S)
    eigenvalues = torch.linalg.eigvalsh(0.5 * (C + C.transpose(-2, -1)))
    return eigenvalues.clamp_max(0).abs().sum(-1) / eigenvalues.abs().sum(-1).clamp_min(_TINY)


def kernel_agreement(S: torch.Tensor, A: torch.Tensor, rank: int) -> torch.Tensor:
    """||A J V_r||_F^2 / ||A J||_F^2 with V_r the top-``rank`` eigenvectors of sym(J S J), in [0, 1]."""
    _, vectors = _symmetric_eigh(S)  # ascending eigenvalues
    top = vectors[..., -rank:]
    A = A.to(torch.float64)
    centred = A - A.mean(dim=-1, keepdim=True)  # A J
    return torch.linalg.matrix_norm(centred @ top) ** 2 / torch.linalg.matrix_norm(centred).clamp_min(_TINY) ** 2


def kernel_agreement_baseline(tokens: int, rank: int) -> float:
    """Expected :func:`kernel_agreement` of a map whose centred rows point in random directions: r / (N - 1)."""
    return min(rank, tokens - 1) / (tokens - 1)


def effective_rank(A: torch.Tensor) -> torch.Tensor:
    """exp(-sum_i s_i log s_i) with s the singular values of A normalised to sum 1 (1 to N)."""
    singular = torch.linalg.svdvals(A.to(torch.float64))
    share = singular / singular.sum(-1, keepdim=True).clamp_min(_TINY)
    return torch.exp(-(share * share.clamp_min(_TINY).log()).sum(-1))


def head_redundancy(A: torch.Tensor) -> torch.Tensor:
    """Mean pairwise cosine similarity of the K heads' maps; A (B, K, N, N) -> (B,). Needs K >= 2."""
    heads = A.shape[1]
    flat = torch.nn.functional.normalize(A.flatten(2).to(torch.float64), dim=-1)
    similarity = flat @ flat.transpose(1, 2)  # (B, K, K)
    off_diagonal = similarity.sum(dim=(1, 2)) - similarity.diagonal(dim1=1, dim2=2).sum(-1)
    return off_diagonal / (heads * (heads - 1))


def row_entropy(A: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of every attention row: -sum_j A_ij log A_ij."""
    A = A.to(torch.float64)
    return -(A * A.clamp_min(_TINY).log()).sum(-1)


def top_k_mass(A: torch.Tensor, k: int) -> torch.Tensor:
    """Attention mass each row puts on its k largest entries."""
    return A.to(torch.float64).topk(min(k, A.shape[-1]), dim=-1).values.sum(-1)


def token_dispersion(Z: torch.Tensor) -> torch.Tensor:
    """Mean squared distance of the tokens from their mean, per sample: Z (B, N, d) -> (B,)."""
    Z = Z.to(torch.float64)
    return (Z - Z.mean(dim=1, keepdim=True)).pow(2).sum(-1).mean(-1)


def relative_dispersion(Z: torch.Tensor) -> torch.Tensor:
    """:func:`token_dispersion` over the mean squared token norm (0: all tokens equal; 1: mean zero)."""
    return token_dispersion(Z) / Z.to(torch.float64).pow(2).sum(-1).mean(-1).clamp_min(_TINY)


def key_subsampling_error(
    logits: torch.Tensor, values: torch.Tensor, keys: int, draws: int = 4, seed: int = 0
) -> torch.Tensor:
    """Mean relative change ||o' - o|| / ||o|| of each head's outputs when attention is restricted to a
    random subset of ``keys`` of the N tokens (one subset per draw, shared by the batch and heads).

    ``logits`` (B, K, N, N) and ``values`` (B, K, N, p) as the model computed them; returns (B, K).
    """
    tokens = logits.shape[-1]
    logits, values = logits.to(torch.float64), values.to(torch.float64)
    full = logits.softmax(-1) @ values
    norm = full.norm(dim=-1).clamp_min(_TINY)
    generator = torch.Generator().manual_seed(seed)
    errors = []
    for _ in range(draws if keys < tokens else 1):
        subset = torch.randperm(tokens, generator=generator)[:keys].to(logits.device)
        sub = logits[..., subset].softmax(-1) @ values[..., subset, :]
        errors.append(((sub - full).norm(dim=-1) / norm).mean(-1))
    return torch.stack(errors).mean(0)
