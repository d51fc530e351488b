"""Controls of the white-box figures on models whose answer is known before measuring."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from conftest import REPO

import crate  # noqa: F401
from crate.metrics import compression_controls, layerwise_values, trace_model


def _model(projection: str) -> torch.nn.Module:
    """crate_nano whose attention output projection is zero, U_[K] (the theory's step) or -U_[K]."""
    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10).eval()
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            subspaces = attn.qkv.weight.T  # (d, K p): [U_1 ... U_K]
            scale = {"zero": 0.0, "theory": 0.7, "against": -0.7}[projection]
            attn.proj.weight.copy_(scale * subspaces)
            attn.proj.bias.zero_()
    return model


def _figures(model: torch.nn.Module) -> tuple[dict, dict]:
    images = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    traces = trace_model(model, images)
    values = layerwise_values(traces, quantities=("Rc_before_attention", "Rc_after_attention"))
    return values, compression_controls(model.blocks, traces)


def test_without_an_update_the_negated_step_measures_what_no_step_measures() -> None:
    values, controls = _figures(_model("zero"))
    for layer in range(4):
        before, after = values["Rc_before_attention"][layer], values["Rc_after_attention"][layer]
        torch.testing.assert_close(after, before, rtol=0, atol=0)
        torch.testing.assert_close(controls["Rc_after_attention_negated"][layer], before, rtol=1e-12, atol=1e-9)


def test_a_model_whose_projection_is_u_takes_the_theory_step() -> None:
    values, controls = _figures(_model("theory"))
    for layer in range(4):
        theory = controls["Rc_after_attention_theory_step"][layer]
        torch.testing.assert_close(theory, values["Rc_after_attention"][layer], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(controls["Rc_after_attention_negated"][layer], theory, rtol=1e-3)


def test_a_model_whose_projection_is_minus_u_is_the_theory_step_negated() -> None:
    values, controls = _figures(_model("against"))
    for layer in range(4):
        torch.testing.assert_close(
            controls["Rc_after_attention_negated"][layer],
            controls["Rc_after_attention_theory_step"][layer],
            rtol=1e-5,
            atol=1e-4,
        )
        assert not torch.allclose(
            values["Rc_after_attention"][layer], controls["Rc_after_attention_theory_step"][layer]
        )


def test_tost_has_no_maps_and_no_theory_step() -> None:
    model = timm.create_model("tost_nano_patch4_32", num_classes=10).eval()
    traces = trace_model(model, torch.randn(2, 3, 32, 32))
    controls = compression_controls(model.blocks, traces)
    assert all(value is None for value in controls["Rc_after_attention_theory_step"])
    assert all(value is not None for value in controls["Rc_after_attention_negated"])


def test_the_random_init_control_of_a_model_at_its_seed_0_initialisation_is_the_model_itself() -> None:
    from crate.interpret.controls import initialised, remember_build
    from crate.interpret.evaluate import figure_controls, trace_figures
    from crate.interpret.loading import EvalData

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
    controls = figure_controls(model, data, eps, **settings, init_seeds=(0,))
    random_init = {key: value for key, value in controls["random_init"].items() if key != "init_seeds"}
    assert random_init == own  # the same figures, segmentation included
    averaged = figure_controls(model, data, eps, **settings, init_seeds=(0, 1))["random_init"]
    assert averaged["layerwise"] != own["layerwise"] and averaged["init_seeds"] == [0, 1]


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
    from test_tensor_store import write_folder

    from crate.interpret.controls import INIT_SEEDS, initialised
    from crate.interpret.loading import load_run
    from crate.lit import cli_main

    write_folder(tmp_path / "images", size=32, classes=10, per_class=2, suffix=".png")
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
