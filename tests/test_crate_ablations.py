"""CRATE's ablations (CRATE-MLP, CRATE-MHSA, attention-only) against literal transcriptions of their layers,
tokens as columns, and as whole models: CRATE's layout with one step swapped."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F
from test_layers import _subspace_list, ista_literal, mssa_literal

import crate  # noqa: F401
from crate.models.crate_ablations import MHSA, CrateAttentionOnlyBlock, CrateMLPBlock


def _ln(Z: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(Z.T, Z.shape[:1], norm.weight, norm.bias).T


def mhsa_literal(Z: torch.Tensor, attn: MHSA) -> torch.Tensor:
    """W_o [V_k softmax(K_k^T Q_k / sqrt(p)); k] + b_o with Q_k = W_q,k Z + b_q,k (and K_k, V_k alike)."""
    heads, p = attn.num_heads, attn.head_dim
    W, b = attn.qkv.weight, attn.qkv.bias
    outputs = []
    for k in range(heads):
        rows = [slice(part * heads * p + k * p, part * heads * p + (k + 1) * p) for part in range(3)]
        Q, K, V = (W[r] @ Z + b[r][:, None] for r in rows)
        A = torch.softmax(K.T @ Q / math.sqrt(p), dim=0)  # N x N, column j: the weights of query j
        outputs.append(V @ A)
    return attn.proj.weight @ torch.cat(outputs) + attn.proj.bias[:, None]


def _mssa_step(Z: torch.Tensor, block: torch.nn.Module) -> torch.Tensor:
    """Z + MSSA(LN_1(Z)) of a CRATE-layout block, tokens as columns."""
    attn = block.attn
    return Z + mssa_literal(_ln(Z, block.norm1), _subspace_list(attn), attn.proj.weight, attn.proj.bias)


def _perturbed(block: torch.nn.Module) -> torch.nn.Module:
    """Norms off their identity initialisation, so the test sees the norms' parameters used."""
    with torch.no_grad():
        for name, param in block.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn_like(param))
    return block.eval()


def test_crate_mlp_block_is_mssa_residual_then_mlp_residual() -> None:
    torch.manual_seed(0)
    block = _perturbed(CrateMLPBlock(48, 4))
    x = torch.randn(2, 9, 48)
    with torch.no_grad():
        out = block(x)
        for b in range(2):
            half = _mssa_step(x[b].T, block)
            y = _ln(half, block.norm2)
            hidden = F.gelu(block.mlp.fc1.weight @ y + block.mlp.fc1.bias[:, None])
            literal = half + block.mlp.fc2.weight @ hidden + block.mlp.fc2.bias[:, None]
            torch.testing.assert_close(out[b], literal.T, atol=1e-5, rtol=0)
    assert block.mlp.fc1.out_features == 4 * 48 and not hasattr(block, "ista")


def test_crate_mhsa_block_is_softmax_attention_residual_then_ista() -> None:
    torch.manual_seed(1)
    model = timm.create_model("crate_nano_patch4_32_mhsa", num_classes=10)
    block = _perturbed(model.blocks[2])
    assert isinstance(block.attn, MHSA)
    x = torch.randn(2, 17, 96)
    with torch.no_grad():
        out = block(x)
        for b in range(2):
            Z = x[b].T
            half = Z + mhsa_literal(_ln(Z, block.norm1), block.attn)
            literal = ista_literal(_ln(half, block.norm2), block.ista.weight, 0.1, 0.1)
            torch.testing.assert_close(out[b], literal.T, atol=1e-5, rtol=0)


def test_attention_only_block_is_the_mssa_step_alone() -> None:
    torch.manual_seed(2)
    block = _perturbed(CrateAttentionOnlyBlock(48, 4))
    x = torch.randn(2, 9, 48)
    with torch.no_grad():
        out = block(x)
        for b in range(2):
            torch.testing.assert_close(out[b], _mssa_step(x[b].T, block).T, atol=1e-5, rtol=0)
    assert not hasattr(block, "ista") and isinstance(block.norm2, torch.nn.Identity)


@pytest.mark.parametrize("size", ["nano", "micro"])
def test_ablations_keep_crate_s_layout_and_differ_in_one_step(size: str) -> None:
    crate_model = timm.create_model(f"crate_{size}_patch4_32", num_classes=10)
    own = {n: p.shape for n, p in crate_model.named_parameters()}
    for ablation, swapped in (("mlp", ".ista."), ("mhsa", ".attn."), ("attn_only", ".ista.")):
        model = timm.create_model(f"crate_{size}_patch4_32_{ablation}", num_classes=10)
        theirs = {n: p.shape for n, p in model.named_parameters()}
        shared = {n for n in own if swapped not in n and not (ablation == "attn_only" and ".norm2." in n)}
        assert {n: own[n] for n in shared} == {n: theirs[n] for n in shared}, ablation  # the rest is CRATE's
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
        # the trace every lens reads: attention maps in every layer, a sparse code only where ISTA remains
        with torch.no_grad():
            z = model._embed(torch.randn(2, 3, 32, 32))
            for block in model.blocks:
                expected = block(z)
                z, trace = block.forward_trace(z)
                torch.testing.assert_close(z, expected)
                assert trace.attention is not None and trace.subspaces.shape[0] == model.blocks[0].attn.num_heads
                assert (trace.sparse_code is not None) == (ablation == "mhsa")
