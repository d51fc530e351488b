"""CBSA's representatives' coding rate around their contraction step (crate.metrics.representatives), against a
float64 numpy transcription of the layer: pooling, read-out softmax, step, and the head-summed log-determinant."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

import crate  # noqa: F401
from crate.metrics import trace_model
from crate.metrics.representatives import representative_compression


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rate(reps: np.ndarray, eps: float) -> float:
    """sum over heads of 1/2 logdet(I + p/(M eps^2) R_k^T R_k), R_k (M, p)."""
    total = 0.0
    for head in reps:
        m, p = head.shape
        total += 0.5 * np.linalg.slogdet(np.eye(p) + p / (m * eps**2) * head.T @ head)[1]
    return total


def _numpy_layer(x: np.ndarray, attn: torch.nn.Module, grid: int, eps: float) -> tuple[float, float, float]:
    heads, p = attn.num_heads, attn.head_dim
    w = x @ attn.qkv.weight.detach().double().numpy().T  # (N, K p), class token first
    patches = w[1:].reshape(8, 8, heads * p)  # the 64 patch tokens on their grid
    block = 8 // grid
    pooled = patches.reshape(grid, block, grid, block, -1).mean(axis=(1, 3)).reshape(grid * grid, -1)
    step_rep = attn.step_rep.detach().double().numpy().reshape(heads)
    before, after, negated = [], [], []
    for k in range(heads):
        wk, rk = w[:, k * p : (k + 1) * p], pooled[:, k * p : (k + 1) * p]
        step = step_rep[k] * _softmax(rk @ wk.T / np.sqrt(p)) @ wk
        before.append(rk), after.append(rk + step), negated.append(rk - step)
    return tuple(_rate(np.stack(r), eps) for r in (before, after, negated))


@pytest.mark.parametrize("name", ["cbt_nano_patch4_32", "vit_nano_patch4_32_cbsa"])
def test_representative_rates_equal_a_numpy_transcription(name: str) -> None:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).double().eval()
    images = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    measured = representative_compression(model, images, eps=0.5)
    assert [r.layer for r in measured] == list(range(len(model.blocks)))
    traces = trace_model(model, images)
    for result, trace, block in zip(measured, traces, model.blocks, strict=True):
        per_image = [_numpy_layer(x.numpy(), block.attn, 4, 0.5) for x in trace.attn_input]
        before, after, negated = np.mean(per_image, axis=0)
        assert result.before == pytest.approx(before, rel=1e-9)
        assert result.change == pytest.approx(after - before, rel=1e-7, abs=1e-9)
        assert result.negated_change == pytest.approx(negated - before, rel=1e-7, abs=1e-9)
        assert 0 < result.relative_step


def test_a_model_without_cbsa_has_no_representatives_and_eps_is_checked() -> None:
    model = timm.create_model("vit_nano_patch4_32", num_classes=10).eval()
    assert representative_compression(model, torch.randn(2, 3, 32, 32)) == []
    with pytest.raises(ValueError, match="eps"):
        representative_compression(model, torch.randn(2, 3, 32, 32), eps=0.0)
