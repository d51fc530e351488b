"""Coding-rate metrics against an independent float64 numpy computation, and their torchmetrics behaviour."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from crate.metrics import CodingRate, CompressionRate, SparseRateReduction, Sparsity
from crate.metrics import functional as F


def np_rate(Z: np.ndarray, alpha: float) -> float:
    """1/2 logdet(I_d + alpha Z^T Z) on the d x d side, whatever N is (numpy, float64)."""
    d = Z.shape[1]
    sign, logdet = np.linalg.slogdet(np.eye(d) + alpha * Z.T @ Z)
    assert sign > 0
    return 0.5 * logdet


def np_coding_rate(Z: np.ndarray, eps: float, convention: str) -> float:
    N, d = Z.shape
    if convention == "official":
        Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        return np_rate(Z, d / (N * eps))
    return np_rate(Z, d / (N * eps**2))


def np_compression(Z: np.ndarray, U: np.ndarray, eps: float, convention: str) -> float:
    return sum(np_coding_rate(Z @ U_k, eps, convention) for U_k in U)


def _inputs(kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "n_greater_d":
        return rng.standard_normal((3, 50, 12))
    if kind == "n_less_d":
        return rng.standard_normal((3, 7, 40))
    if kind == "rank_deficient":
        return rng.standard_normal((3, 30, 3)) @ rng.standard_normal((3, 3, 20))
    raise ValueError(kind)


KINDS = ["n_greater_d", "n_less_d", "rank_deficient"]


def _rel_err(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("eps", [0.5, 1e-3])
@pytest.mark.parametrize("convention", ["paper", "official"])
def test_coding_rate_equals_numpy(kind: str, eps: float, convention: str) -> None:
    Z = _inputs(kind, np.random.default_rng(0))
    ours = F.coding_rate(torch.from_numpy(Z).float(), eps, convention)
    assert ours.shape == (3,) and ours.dtype == torch.float64
    for b in range(3):
        reference = np_coding_rate(Z[b].astype(np.float32).astype(np.float64), eps, convention)
        assert _rel_err(ours[b].item(), reference) <= 1e-6


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("eps", [0.5, 1e-3])
@pytest.mark.parametrize("convention", ["paper", "official"])
def test_compression_rate_equals_numpy(kind: str, eps: float, convention: str) -> None:
    rng = np.random.default_rng(1)
    Z = _inputs(kind, rng)
    U = rng.standard_normal((4, Z.shape[-1], 5))
    ours = F.compression_rate(torch.from_numpy(Z), torch.from_numpy(U), eps, convention)
    for b in range(3):
        assert _rel_err(ours[b].item(), np_compression(Z[b], U, eps, convention)) <= 1e-6


def test_sparsity_and_sparse_rate_reduction_equal_numpy() -> None:
    rng = np.random.default_rng(2)
    Z = np.maximum(rng.standard_normal((4, 20, 16)), 0.0)  # about half exact zeros, as after ISTA
    U = rng.standard_normal((2, 16, 8))
    Zt, Ut = torch.from_numpy(Z), torch.from_numpy(U)
    ours_sparsity = F.sparsity(Zt)
    ours_srr = F.sparse_rate_reduction(Zt, Ut, eps=0.5, lam=0.1)
    for b in range(4):
        assert _rel_err(ours_sparsity[b].item(), float(np.mean(Z[b] == 0))) <= 1e-12
        reference = (
            np_coding_rate(Z[b], 0.5, "paper")
            - np_compression(Z[b], U, 0.5, "paper")
            - 0.1 * np.abs(Z[b]).sum() / Z.shape[1]
        )
        assert _rel_err(ours_srr[b].item(), reference) <= 1e-6


def test_bad_shapes_and_conventions_are_refused() -> None:
    with pytest.raises(ValueError, match="convention"):
        F.coding_rate(torch.randn(2, 3, 4), 0.5, "mine")
    with pytest.raises(ValueError, match=r"subspaces U of shape \(K, d=4, p\)"):
        F.compression_rate(torch.randn(2, 3, 4), torch.randn(2, 5, 2))
    with pytest.raises(ValueError, match=r"\(B, N, d\)"):
        F.sparsity(torch.randn(4))
    for empty in (torch.randn(2, 0, 4), torch.randn(3, 0)):  # no tokens, or tokens of no dimension
        for measure in (F.coding_rate, F.sparsity, lambda Z: F.compression_rate(Z, torch.randn(2, Z.shape[-1], 1))):
            with pytest.raises(ValueError, match="at least one token"):
                measure(empty)


@pytest.mark.parametrize("eps", [0.0, -0.5, float("nan"), float("inf"), "half"])
def test_a_distortion_that_is_no_positive_number_is_refused_by_functions_and_metrics(eps) -> None:
    """The paper's convention squares eps, so -0.5 would otherwise pass for 0.5; 0 divides by zero."""
    Z, U = torch.randn(2, 3, 4), torch.randn(2, 4, 2)
    with pytest.raises(ValueError, match=r"eps must be a finite number above 0"):
        F.coding_rate(Z, eps)
    with pytest.raises(ValueError, match=r"eps must be a finite number above 0"):
        F.compression_rate(Z, U, eps, "official")
    for metric in (CodingRate, CompressionRate, SparseRateReduction):
        with pytest.raises(ValueError, match=r"eps must be a finite number above 0"):
            metric(eps=eps)
    with pytest.raises(ValueError, match="convention"):
        CodingRate(convention="mine")  # at construction, as torchmetrics checks its arguments
    with pytest.raises(ValueError, match="lam"):
        SparseRateReduction(lam=float("nan"))


def _metrics_and_inputs(seed: int = 3) -> tuple[list, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    Z = torch.relu(torch.randn(10, 9, 12, generator=generator, dtype=torch.float64))
    U = torch.randn(3, 12, 4, generator=generator, dtype=torch.float64)
    metrics = [
        CodingRate(eps=0.5),
        CompressionRate(eps=0.5),
        Sparsity(),
        SparseRateReduction(eps=0.5, lam=0.1),
    ]
    return metrics, Z, U


def _update(metric, Z: torch.Tensor, U: torch.Tensor) -> None:
    if isinstance(metric, (CompressionRate, SparseRateReduction)):
        metric.update(Z, U)
    else:
        metric.update(Z)


def _functional_mean(metric, Z: torch.Tensor, U: torch.Tensor) -> float:
    if isinstance(metric, CodingRate):
        return F.coding_rate(Z, 0.5).mean().item()
    if isinstance(metric, CompressionRate):
        return F.compression_rate(Z, U, 0.5).mean().item()
    if isinstance(metric, Sparsity):
        return F.sparsity(Z).mean().item()
    return F.sparse_rate_reduction(Z, U, 0.5, 0.1).mean().item()


def test_metrics_accumulated_over_uneven_batches_equal_the_functional_on_the_concatenation() -> None:
    metrics, Z, U = _metrics_and_inputs()
    for metric in metrics:
        for chunk in (Z[:1], Z[1:4], Z[4:]):
            _update(metric, chunk, U)
        assert _rel_err(metric.compute().item(), _functional_mean(metric, Z, U)) <= 1e-12
        assert metric.full_state_update is False


def test_metric_plot_returns_a_figure() -> None:
    metric = Sparsity()
    metric.update(torch.relu(torch.randn(2, 5, 6)))
    figure, axis = metric.plot()
    assert figure is not None and axis is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    metrics, Z, U = _metrics_and_inputs()
    shard = Z[:3] if rank == 0 else Z[3:]  # uneven shards: 3 and 7 samples
    values = []
    for metric in metrics:
        _update(metric, shard, U)
        values.append(metric.compute().item())
    if rank == 0:
        torch.save(values, out)
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_synced_value_equals_single_process_value_on_the_union(tmp_path) -> None:
    out = str(tmp_path / "values.pt")
    mp.spawn(_ddp_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    synced = torch.load(out)
    metrics, Z, U = _metrics_and_inputs()
    for metric, value in zip(metrics, synced, strict=True):
        _update(metric, Z, U)
        assert _rel_err(value, metric.compute().item()) <= 1e-12
