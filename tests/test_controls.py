"""Controls of the white-box figures on models whose answer is known before measuring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import REPO, write_cifar10_like_folder

import crate  # noqa: F401
from crate.metrics import compression_responses, layerwise_values, summarise_responses, trace_model
from crate.metrics.controls import NULL_DRAWS, theory_step, update_directions
from crate.metrics.functional import compression_rate


def _model(projection: str) -> torch.nn.Module:
    """crate_nano whose attention output projection is zero, U_[K] (the heads' outputs through U) or -U_[K]."""
    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10).eval()
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            subspaces = attn.qkv.weight.T  # (d, K p): [U_1 ... U_K]
            scale = {"zero": 0.0, "through_u": 0.7, "against": -0.7}[projection]
            attn.proj.weight.copy_(scale * subspaces)
            attn.proj.bias.zero_()
    return model


def _images(count: int = 6) -> torch.Tensor:
    return torch.randn(count, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _figures(model: torch.nn.Module) -> tuple[dict, dict]:
    """The figure's values, and per direction per layer the full-step R^c (before + change, mean over draws)."""
    traces = trace_model(model, _images())
    values = layerwise_values(traces, quantities=("Rc_before_attention", "Rc_after_attention"))
    layers = compression_responses(model.blocks, traces)
    after = {
        name: [None if r.change[name] is None else r.before + r.change[name][-1].mean(0) for r in layers]
        for name in layers[0].change
    }
    return values, after


def test_without_an_update_every_direction_but_the_theory_s_is_no_change() -> None:
    values, after = _figures(_model("zero"))
    for layer in range(4):
        before, trained = values["Rc_before_attention"][layer], values["Rc_after_attention"][layer]
        torch.testing.assert_close(trained, before, rtol=0, atol=0)
        for name in ("trained", "negated", "mean_removed", "shared_null", "iid_null", "subspace_output"):
            torch.testing.assert_close(after[name][layer], before, rtol=1e-9, atol=1e-6)  # size 0: no change
        assert not torch.allclose(after["theory_step"][layer], before)  # its own size, not the update's


def test_the_trained_direction_at_full_step_is_the_figure_itself() -> None:
    values, after = _figures(_model("through_u"))
    for layer in range(4):
        torch.testing.assert_close(after["trained"][layer], values["Rc_after_attention"][layer], rtol=1e-6, atol=1e-4)


def test_a_model_whose_projection_is_u_steps_along_the_heads_outputs_through_u() -> None:
    values, after = _figures(_model("through_u"))
    for layer in range(4):
        through_u = after["subspace_output"][layer]
        torch.testing.assert_close(through_u, values["Rc_after_attention"][layer], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(after["negated"][layer], through_u, rtol=1e-3)


def test_a_model_whose_projection_is_minus_u_is_the_heads_outputs_negated() -> None:
    values, after = _figures(_model("against"))
    for layer in range(4):
        torch.testing.assert_close(after["negated"][layer], after["subspace_output"][layer], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(values["Rc_after_attention"][layer], after["subspace_output"][layer])


def test_tost_and_a_vit_have_no_subspace_steps_but_every_other_direction() -> None:
    for name in ("tost_nano_patch4_32", "vit_nano_patch4_32"):
        model = timm.create_model(name, num_classes=10).eval()
        layers = compression_responses(model.blocks, trace_model(model, torch.randn(2, 3, 32, 32)))
        for layer in layers:
            assert layer.change["theory_step"] is None and layer.change["subspace_output"] is None, name
            assert all(layer.change[d] is not None for d in ("trained", "negated", "shared_null", "iid_null"))


def test_the_nulls_match_the_update_s_norm_and_the_shared_one_is_the_same_for_every_token() -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=10).eval()
    trace = trace_model(model, _images(3))[1]
    directions = update_directions(trace, True, draws=5, generator=torch.Generator().manual_seed(0))
    delta = (trace.z_half - trace.z_in).to(torch.float64)
    norms = delta.flatten(1).norm(dim=1)
    for name in ("shared_null", "iid_null", "subspace_output"):
        torch.testing.assert_close(directions[name].flatten(2).norm(dim=-1), norms.expand(len(directions[name]), -1))
    shared = directions["shared_null"]
    assert shared.shape == (5, *delta.shape)
    torch.testing.assert_close(shared, shared[:, :, :1].expand_as(shared), rtol=0, atol=0)
    removed = directions["mean_removed"][0]
    torch.testing.assert_close(removed, delta - delta.mean(dim=1, keepdim=True))
    assert removed.mean(dim=1).abs().max() < 1e-12
    assert directions["iid_null"].std(dim=(0, 2)).min() > 0  # the noise differs between tokens


def _numpy_rate(tokens: np.ndarray, subspaces: np.ndarray, eps: float) -> np.ndarray:
    """R^c, official convention, written out: per head, unit-norm projected tokens, 1/2 logdet(I + p/(N eps) W W^T)."""
    result = np.zeros(tokens.shape[0])
    for b, Z in enumerate(tokens):
        for U in subspaces:
            W = Z @ U
            W = W / np.linalg.norm(W, axis=1, keepdims=True)
            alpha = U.shape[1] / (Z.shape[0] * eps)
            result[b] += 0.5 * np.linalg.slogdet(np.eye(Z.shape[0]) + alpha * W @ W.T)[1]
    return result


def _numpy_norm(z: np.ndarray, norm: torch.nn.LayerNorm) -> np.ndarray:
    mean, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
    weight, bias = (norm.weight.detach().double().numpy(), norm.bias.detach().double().numpy())
    return (z - mean) / np.sqrt(var + norm.eps) * weight + bias


def test_every_change_and_slope_equals_a_float64_numpy_computation() -> None:
    """Changes at each fraction, and the autograd slope against a central difference, of every direction, on
    a tiny model with the draws the function makes (one generator of the seed, layer after layer)."""
    torch.manual_seed(3)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, depth=2).eval()
    traces = trace_model(model, _images(2))
    fractions = (0.05, 1.0)
    layers = compression_responses(model.blocks, traces, fractions=fractions, draws=3, seed=7)
    generator = torch.Generator().manual_seed(7)
    for block, trace, response in zip(model.blocks, traces, layers, strict=True):
        directions = update_directions(trace, True, draws=3, generator=generator)
        z = trace.z_in.double().numpy()
        U = trace.subspaces.double().numpy()
        before = _numpy_rate(_numpy_norm(z, block.norm1), U, 0.01)
        np.testing.assert_allclose(response.before.numpy(), before, rtol=1e-10)
        for name, delta in directions.items():
            for draw, step in enumerate(delta.numpy()):

                def change(t: float, step=step, z=z, norm=block.norm1, U=U, before=before) -> np.ndarray:
                    return _numpy_rate(_numpy_norm(z + t * step, norm), U, 0.01) - before

                for index, fraction in enumerate(fractions):
                    np.testing.assert_allclose(
                        response.change[name][index, draw].numpy(), change(fraction), rtol=1e-7, atol=1e-9
                    )
                h = 1e-5
                central = (change(h) - change(-h)) / (2 * h)
                np.testing.assert_allclose(response.slope[name][draw].numpy(), central, rtol=1e-4, atol=1e-6)


def test_the_negated_slope_is_minus_the_trained_one_and_summaries_keep_the_draws_spread() -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=10).eval()
    layers = compression_responses(model.blocks, trace_model(model, _images(4)))
    summary = summarise_responses(layers)
    for layer in range(4):
        assert summary["negated"]["slope"][layer] == pytest.approx(-summary["trained"]["slope"][layer], rel=1e-9)
        assert summary["trained"]["change_spread"][layer] == [None] * 4  # one direction, no draws
        spread = summary["shared_null"]["change_spread"][layer]
        per_draw = layers[layer].change["shared_null"][-1].mean(-1)
        assert per_draw.numel() == NULL_DRAWS
        assert spread[-1] == pytest.approx(float(per_draw.std()))


def test_the_theory_step_is_the_paper_s_formula_and_lowers_rc_at_small_steps() -> None:
    """Tokens near two orthogonal subspaces; the step against the paper's formula written with tokens as columns,
    Z - kappa gamma sum_k U_k U_k^T Z + kappa gamma^2 sum_k U_k (U_k^T Z) softmax((U_k^T Z)^T (U_k^T Z) / sqrt(p)),
    which lowers R^c at 1% and 5% of the step and raises it when flipped."""
    rng = np.random.default_rng(0)
    d, p, K, N, kappa_gamma, eps = 8, 4, 2, 16, 0.1, 0.5
    U = np.linalg.qr(rng.standard_normal((d, d)))[0].reshape(d, K, p).transpose(1, 0, 2)
    Z = np.stack([U[n % K] @ rng.standard_normal(p) for n in range(N)], axis=1) + 0.3 * rng.standard_normal((d, N))
    gamma = p / (N * eps**2)
    columns = Z.copy()
    maps = []
    for k in range(K):
        W = U[k].T @ Z  # (p, N)
        scores = W.T @ W / np.sqrt(p)
        softmax = np.exp(scores - scores.max(0)) / np.exp(scores - scores.max(0)).sum(0)  # over each column
        maps.append(softmax.T)  # rows sum to 1: the model's layout
        columns += -kappa_gamma * U[k] @ U[k].T @ Z + kappa_gamma * gamma * U[k] @ W @ softmax
    step = theory_step(torch.tensor(Z.T)[None], torch.tensor(U), torch.tensor(np.stack(maps))[None], kappa_gamma, eps)
    np.testing.assert_allclose(step[0].numpy(), (columns - Z).T, rtol=1e-12, atol=1e-12)
    rows = torch.tensor(Z.T)[None]
    for convention, rate_eps in (("paper", 0.5), ("official", 0.01)):

        def rate(t: float, rate_eps: float = rate_eps, convention: str = convention) -> float:
            return float(compression_rate(rows + t * step, torch.tensor(U), rate_eps, convention)[0])

        assert rate(0.01) < rate(0.0) and rate(0.05) < rate(0.0), convention
        assert rate(-0.01) > rate(0.0), convention


def test_the_random_init_control_of_a_model_at_its_seed_0_initialisation_is_the_model_itself() -> None:
    from crate.interpret.controls import initialised, remember_build
    from crate.interpret.evaluate import figure_controls, probe_accuracies, trace_figures, verdict_null_counts
    from crate.interpret.loading import EvalData
    from crate.interpret.verdicts import null_counts

    kwargs = dict(num_classes=3, in_chans=1, img_size=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = timm.create_model("crate_nano_patch4_32", **kwargs).eval()
    remember_build(model, "crate_nano_patch4_32", kwargs)
    fresh = initialised(model, 0)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert not torch.equal(initialised(model, 1).head.weight, model.head.weight)

    images = torch.randn(12, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    labels = torch.arange(12) % 3
    data = EvalData("noise", (images, labels), (images, labels), val_masks=(images[:, 0] > 0))
    eps, settings = {"official": 0.01, "paper": 0.5}, dict(lam=0.1, probe_images=8, top_k=3, mass=0.6)
    own = trace_figures(model, data, eps, **settings)
    controls = figure_controls(model, data, eps, **settings, init_seeds=(0,), count_seeds=2)
    skip = ("init_seeds", "per_seed", "null_counts_per_seed", "linear_probe_accuracy")
    random_init = {key: value for key, value in controls["random_init"].items() if key not in skip}
    assert random_init == own  # the same figures, segmentation included
    assert controls["random_init"]["linear_probe_accuracy"] == probe_accuracies(model, data)  # and its probes
    # and the counts of layers beating their nulls, which the verdicts read against the trained model's own
    assert controls["random_init"]["per_seed"][0]["null_counts"] == null_counts(controls)
    # and under each count seed: seed 0's from its full figures, seed 1's measured from its own traces alone
    fresh = initialised(model, 1)
    assert controls["random_init"]["null_counts_per_seed"] == {
        "0": null_counts(controls),
        "1": verdict_null_counts(fresh, trace_model(fresh, images[:8]), eps),
    }
    averaged = figure_controls(model, data, eps, **settings, init_seeds=(0, 1), count_seeds=2)["random_init"]
    assert averaged["layerwise"] != own["layerwise"] and averaged["init_seeds"] == [0, 1]


def test_the_random_init_control_of_a_tag_is_built_with_the_settings_its_file_records() -> None:
    """crate_alpha_cct4_3x2_32.cifar10_lambd1 records lambd=1.0, which its load call does not give: a control
    built from the call alone (lambd 0.1) has the same shapes and another ISTA step."""
    from crate.interpret.controls import initialised
    from crate.interpret.loading import load_run

    def lambds(model: torch.nn.Module) -> set[float]:
        return {module.lambd for module in model.modules() if hasattr(module, "lambd")}

    shipped, _ = load_run("crate_alpha_cct4_3x2_32.cifar10_lambd1", None)
    assert lambds(shipped) == {1.0} and lambds(initialised(shipped, 0)) == {1.0}
    default, _ = load_run("crate_alpha_cct4_3x2_32.cifar10", None)  # a file that records none keeps the name's own
    assert lambds(initialised(default, 0)) == lambds(timm.create_model("crate_alpha_cct4_3x2_32")) == {0.1}


def test_the_random_init_control_reads_images_as_the_file_it_controls(tmp_path: Path) -> None:
    """A file of a gray 20-pixel run records its images' size, mean and std; its random init is scored on the same
    tensors, so it carries the same settings (an encoder's frozen-feature table refused it as 'other inputs')."""
    import safetensors.torch

    from crate.interpret.controls import initialised
    from crate.interpret.frozen_features import same_inputs
    from crate.interpret.loading import load_run

    trained = timm.create_model("crate_nano_patch4_32", num_classes=0, in_chans=1, img_size=20)
    path = tmp_path / "gray.safetensors"
    read = {
        "model_name": "crate_nano_patch4_32",
        "model_config": json.dumps({"num_classes": 0, "in_chans": 1, "img_size": 20, "model_kwargs": {}}),
        "eval_transform": json.dumps({"mean": [0.25], "std": [0.4], "interpolation": "bicubic", "crop_pct": 1.0}),
    }
    safetensors.torch.save_file(trained.state_dict(), str(path), metadata=read)
    model, _ = load_run("crate_nano_patch4_32", str(path))
    assert model.pretrained_cfg["input_size"] == (1, 20, 20) and tuple(model.pretrained_cfg["mean"]) == (0.25,)
    fresh = initialised(model, 0)
    assert same_inputs(model, fresh) and tuple(fresh.pretrained_cfg["std"]) == (0.4,)
    assert timm.data.resolve_data_config({}, model=fresh)["input_size"] == (1, 20, 20)


def test_a_rebuild_that_is_not_the_measured_architecture_is_refused() -> None:
    from crate.interpret.controls import initialised, remember_build

    model = timm.create_model("crate_nano_patch4_32", num_classes=3)
    remember_build(model, "crate_nano_patch4_32", dict(num_classes=4))
    with pytest.raises(ValueError, match="differs from the model measured"):
        initialised(model, 0)


@pytest.mark.parametrize("heads, tokens, k", [(4, 17, 5), (6, 65, 1)])
def test_uniform_map_values_are_one_redundancy_and_k_over_n_mass(heads: int, tokens: int, k: int) -> None:
    from crate.interpret.controls import uniform_map

    values = uniform_map(heads, tokens, k)
    assert values["redundancy"] == pytest.approx(1.0, abs=1e-12)
    assert values["top_k_mass"] == pytest.approx(k / tokens, abs=1e-12)


def test_mean_of_averages_numbers_and_keeps_indices_only_where_they_agree() -> None:
    from crate.interpret.controls import mean_of

    runs = [{"a": [1.0, 3.0], "best": 2, "size": 5, "name": "x"}, {"a": [3.0, 5.0], "best": 1, "size": 5, "name": "x"}]
    assert mean_of(runs) == {"a": [2.0, 4.0], "best": None, "size": 5, "name": "x"}


def test_the_random_init_control_is_the_shipped_run_s_own_starting_weights(tmp_path: Path) -> None:
    """The report's random-init control at its first seed is, bit for bit, the weights the shipped
    crate_nano_patch4_32.cifar10 run started from: its recipe built through train.py's CLI (seed 0) on a
    stand-in folder, against the control rebuilt from the shipped file."""

    from crate.interpret.controls import INIT_SEEDS, initialised
    from crate.interpret.loading import load_run
    from crate.lit import cli_main

    write_cifar10_like_folder(tmp_path / "images")
    recipe = ["--config", str(REPO / "configs" / "cifar10.yaml")]
    recipe += ["--config", str(REPO / "configs" / "cifar10" / "crate_nano_patch4_32.yaml")]
    cli = cli_main([*recipe, "--data.root", str(tmp_path / "images"), "--log_root", str(tmp_path / "logs")], run=False)
    start = cli.model.model.state_dict()
    shipped, _ = load_run("crate_nano_patch4_32.cifar10", None)
    control = initialised(shipped, INIT_SEEDS[0]).state_dict()
    assert control.keys() == start.keys()
    for key, value in control.items():
        assert torch.equal(value, start[key]), key
    trained = shipped.state_dict()
    assert not torch.equal(trained["head.weight"].float(), start["head.weight"])  # the file is not the start


def test_layer_verdicts_count_what_a_hand_made_summary_says() -> None:
    """Two layers written out by hand: layer 0 falls (-5) beyond the shared null (-2 ± 1: -5 < -2 - 2 x 1) with a
    negative slope; layer 1 falls (-3) but not beyond its null (-2 ± 1), its slope and the theory's positive."""
    from crate.interpret.compression_table import compression_verdict, layer_verdicts

    def entry(full: list[float], spread: list[float | None] | None = None, slope: list[float] | None = None) -> dict:
        return {
            "change": [[0.0, value] for value in full],
            "change_spread": [[None, s] for s in (spread or [None, None])],
            "slope": slope or [0.0, 0.0],
        }

    summary = {
        "fractions": [0.5, 1.0],
        "before": [10.0, 10.0],
        "trained": entry([-5.0, -3.0], slope=[-1.0, 2.0]),
        "shared_null": entry([-2.0, -2.0], spread=[1.0, 1.0]),
        "mean_removed": entry([1.0, -1.0]),
        "theory_step": entry([-1.0, -1.0], slope=[-0.5, 0.5]),
    }
    keys = ("falls", "beyond_shared_null", "first_order", "without_token_mean", "theory_first_order")
    assert layer_verdicts(summary) == [
        dict(zip(keys, (True, True, True, False, True), strict=True)),
        dict(zip(keys, (True, False, False, True, False), strict=True)),
    ]
    sentence = compression_verdict(summary)
    assert "lowers R^c in 2/2 layers" in sentence and "null (its mean - 2 sd) in 1/2" in sentence
    assert "first order (slope < 0) in 1/2" in sentence and "MSSA step lowers it at first order in 1/2" in sentence
