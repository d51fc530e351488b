"""The attention step judged on CRATE's whole objective: R, R^c and R - R^c along every control direction, and
each direction's alignment with the term's improving direction, against float64 transcriptions and derived
expectations."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

import crate  # noqa: F401
from crate.metrics import compression_responses, trace_model
from crate.metrics.controls import TERMS, alignment, improving_direction, objective_term, update_directions


def _numpy_norm(z: np.ndarray, norm: torch.nn.LayerNorm) -> np.ndarray:
    mean, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
    return (z - mean) / np.sqrt(
        var + norm.eps
    ) * norm.weight.detach().double().numpy() + norm.bias.detach().double().numpy()


def _numpy_R(Z: np.ndarray, eps: float) -> float:
    """R, official convention, written out: unit-norm tokens, 1/2 logdet(I + d/(N eps) Z Z^T)."""
    Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return 0.5 * np.linalg.slogdet(np.eye(Z.shape[0]) + Z.shape[1] / (Z.shape[0] * eps) * Z @ Z.T)[1]


def _numpy_Rc(Z: np.ndarray, subspaces: np.ndarray, eps: float) -> float:
    return sum(_numpy_R(Z @ U, eps) for U in subspaces)


def _numpy_term(term: str, Z: np.ndarray, subspaces: np.ndarray, eps: float) -> float:
    return {
        "compression": lambda: _numpy_Rc(Z, subspaces, eps),
        "expansion": lambda: _numpy_R(Z, eps),
        "rate_reduction": lambda: _numpy_R(Z, eps) - _numpy_Rc(Z, subspaces, eps),
    }[term]()


def _model_and_traces(depth: int = 2, images: int = 2) -> tuple[torch.nn.Module, list]:
    torch.manual_seed(3)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, depth=depth).eval()
    x = torch.randn(images, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    return model, trace_model(model, x)


@pytest.mark.parametrize("term", sorted(TERMS))
def test_every_terms_change_and_the_alignment_equal_a_float64_transcription(term: str) -> None:
    model, traces = _model_and_traces()
    fractions = (0.05, 1.0)
    layers = compression_responses(model.blocks, traces, fractions=fractions, draws=2, seed=7, term=term)
    generator = torch.Generator().manual_seed(7)
    for block, trace, response in zip(model.blocks, traces, layers, strict=True):
        directions = update_directions(trace, True, draws=2, generator=generator)
        z, U = trace.z_in.double().numpy(), trace.subspaces.double().numpy()

        def value(points: np.ndarray, block=block, U=U) -> np.ndarray:
            return np.array([_numpy_term(term, _numpy_norm(p, block.norm1), U, 0.01) for p in points])

        before = value(z)
        np.testing.assert_allclose(response.before.numpy(), before, rtol=1e-10)
        # the improving direction by central differences, entry by entry on one image's first two tokens
        sign = TERMS[term][1]
        h, grad = 1e-6, np.zeros_like(z[:1])
        for n in range(2):
            for c in range(z.shape[-1]):
                step = np.zeros_like(z[:1])
                step[0, n, c] = h
                grad[0, n, c] = (value(z[:1] + step) - value(z[:1] - step))[0] / (2 * h)
        objective = objective_term(term, trace.subspaces.double(), 0.01, "official")
        norm = block.norm1.double()

        def rate(points: torch.Tensor, objective=objective, norm=norm) -> torch.Tensor:
            return objective(norm(points))

        improving = improving_direction(rate, trace.z_in.double(), sign).numpy()
        np.testing.assert_allclose(improving[:1, :2], sign * grad[:, :2], rtol=1e-4, atol=1e-7)
        for name in ("trained", "shared_null", "theory_step"):
            for draw, step in enumerate(directions[name].numpy()):
                for index, fraction in enumerate(fractions):
                    expected = value(z + fraction * step) - before
                    np.testing.assert_allclose(
                        response.change[name][index, draw].numpy(), expected, rtol=1e-7, atol=1e-9
                    )
                cosine = (step * improving).sum((1, 2)) / (
                    np.linalg.norm(step.reshape(len(step), -1), axis=1)
                    * np.linalg.norm(improving.reshape(len(step), -1), axis=1)
                )
                np.testing.assert_allclose(response.alignment[name][draw].numpy(), cosine, rtol=1e-9)


def test_a_shared_vector_lowers_rc_and_r_together() -> None:
    """On unit-norm tokens, a large vector added to every token aligns them: both rates fall, whatever its
    direction, which is why R^c alone cannot tell compression from collapse."""
    generator = torch.Generator().manual_seed(0)
    Z = torch.randn(3, 16, 24, generator=generator, dtype=torch.float64)
    U = torch.randn(4, 24, 6, generator=generator, dtype=torch.float64)
    shared = 5.0 * torch.randn(3, 1, 24, generator=generator, dtype=torch.float64)
    for term in ("compression", "expansion"):
        f = objective_term(term, U, 0.01, "official")
        assert (f(Z + shared) < f(Z)).all(), term


def test_the_gradient_step_has_alignment_one_and_the_theory_step_beats_both_nulls() -> None:
    """The theory's MSSA step is derived as a descent step of the paper's R^c (eps 0.5, tokens as they are):
    measured in that convention it points downhill, far beyond both nulls."""
    model, traces = _model_and_traces(depth=4, images=4)
    layers = compression_responses(
        model.blocks, traces, eps=0.5, convention="paper", fractions=(1.0,), draws=8, term="compression"
    )
    for response in layers:
        torch.testing.assert_close(
            response.alignment["gradient_step"], torch.ones_like(response.alignment["gradient_step"])
        )
        theory = float(response.alignment["theory_step"].mean())
        for null in ("shared_null", "iid_null"):
            assert theory > float(response.alignment[null].abs().max()), (null, theory)


def test_each_nulls_alignment_has_its_derived_spread() -> None:
    """For a fixed direction g in R^{N x d}: an i.i.d. Gaussian update has cosine with g of mean 0 and variance
    1/(N d); a Gaussian vector v shared by the N tokens has cosine <v, sum_n g_n> / (sqrt(N) |v| |g|), of mean
    0 and variance |sum_n g_n|^2 / (N d |g|^2) (the token-mean part of g carries all of it)."""
    generator = torch.Generator().manual_seed(0)
    tokens, dim, draws = 12, 10, 4000
    g = torch.randn(1, tokens, dim, generator=generator, dtype=torch.float64)
    g = g + 0.8 * torch.randn(1, 1, dim, generator=generator, dtype=torch.float64)  # a token-mean part
    iid = torch.randn(draws, 1, tokens, dim, generator=generator, dtype=torch.float64)
    shared = torch.randn(draws, 1, 1, dim, generator=generator, dtype=torch.float64).expand(-1, -1, tokens, -1)
    iid_cos, shared_cos = alignment(iid, g).squeeze(1), alignment(shared, g).squeeze(1)
    iid_sd = 1 / np.sqrt(tokens * dim)
    shared_sd = float(g[0].sum(0).norm() / (np.sqrt(tokens * dim) * g.norm()))
    assert abs(float(iid_cos.mean())) < 4 * iid_sd / np.sqrt(draws)
    assert abs(float(shared_cos.mean())) < 4 * shared_sd / np.sqrt(draws)
    assert float(iid_cos.std()) == pytest.approx(iid_sd, rel=0.06)
    assert float(shared_cos.std()) == pytest.approx(shared_sd, rel=0.06)
    assert shared_sd > iid_sd  # a g with a token-mean part: the shared null can align more than the i.i.d. one


def test_the_ista_step_on_its_own_objective_against_a_float64_transcription() -> None:
    from crate.metrics.sparse_controls import sparse_coding_responses, summarise_sparse

    model, traces = _model_and_traces(depth=2, images=2)
    layers = sparse_coding_responses(model.blocks, traces, draws=3, seed=0)
    for block, trace, response in zip(model.blocks, traces, layers, strict=True):
        y, code = trace.mlp_input.double().numpy(), trace.sparse_code.double().numpy()
        D, lam = block.ista.weight.detach().double().numpy(), block.ista.lambd

        def lasso(x: np.ndarray, y=y, D=D, lam=lam) -> np.ndarray:  # per image, mean over tokens
            per_token = lam * np.abs(x).sum(-1) + 0.5 * ((y - np.einsum("dm,bnm->bnd", D, x)) ** 2).sum(-1)
            return per_token.mean(-1)

        np.testing.assert_allclose(response.before.numpy(), lasso(y), rtol=1e-10)
        np.testing.assert_allclose(response.change["trained"][0].numpy(), lasso(code) - lasso(y), rtol=1e-9)
        torch.testing.assert_close(response.alignment["descent_step"], torch.ones(1, 2, dtype=torch.float64))
        descent = -(lam * np.sign(y) + (y @ D.T - y) @ D)  # minus a subgradient of the LASSO at x_0 = y
        step = code - y
        cosine = (step * descent).sum((1, 2)) / (
            np.linalg.norm(step.reshape(2, -1), axis=1) * np.linalg.norm(descent.reshape(2, -1), axis=1)
        )
        np.testing.assert_allclose(response.alignment["trained"][0].numpy(), cosine, rtol=1e-9)
    summary = summarise_sparse(layers)
    assert summary["trained"]["change"][0] == pytest.approx(float(layers[0].change["trained"].mean()))
    assert summarise_sparse([None, None]) is None
