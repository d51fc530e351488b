"""SimDINO's loss against a float64 transcription of the authors' MCRLoss: one process, and two processes
(gloo) with and without the covariance all-reduce."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from crate.metrics import simdino_loss


def _numpy_mcr(
    student: np.ndarray,
    teacher: np.ndarray,
    n_crops: int,
    eps: float,
    coeff: float,
    expa_type: int,
    processes: int = 1,
    covariances: list[np.ndarray] | None = None,
) -> tuple[float, float, float]:
    """The authors' MCRLoss written out view by view and pair by pair in float64. ``covariances``: the per-view
    covariances to use (summed over processes) instead of this process's own."""
    batch = len(student) // n_crops
    s = student.reshape(n_crops, batch, -1)
    t = teacher.reshape(-1, batch, s.shape[-1])
    total, terms = 0.0, 0
    for i in range(len(t)):
        for j in range(n_crops):
            if i == j:
                continue
            cos = (t[i] * s[j]).sum(-1) / (np.linalg.norm(t[i], axis=-1) * np.linalg.norm(s[j], axis=-1))
            total += cos.mean()
            terms += 1
    compression = total / terms
    p = s.shape[-1]
    rates = []
    for v in range(len(t)):
        z = s[v] if expa_type == 0 else (s[v] + t[v]) / 2
        cov = z.T @ z if covariances is None else covariances[v]
        rates.append(0.5 * np.linalg.slogdet(np.eye(p) + p / (batch * processes * eps) * cov)[1])
    expansion = np.mean(rates) * (p + processes * batch) / (p * processes * batch)
    return -coeff * compression - expansion, compression, expansion


def _features(seed: int, n_crops: int = 4, batch: int = 6, p: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    student = torch.nn.functional.normalize(torch.randn(n_crops * batch, p, generator=g, dtype=torch.float64), dim=-1)
    teacher = torch.nn.functional.normalize(torch.randn(2 * batch, p, generator=g, dtype=torch.float64), dim=-1)
    return student, teacher


@pytest.mark.parametrize("expa_type", [0, 1])
@pytest.mark.parametrize(("eps", "coeff"), [(0.5, 1.0), (0.05, 10.0)])
def test_one_process_equals_the_float64_transcription(expa_type: int, eps: float, coeff: float) -> None:
    student, teacher = _features(0)
    loss, compression, expansion = simdino_loss(student, teacher, 4, eps=eps, coeff=coeff, expa_type=expa_type)
    expected = _numpy_mcr(student.numpy(), teacher.numpy(), 4, eps, coeff, expa_type)
    np.testing.assert_allclose([loss.item(), compression.item(), expansion.item()], expected, rtol=1e-10)


def test_the_gradient_reaches_the_student_and_spares_a_detached_teacher() -> None:
    student, teacher = _features(1)
    student.requires_grad_(True)
    loss, *_ = simdino_loss(student, teacher.detach(), 4)
    loss.backward()
    assert student.grad is not None and student.grad.abs().sum() > 0


def test_bad_shapes_and_settings_are_refused() -> None:
    student, teacher = _features(2)
    with pytest.raises(ValueError, match="n_crops"):
        simdino_loss(student[:-1], teacher, 4)
    with pytest.raises(ValueError, match="teacher features"):
        simdino_loss(student, teacher[:, :3], 4)
    with pytest.raises(ValueError, match="expa_type"):
        simdino_loss(student, teacher, 4, expa_type=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, reduce_cov: bool, queue) -> None:  # noqa: ANN001 (a multiprocessing queue)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    student, teacher = _features(10 + rank)
    student.requires_grad_(True)
    loss, compression, expansion = simdino_loss(student, teacher, 4, expa_type=1, reduce_cov=reduce_cov)
    loss.backward()
    queue.put((rank, loss.item(), compression.item(), expansion.item(), float(student.grad.abs().sum())))
    torch.distributed.destroy_process_group()


@pytest.mark.slow  # two worker processes
@pytest.mark.parametrize("reduce_cov", [False, True])
def test_two_processes_use_n_2_and_sum_the_covariances_when_asked(reduce_cov: bool) -> None:
    """Each process's loss against the transcription with N = 2: its own covariances, or (``reduce_cov``) the
    sum of both processes'; the all-reduce is differentiable (the student gets a gradient)."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(_worker, args=(_free_port(), reduce_cov, queue), nprocs=2, start_method="spawn")
    results = sorted(queue.get() for _ in range(2))
    shards = [_features(10 + rank) for rank in range(2)]
    summed = None
    if reduce_cov:
        views = [
            [(s.numpy().reshape(4, 6, -1)[v] + t.numpy().reshape(2, 6, -1)[v]) / 2 for v in range(2)] for s, t in shards
        ]
        summed = [sum(z[v].T @ z[v] for z in views) for v in range(2)]
    for (rank, loss, compression, expansion, grad), (student, teacher) in zip(results, shards, strict=True):
        expected = _numpy_mcr(student.numpy(), teacher.numpy(), 4, 0.5, 1.0, 1, processes=2, covariances=summed)
        np.testing.assert_allclose([loss, compression, expansion], expected, rtol=1e-10, err_msg=f"rank {rank}")
        assert grad > 0


def test_the_coding_rate_is_computed_in_float32_under_bf16_autocast() -> None:
    """Under autocast the covariance and its Cholesky factor stay in float32 (CUDA has no bf16 Cholesky, and a
    bf16 covariance moves the log-determinant by far more than float32 rounding)."""
    torch.manual_seed(0)
    student = torch.nn.functional.normalize(torch.randn(4 * 32, 64), dim=-1)
    teacher = torch.nn.functional.normalize(torch.randn(2 * 32, 64), dim=-1)
    plain = simdino_loss(student, teacher, n_crops=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = simdino_loss(student, teacher, n_crops=4)
    torch.testing.assert_close(autocast[2], plain[2], rtol=1e-5, atol=1e-6)
