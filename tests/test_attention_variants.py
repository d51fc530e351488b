"""Kernel attention, Attention-BN/-SH and TSSA against literal einsum transcriptions of their formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks.flops import FUSED_ATTENTION_OPS, flop_counter
from crate.layers import (
    TSSA,
    KernelAttention,
    PrimalDualAttention,
    PrimalDualMSSA,
    kernel_attention,
)

DIM, HEADS, TOKENS = 32, 4, 17
P = DIM // HEADS


def _qkv(layer: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k, v (B, K, N, p) from the layer's own ``qkv`` weights, written out with einsum."""
    W = layer.qkv.weight.reshape(3, HEADS, P, DIM)
    b = layer.qkv.bias.reshape(3, 1, HEADS, 1, P) if layer.qkv.bias is not None else 0.0
    out = torch.einsum("bnd,shpd->sbhnp", x, W) + b
    return out[0], out[1], out[2]


def _combine(layer: torch.nn.Module, heads: torch.Tensor) -> torch.Tensor:
    """W_o [head_1; ...; head_K] + b_o from (B, K, N, p)."""
    return torch.einsum("bhnp,ehp->bne", heads, layer.proj.weight.reshape(DIM, HEADS, P)) + layer.proj.bias


def _literal_kernel(kernel: str, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """kappa(q_i, k_j) for every pair, (B, K, N, N), each kernel as its formula reads."""
    dots = torch.einsum("bhip,bhjp->bhij", q, k)
    if kernel == "exp":
        return torch.exp(dots / math.sqrt(P))
    if kernel == "rbf":
        distance = ((q[:, :, :, None, :] - k[:, :, None, :, :]) ** 2).sum(-1)
        return torch.exp(-distance / (2 * math.sqrt(P)))
    if kernel == "poly2":
        return (1 + dots / math.sqrt(P)) ** 2
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    return torch.einsum("bhip,bhjp->bhij", phi_q, phi_k)


@pytest.mark.parametrize("kernel", ["exp", "rbf", "poly2", "linear"])
def test_kernel_attention_matches_its_formula_and_its_maps_are_row_stochastic(kernel: str) -> None:
    torch.manual_seed(0)
    layer = KernelAttention(DIM, kernel=kernel, num_heads=HEADS, qkv_bias=True).eval()
    x = torch.randn(3, TOKENS, DIM)
    q, k, v = _qkv(layer, x)
    kappa = _literal_kernel(kernel, q, k)
    A = kappa / kappa.sum(-1, keepdim=True)
    expected = _combine(layer, torch.einsum("bhij,bhjp->bhip", A, v))
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
        out, trace = layer.forward_trace(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace.attention, A, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace.attention.sum(-1), torch.ones(3, HEADS, TOKENS))
    torch.testing.assert_close(trace.logits.softmax(-1), A, atol=1e-5, rtol=1e-5)
    assert (trace.attention >= 0).all()


def test_kernel_normaliser_is_guarded_where_every_kernel_value_vanishes() -> None:
    # q.k / sqrt(p) = -1 for every key: every poly2 value (1 + q.k / sqrt(p))^2 is zero
    q = torch.full((1, 1, 3, 4), 1.0)
    k = torch.full((1, 1, 5, 4), -0.5)  # q.k = -2 = -sqrt(4)
    v = torch.randn(1, 1, 5, 4)
    out = kernel_attention(q, k, v, "poly2", scale=0.5)
    assert torch.isfinite(out).all() and out.abs().max() == 0


def test_unknown_kernel_and_linear_dropout_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown kernel 'cubic'"):
        KernelAttention(DIM, kernel="cubic")
    with pytest.raises(ValueError, match="no attention map to drop out"):
        KernelAttention(DIM, kernel="linear", attn_drop=0.1)
    with pytest.raises(ValueError, match="takes no attention mask"):
        KernelAttention(DIM, kernel="rbf")(torch.randn(1, 3, DIM), attn_mask=torch.zeros(3, 3))


def _pool_literal(x: torch.Tensor, factor: int, prefix: int = 1) -> torch.Tensor:
    """(N, p) -> the prefix tokens, then the mean of each window of ``factor`` tokens (a shorter last one)."""
    rest = x[prefix:]
    windows = [rest[start : start + factor].mean(0) for start in range(0, len(rest), factor)]
    return torch.cat([x[:prefix], torch.stack(windows)])


def _primal_dual_literal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bn: bool, factors: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Head outputs and the maps over the original keys, one sequence and one head at a time."""
    batch, heads, tokens, _ = q.shape
    outs = torch.zeros_like(q)
    maps = torch.zeros(batch, heads, tokens, tokens)
    for b in range(batch):
        for h in range(heads):
            keys, values = _pool_literal(k[b, h], factors[h]), _pool_literal(v[b, h], factors[h])
            queries = q[b, h]
            if bn:
                mu = keys.mean(0)
                var = ((keys - mu) ** 2).mean(0)
                queries, keys = queries - mu, (keys - mu) / (var + 1e-5)
            A = torch.softmax(torch.einsum("ip,jp->ij", queries, keys) / math.sqrt(P), dim=-1)
            outs[b, h] = A @ values
            for j in range(tokens):  # key j of window m gets a_m / |window m|
                m = 0 if j == 0 else 1 + (j - 1) // factors[h]
                size = 1 if j == 0 else min(factors[h], tokens - 1 - (m - 1) * factors[h])
                maps[b, h, :, j] = A[:, m] / size
    return outs, maps


@pytest.mark.parametrize(
    "bn,factors", [(True, None), (False, (1, 1, 2, 2)), (True, (1, 2, 3, 4)), (False, (3, 3, 1, 5))]
)
def test_primal_dual_attention_matches_its_formula(bn: bool, factors: tuple[int, ...] | None) -> None:
    torch.manual_seed(0)
    layer = PrimalDualAttention(DIM, bn=bn, sh_factors=factors, num_heads=HEADS, qkv_bias=True).eval()
    x = torch.randn(2, TOKENS, DIM)
    q, k, v = _qkv(layer, x)
    heads, maps = _primal_dual_literal(q, k, v, bn, factors or (1,) * HEADS)
    expected = _combine(layer, heads)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
        out, trace = layer.forward_trace(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace.attention, maps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace.attention.sum(-1), torch.ones(2, HEADS, TOKENS))
    torch.testing.assert_close(trace.logits.softmax(-1), maps, atol=1e-5, rtol=1e-5)


def test_bn_statistics_are_those_of_the_sequence_and_head_never_the_batch() -> None:
    torch.manual_seed(0)
    layer = PrimalDualAttention(DIM, bn=True, num_heads=HEADS).eval()
    x = torch.randn(4, TOKENS, DIM)
    with torch.no_grad():
        alone = layer(x[:1])
        changed = x.clone()
        changed[1:] = 10 * torch.randn(3, TOKENS, DIM) + 5  # other sequences of the batch, far off
        torch.testing.assert_close(layer(changed)[:1], alone, atol=1e-6, rtol=1e-6)
        # a key that moves changes the statistics, hence every query's scores in that sequence
        moved = x[:1].clone()
        moved[0, 5] += 3.0
        assert not torch.allclose(layer(moved)[0, 0], alone[0, 0], atol=1e-4)


def test_sh_keeps_the_query_length_and_its_cost_falls_with_the_factors() -> None:
    x = torch.randn(2, 65, DIM)
    costs = []
    for factor in (1, 2, 4, 8):
        torch.manual_seed(0)
        layer = PrimalDualAttention(DIM, sh_factors=(factor,) * HEADS, num_heads=HEADS)
        with flop_counter() as counter:
            out = layer(x)
        assert out.shape == x.shape
        counts = counter.get_flop_counts()["Global"]
        # the scores and the weighted sum: a fused attention kernel, or two batched matmuls where SDPA
        # falls back to its math path (the projections are linear layers: mm / addmm)
        attention = sum(v for op, v in counts.items() if op in FUSED_ATTENTION_OPS or op is torch.ops.aten.bmm)
        keys = 1 + math.ceil(64 / factor)  # class token + pooled windows
        assert attention == 2 * 2 * 2 * HEADS * 65 * keys * P  # QK^T and AV for B = 2
        costs.append(attention)
    assert costs == sorted(costs, reverse=True) and costs[-1] < costs[0] / 4


def test_sh_factors_must_name_one_factor_per_head() -> None:
    with pytest.raises(ValueError, match="one pooling factor >= 1 per head"):
        PrimalDualAttention(DIM, sh_factors=(1, 2), num_heads=HEADS)
    with pytest.raises(ValueError, match="one pooling factor >= 1 per head"):
        PrimalDualMSSA(DIM, HEADS, sh_factors=(0, 1, 1, 1))


@pytest.mark.parametrize("bn,factors", [(True, None), (False, (1, 1, 2, 2))])
def test_crate_variant_uses_the_shared_projection_as_query_key_and_value(bn: bool, factors) -> None:
    torch.manual_seed(0)
    layer = PrimalDualMSSA(DIM, HEADS, bn=bn, sh_factors=factors).eval()
    x = torch.randn(2, TOKENS, DIM)
    w = torch.einsum("bnd,hpd->bhnp", x, layer.qkv.weight.reshape(HEADS, P, DIM))
    heads, maps = _primal_dual_literal(w, w, w, bn, factors or (1,) * HEADS)
    expected = _combine(layer, heads)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
        _, trace = layer.forward_trace(x)
    torch.testing.assert_close(trace.attention, maps, atol=1e-5, rtol=1e-5)
    if bn:  # centred Gram matrix with a positive diagonal scaling: symmetric scores
        torch.testing.assert_close(trace.logits, trace.logits.transpose(-2, -1), atol=1e-5, rtol=1e-5)
    assert layer.shared_query_key == (factors is None)


def test_tssa_matches_its_formula() -> None:
    torch.manual_seed(0)
    layer = TSSA(DIM, HEADS, qkv_bias=True).eval()
    with torch.no_grad():
        layer.temp.copy_(torch.rand(HEADS, 1) + 0.5)
    x = torch.randn(2, TOKENS, DIM)
    w = torch.einsum("bnd,hpd->bnhp", x, layer.qkv.weight.reshape(HEADS, P, DIM)) + layer.qkv.bias.reshape(HEADS, P)
    w_bar = w / torch.sqrt((w**2).sum(dim=1, keepdim=True))  # each coordinate over the tokens
    Pi = torch.softmax(layer.temp[:, 0] * (w_bar**2).sum(-1), dim=2)  # (B, N, K), over the heads
    m = torch.einsum("bnk,bnkp->bkp", Pi, w**2) / (Pi.sum(1)[..., None] + 1e-8)
    out = -Pi[..., None] * w / (1 + m[:, None])
    W_o, b_o = layer.to_out[0].weight, layer.to_out[0].bias
    expected = torch.einsum("bnkp,ekp->bne", out, W_o.reshape(DIM, HEADS, P)) + b_o
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer.memberships(layer.project(x)), Pi.transpose(1, 2), atol=1e-6, rtol=1e-6)


NEW_MODELS = [
    "vit_nano_patch4_32_rbf",
    "vit_nano_patch4_32_poly2",
    "vit_nano_patch4_32_linear",
    "vit_nano_patch4_32_bn",
    "vit_nano_patch4_32_sh",
    "vit_nano_patch4_32_bnsh",
    "vit_nano_patch4_32_cbsa",
    "crate_nano_patch4_32_bn",
    "crate_nano_patch4_32_sh",
    "tost_nano_patch4_32",
]


@pytest.mark.parametrize("name", NEW_MODELS)
def test_every_new_family_traces_what_it_computes_and_the_monitor_reads_it(name: str) -> None:
    import timm

    from crate.lit.rate_monitor import layer_rate_values
    from crate.metrics import trace_model

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10, in_chans=1).eval()
    x = torch.randn(6, 1, 32, 32)
    outputs = model.blocks[0].attn.to_out if name.startswith("tost") else model.blocks[0].attn.proj
    seen: list[torch.Tensor] = []
    hook = outputs.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    with torch.no_grad():
        model.forward_features(x)
    hook.remove()
    traces = trace_model(model, x)
    with torch.no_grad():
        tokens = model._pos_embed(model.patch_embed(x)) if name.startswith("vit") else model._embed(x)
        blocks_out = model.blocks(tokens)
    torch.testing.assert_close(traces[-1].z_out, blocks_out, atol=1e-5, rtol=1e-5)
    first = traces[0]
    if name.startswith("tost") or name.endswith("cbsa"):  # TSSA and CBSA form no token-by-token map
        assert first.attention is None and first.logits is None
    else:
        batch, heads, tokens, width = first.values.shape
        torch.testing.assert_close(first.attention.sum(-1), torch.ones(batch, heads, tokens))
        recombined = (first.attention @ first.values).transpose(1, 2).reshape(batch, tokens, heads * width)
        torch.testing.assert_close(recombined, seen[0], atol=1e-5, rtol=1e-5)
    values = layer_rate_values(model, x)
    assert all(math.isfinite(values[f"rate/Rc_before_attention/layer_{layer}"]) for layer in range(len(traces)))
    has_code = name.startswith("crate")
    assert ("rate/sparsity_of_code/layer_0" in values) == has_code


def test_the_vit_twin_s_cbsa_is_cbsa_on_the_patch_tokens_and_refuses_what_it_cannot_do() -> None:
    """ViTCBSA (the attention of vit_nano_patch4_32_cbsa) computes CBSA's step with the same weights, pooling
    the 64 patch tokens (not the class token) onto 4 x 4 representatives; a bias, norms or a mask are refused."""
    from crate.layers import CBSA, ViTCBSA

    torch.manual_seed(0)
    twin = ViTCBSA(96, num_heads=4).eval()
    reference = CBSA(96, num_heads=4, rep_grid=4, rep_pool="patches").eval()
    reference.load_state_dict(twin.state_dict())
    x = torch.randn(2, 65, 96)
    torch.testing.assert_close(twin(x), reference(x), atol=0, rtol=0)
    x_moved = x.clone()
    x_moved[:, 0] += 5.0  # the class token is no representative's source, so a shift of it reaches...
    reps = twin.representatives(twin.qkv(x_moved))
    torch.testing.assert_close(reps, twin.representatives(twin.qkv(x)))  # ...no representative
    for bad in ("qkv_bias", "qk_norm", "scale_norm"):
        with pytest.raises(ValueError, match=bad):
            ViTCBSA(96, num_heads=4, **{bad: True})
    with pytest.raises(ValueError, match="mask"):
        twin(x, attn_mask=torch.ones(65, 65, dtype=torch.bool))
