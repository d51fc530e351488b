"""The fast layers against literal, column-form transcriptions of the paper's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from crate.layers import ISTA, MSSA, subspace_attention
from crate.layers.mssa import _SharedQKVAttention
from crate.models.crate import CrateBlock


def mssa_literal(Z: torch.Tensor, U: list[torch.Tensor], W_o: torch.Tensor, b_o: torch.Tensor) -> torch.Tensor:
    """MSSA(Z) = W_o [U_1^T Z softmax((U_1^T Z)^T (U_1^T Z) / sqrt(p)); ...] + b_o, tokens as columns."""
    heads = []
    for U_k in U:
        p = U_k.shape[1]
        w = U_k.T @ Z  # p x N
        A = torch.softmax(w.T @ w / math.sqrt(p), dim=0)  # N x N, each column sums to one
        heads.append(w @ A)
    return W_o @ torch.cat(heads, dim=0) + b_o[:, None]


def ista_literal(Z: torch.Tensor, D: torch.Tensor, eta: float, lam: float) -> torch.Tensor:
    """ISTA(Z) = ReLU(Z + eta (D^T Z - D^T D Z) - eta lambda), tokens as columns."""
    return torch.relu(Z + eta * (D.T @ Z - D.T @ D @ Z) - eta * lam)


def _subspace_list(layer: MSSA) -> list[torch.Tensor]:
    p = layer.head_dim
    return [layer.qkv.weight[k * p : (k + 1) * p].T for k in range(layer.num_heads)]


@pytest.mark.parametrize("dim,heads,tokens", [(64, 4, 17), (48, 6, 65), (32, 1, 5)])
def test_mssa_matches_literal_formula(dim: int, heads: int, tokens: int) -> None:
    torch.manual_seed(0)
    layer = MSSA(dim, heads).eval()
    x = torch.randn(3, tokens, dim)
    with torch.no_grad():
        fast = layer(x)
        for b in range(x.shape[0]):
            literal = mssa_literal(x[b].T, _subspace_list(layer), layer.proj.weight, layer.proj.bias).T
            assert (fast[b] - literal).abs().max().item() <= 1e-5


def test_mssa_subspaces_are_the_shared_projection() -> None:
    layer = MSSA(32, 4)
    U = layer.subspaces
    assert U.shape == (4, 32, 8)
    x = torch.randn(2, 7, 32)
    w = layer.project(x)  # (B, K, N, p)
    for k in range(4):
        torch.testing.assert_close(w[:, k], x @ U[k], rtol=0, atol=1e-6)


@pytest.mark.parametrize("dim,eta,lam", [(64, 0.1, 0.1), (40, 0.5, 0.01)])
def test_ista_matches_literal_formula(dim: int, eta: float, lam: float) -> None:
    torch.manual_seed(1)
    layer = ISTA(dim, step_size=eta, lambd=lam)
    x = torch.randn(2, 33, dim)
    with torch.no_grad():
        fast = layer(x)
        for b in range(x.shape[0]):
            literal = ista_literal(x[b].T, layer.weight, eta, lam).T
            assert (fast[b] - literal).abs().max().item() <= 1e-5
    assert (fast >= 0).all()


def test_crate_block_is_mssa_residual_then_ista_without_residual() -> None:
    torch.manual_seed(2)
    block = CrateBlock(48, 4).eval()
    x = torch.randn(2, 9, 48)
    with torch.no_grad():
        out = block(x)
        for b in range(2):
            Z = x[b].T
            Zn = F.layer_norm(x[b], (48,), block.norm1.weight, block.norm1.bias).T
            attn = block.attn
            half = Z + mssa_literal(Zn, _subspace_list(attn), attn.proj.weight, attn.proj.bias)
            half_n = F.layer_norm(half.T, (48,), block.norm2.weight, block.norm2.bias).T
            literal = ista_literal(half_n, block.ista.weight, 0.1, 0.1).T
            assert (out[b] - literal).abs().max().item() <= 1e-5


def test_attention_core_uses_bf16_matmuls_under_cpu_autocast() -> None:
    torch.manual_seed(3)
    w = torch.randn(2, 3, 20, 16)
    reference = torch.softmax(w @ w.transpose(-2, -1) / 4.0, dim=-1) @ w
    fp32 = subspace_attention(w, 0.25)
    assert fp32.dtype == torch.float32
    assert (fp32 - reference).abs().max().item() <= 1e-5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = subspace_attention(w, 0.25)
    # SDPA is not autocast on CPU and would return float32; the explicit bf16 path returns bfloat16.
    assert low.dtype == torch.bfloat16
    assert (low.float() - reference).abs().max().item() <= 0.1


def _literal_shared_attention(w: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale w w^T) w, written out per batch and head with autograd deriving the gradient."""
    return torch.stack(
        [torch.stack([torch.softmax(scale * wk @ wk.T, dim=-1) @ wk for wk in wb]) for wb in w.unbind(0)]
    )


def test_shared_qkv_attention_backward_matches_float64_autograd_and_finite_differences() -> None:
    torch.manual_seed(5)
    w = torch.randn(2, 3, 9, 4, dtype=torch.float64, requires_grad=True)
    # the hand-written backward (q = k = v) against numerical differentiation of the forward
    assert torch.autograd.gradcheck(lambda t: _SharedQKVAttention.apply(t, 0.5), (w,))
    upstream = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    (grad,) = torch.autograd.grad(_literal_shared_attention(w, 0.5), w, upstream)
    (ours,) = torch.autograd.grad(_SharedQKVAttention.apply(w, 0.5), w, upstream)
    assert (ours - grad).abs().max().item() <= 1e-12


def test_bf16_attention_core_gradient_is_the_float64_gradient_to_bf16_rounding() -> None:
    torch.manual_seed(6)
    w = torch.randn(2, 3, 33, 16)
    upstream = torch.randn(2, 3, 33, 16)
    exact = w.double().requires_grad_()
    (grad,) = torch.autograd.grad(_literal_shared_attention(exact, 0.25), exact, upstream.double())
    low = w.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = subspace_attention(low, 0.25)
    assert out.dtype == torch.bfloat16 and out.grad_fn is not None
    (ours,) = torch.autograd.grad(out, low, upstream.bfloat16())
    scale = grad.abs().max().item()
    assert (ours.double() - grad).abs().max().item() <= 0.03 * scale


def test_ista_runs_whole_in_bf16_under_cpu_autocast_and_trains_the_fp32_dictionary() -> None:
    torch.manual_seed(4)
    layer = ISTA(64)
    x = torch.randn(2, 33, 64)
    literal = torch.stack([ista_literal(x[b].T.double(), layer.weight.double(), 0.1, 0.1).T for b in range(2)])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = layer(x)
    assert low.dtype == torch.bfloat16  # no float32 passes left in the step
    scale = literal.abs().max().item()
    assert (low.double() - literal).abs().max().item() <= 0.02 * scale  # bf16 rounding, not another formula
    low.float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32
    outside = layer(x)  # autocast off again: the float32 step
    assert outside.dtype == torch.float32 and (outside.double() - literal).abs().max().item() <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nonnegative_part_under_compile_is_max_x_0_with_its_gradient(dtype: torch.dtype) -> None:
    from crate.layers.ista import nonnegative_part

    torch.manual_seed(0)
    values = torch.cat([torch.randn(1000) * 10, torch.tensor([1e-30, -1e-30, 3e30, -3e30, -0.0])]).to(dtype)
    compiled = torch.compile(nonnegative_part, fullgraph=True, dynamic=False)
    for function in (nonnegative_part, compiled):
        x = values.clone().requires_grad_(True)
        out = function(x)
        out.backward(torch.ones_like(out))
        expected = torch.from_numpy(np.maximum(values.double().numpy(), 0.0))
        assert out.dtype == dtype and torch.equal(out.double(), expected)
        assert torch.equal(x.grad.double()[:-1], torch.from_numpy((values.double().numpy() > 0)[:-1] * 1.0))
