"""SimDINO's objective (Wu et al., "Simplifying DINO via Coding Rate Regularization", 2025): self-distillation
whose collapse is prevented by the coding rate of the features instead of DINO's centring and sharpening.

For a batch of B images, each seen in V_s student views (the first V_t of them global, seen by the teacher
too), with L2-normalised features S[v, b] (student) and T[v, b] (teacher) of dimension p:

    compression = sum over pairs (t, s), t != s, of mean_b cos(T[t, b], S[s, b]) / (V_t V_s - min(V_t, V_s))

    expansion   = (p + N m) / (p N m) * mean_{v < V_t} 1/2 logdet(I_p + p / (m N eps) Z_v^T Z_v)

    loss        = -coeff * compression - expansion

where Z_v (m x p) is, per global view, the student features (``expa_type=0``) or the mean of student and
teacher features (``expa_type=1``), m = B the images of this process and N the number of processes; with
``reduce_cov`` the covariances Z_v^T Z_v are summed over the processes (differentiably) before the logdet.
This is the authors' ``MCRLoss`` (their eps enters as eps, not eps^2, and the half logdet is taken through a
Cholesky factor); the teacher's features carry no gradient in their training, which the caller arranges.

Example:
    >>> import torch
    >>> from crate.metrics import simdino_loss
    >>> student = torch.nn.functional.normalize(torch.randn(4 * 8, 16), dim=-1)  # 4 views of 8 images
    >>> teacher = torch.nn.functional.normalize(torch.randn(2 * 8, 16), dim=-1)  # the 2 global views
    >>> loss, compression, expansion = simdino_loss(student, teacher, n_crops=4)
    >>> bool(loss == -compression - expansion)
    True
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn as dist_nn
import torch.nn.functional as F

__all__ = ["simdino_loss"]


def _compression(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean cosine similarity of every (teacher view t, student view s) pair of the same image, t != s."""
    n_teacher, n_student = len(teacher), len(student)
    similarity = F.cosine_similarity(teacher[:, None], student[None], dim=-1).mean(dim=-1)  # (V_t, V_s)
    same_view = torch.eye(n_teacher, n_student, dtype=torch.bool, device=similarity.device)
    terms = n_teacher * n_student - min(n_teacher, n_student)
    return similarity.masked_fill(same_view, 0.0).sum() / terms


def _expansion(views: torch.Tensor, eps: float, reduce_cov: bool) -> torch.Tensor:
    """The coding rate of each view's features (V, m, p), averaged over views and scaled as the authors do."""
    _, m, p = views.shape
    if views.dtype in (torch.float16, torch.bfloat16):  # no half-precision Cholesky on CUDA, and too coarse
        views = views.float()
    with torch.autocast(views.device.type, enabled=False):  # autocast would take the product back to bf16
        covariance = views.transpose(1, 2) @ views  # (V, p, p)
    processes = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if reduce_cov and processes > 1:
        covariance = dist_nn.all_reduce(covariance)
    identity = torch.eye(p, dtype=covariance.dtype, device=covariance.device)
    with torch.autocast(views.device.type, enabled=False):
        factor = torch.linalg.cholesky_ex(identity + p / (m * processes * eps) * covariance)[0]
    half_logdet = factor.diagonal(dim1=-2, dim2=-1).log().sum(dim=-1)
    return half_logdet.mean() * (p + processes * m) / (p * processes * m)


def simdino_loss(
    student_feat: torch.Tensor,
    teacher_feat: torch.Tensor,
    n_crops: int,
    eps: float = 0.5,
    coeff: float = 1.0,
    expa_type: int = 1,
    reduce_cov: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, compression, expansion) for student features (n_crops * B, p) and teacher features
    (n_teacher * B, p), views stacked view after view as the authors' ``MCRLoss.forward`` takes them (module
    docstring). The last two are detached, for logging."""
    if n_crops < 1 or student_feat.ndim != 2 or len(student_feat) % n_crops:
        raise ValueError(
            f"student features must be (n_crops * B, p) with n_crops={n_crops}; got {tuple(student_feat.shape)}"
        )
    if expa_type not in (0, 1):
        raise ValueError(f"expa_type is 0 (student features) or 1 (student and teacher averaged); got {expa_type}")
    if eps <= 0:
        raise ValueError(f"eps must be positive; got {eps}")
    batch = len(student_feat) // n_crops
    student = student_feat.view(n_crops, batch, -1)
    if teacher_feat.ndim != 2 or len(teacher_feat) % batch or teacher_feat.shape[-1] != student.shape[-1]:
        raise ValueError(
            f"teacher features must be (n_teacher * B, p) with B={batch}, p={student.shape[-1]}; "
            f"got {tuple(teacher_feat.shape)}"
        )
    teacher = teacher_feat.view(len(teacher_feat) // batch, batch, -1)
    if len(teacher) > n_crops:
        raise ValueError(f"the teacher has {len(teacher)} views, more than the student's {n_crops}")
    compression = _compression(student, teacher)
    globals_ = student[: len(teacher)]
    expansion = _expansion(globals_ if expa_type == 0 else (globals_ + teacher) / 2, eps, reduce_cov)
    loss = -coeff * compression - expansion
    return loss, compression.detach(), expansion.detach()
