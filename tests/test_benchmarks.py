"""The benchmarks' own checks: the throughput benchmark refuses to time a zoo model whose logits differ
from its reference, and writes its figures; the zoo and controls tables train, measure and render."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import write_cifar10_like_folder, write_image_folder

from benchmarks import throughput
from benchmarks.flops import flop_counter

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("keys,value_dim", [(65, 24), (17, 8)])
def test_flop_counter_counts_attention_as_its_two_matmuls(grad: bool, keys: int, value_dim: int) -> None:
    # whichever kernel SDPA picks (a fused CPU kernel without gradients, the math path's bmm with them and
    # unequal shapes), the count is Q K^T plus the weighted sum: 2 B H L S E + 2 B H L S Ev
    q = torch.randn(2, 4, 65, 24, requires_grad=grad)
    k, v = torch.randn(2, 4, keys, 24), torch.randn(2, 4, keys, value_dim)
    with torch.set_grad_enabled(grad), flop_counter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 2 * 2 * 4 * 65 * keys * 24 + 2 * 2 * 4 * 65 * keys * value_dim


def test_throughput_refuses_a_reference_that_computes_something_else() -> None:
    case = throughput.CASES["crate_nano_patch4_32"]
    other = replace(case, heads=2)  # the official layout with 2 heads, not the zoo model's 4
    with pytest.raises(RuntimeError, match="logits differ"):
        throughput._build(other, torch.device("cpu"))
    model, reference = throughput._build(case, torch.device("cpu"))  # the real pair passes the check
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


@pytest.mark.slow
def test_throughput_benchmark_writes_ratios_and_utilisation(tmp_path: Path) -> None:
    from crate.lit.cpu_precision import cpu_has_native_bf16

    out = tmp_path / "latest.json"
    args = ["--models", "crate_nano_patch4_32", "--dtypes", "fp32,bf16", "--modes", "eager", "--steps", "1"]
    args += ["--repeats", "1", "--batch", "8", "--vit", "--out", str(out), "--timm-csv", str(tmp_path / "timm.csv")]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.throughput", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [row["dtype"] for row in result["rows"]] == ["fp32", "bf16"]
    # FLOPs of one training step, written out from crate_nano's sizes (batch 8, 64 patches of 4x4x3 and a
    # class token, width 96, 4 layers, 10 classes). Forward: patch embedding, then per layer the shared
    # projection, scores, attention-weighted sum, output projection and ISTA's two matmuls, then the
    # head. A training step counts three times the forward (the backward of a matmul is two of its size).
    tokens, width, layers = 65, 96, 4
    embed_and_head = 2 * 64 * 48 * width + 2 * width * 10
    attention = layers * 2 * (2 * tokens * tokens * width)
    linear = embed_and_head + layers * 2 * (2 * tokens * width * width + 2 * tokens * width * width)
    expected_gflop = 8 * 3 * (linear + attention) / 1e9
    # timm's ViT of the same sizes: q, k, v and output projections (4 d^2) and a 4x MLP (8 d^2) per token
    vit_linear = embed_and_head + layers * 2 * tokens * 12 * width * width
    expected_vit_gflop = 8 * 3 * (vit_linear + attention) / 1e9
    for row in result["rows"]:
        assert row["batch"] == 8
        assert row["train_gflop_per_step"] == pytest.approx(expected_gflop, rel=1e-9)
        assert row["vit_train_gflop_per_step"] == pytest.approx(expected_vit_gflop, rel=1e-9)
        assert row["train_mfu"] > 0
        if row["dtype"] == "fp32" or cpu_has_native_bf16():  # an emulated bf16 matmul is no peak to bound by
            assert row["train_mfu"] < 1.5  # a share of the matmul peak measured in the same run
        assert row["train_ratio_vs_vit"] == pytest.approx(row["train_img_s"] / row["train_vit_img_s"])
    fp32 = result["rows"][0]
    assert fp32["reference_memory_mib"] > fp32["memory_mib"] > 0  # the reference keeps its N x N maps
    with (tmp_path / "timm.csv").open() as handle:  # timm's benchmark columns, from the same rows
        timm_rows = list(csv.DictReader(handle))
    assert [r["dtype"] for r in timm_rows] == ["fp32", "bf16"]
    for timm_row, row in zip(timm_rows, result["rows"], strict=True):
        assert float(timm_row["infer_samples_per_sec"]) == pytest.approx(row["infer_img_s"], abs=0.01)
        assert float(timm_row["train_step_time"]) == pytest.approx(1000 * 8 / row["train_img_s"], abs=1e-3)
        assert float(timm_row["infer_gmacs"]) == pytest.approx(expected_gflop / 3 / 2 / 8, abs=1e-4)
        # crate_nano, 3 channels, 10 classes: patch LN + linear + LN, class token, positions, per layer two
        # LNs, U (no bias), output projection, dictionary; final LN and head
        embed = 2 * 48 + 48 * 96 + 96 + 2 * 96 + 96 + 65 * 96
        layer = 2 * 2 * 96 + 96 * 96 + (96 * 96 + 96) + 96 * 96
        params = embed + 4 * layer + 2 * 96 + 96 * 10 + 10
        assert float(timm_row["param_count"]) == round(params / 1e6, 2)
        assert timm_row["infer_img_size"] == timm_row["train_img_size"] == "32"
    assert "| crate_nano_patch4_32 | bf16 | eager |" in proc.stdout


def test_scaling_crossover_is_the_first_size_from_which_a_layer_stays_faster() -> None:
    from benchmarks.attention_scaling import REFERENCE, crossover, markdown

    seconds = {
        REFERENCE: {64: 1.0, 128: 2.0, 256: 4.0, 512: 8.0},
        "late": {64: 2.0, 128: 1.0, 256: 5.0, 512: 7.0},  # faster at 128, slower at 256, faster from 512
        "never": {64: 2.0, 128: 3.0, 256: 5.0, 512: 9.0},
    }
    assert crossover(seconds, "late") == 512
    assert crossover(seconds, "never") is None
    text = markdown(seconds, "cmd")
    assert "| late | 2.00 | 0.50 | 1.25 | 0.88 | 512 |" in text and "| never |" in text and "never (measured)" in text


@pytest.mark.slow
def test_zoo_table_trains_measures_and_writes_every_column(tmp_path: Path, monkeypatch, capsys) -> None:
    from benchmarks import zoo_table

    out = tmp_path / "zoo.md"
    members = ["vit_nano_patch4_32", "crate_nano_patch4_32", "tost_nano_patch4_32"]
    args = ["--epochs", "1", "--seeds", "0", "1", "--members", *members, "--repeats", "1", "--out", str(out)]
    args += ["--probe-images", "32"]  # the trace measurements on 32 validation images, not 256
    monkeypatch.setattr(sys, "argv", ["zoo_table.py", *args])
    zoo_table.main()
    rows = {line.split("|")[1].strip(" `"): line for line in out.read_text().splitlines() if line.startswith("| `")}
    assert set(rows) == set(members)
    cells = {name: [c.strip() for c in line.split("|")[2:-1]] for name, line in rows.items()}
    assert cells["vit_nano_patch4_32"][4] == "1.00x"  # the twin against itself
    assert cells["tost_nano_patch4_32"][5:7] == ["n/a (n/a)", "n/a (n/a)"]  # TSSA: no attention maps
    assert not cells["crate_nano_patch4_32"][10].startswith("n/a") and cells["vit_nano_patch4_32"][10] == "n/a (n/a)"
    # trained (init; negated; shared null; heads through U_[K]): every one for CRATE, no subspace step for the ViT
    controls = cells["crate_nano_patch4_32"][7].split("(")[1].rstrip(")").split(";")
    assert "n/a" not in cells["crate_nano_patch4_32"][7] and len(controls) == 4
    assert all(float(value) for value in controls)  # every control measured (a "-" would not parse)
    assert cells["vit_nano_patch4_32"][7].endswith("; -)") and cells["vit_nano_patch4_32"][8].endswith("(n/a)")
    trained_slope, theory_slope = cells["crate_nano_patch4_32"][8].rstrip(")").split(" (")
    assert float(trained_slope) and float(theory_slope)
    beyond, first_order = (float(v) for v in cells["crate_nano_patch4_32"][9].split(","))
    assert 0 <= beyond <= 4 and 0 <= first_order <= 4
    summary = json.loads(out.with_suffix(".json").read_text())
    runs = summary["results"]["crate_nano_patch4_32"]["runs"]
    assert [run["seed"] for run in runs] == [0, 1] and all(0 <= run["accuracy"] <= 1 for run in runs)
    assert runs[0]["rc_change_init"] != runs[0]["rc_change"] and runs[0]["epoch_seconds"] > 0
    for key in ("rc_change_shared_null", "rc_change_mean_removed", "rc_slope", "rc_slope_theory_step"):
        assert isinstance(runs[0][key], float), key
    assert "Spread: mean seed std" in out.read_text()

    # a second call reads the finished runs back instead of training them again
    assert "val/acc" in capsys.readouterr().out  # what a training run prints, and the second call must not
    zoo_table.main()
    assert "val/acc" not in capsys.readouterr().out
    assert json.loads(out.with_suffix(".json").read_text())["results"]["crate_nano_patch4_32"]["runs"] == runs
    # and the table re-renders from its JSON alone, to the same rows (those of the second call: it timed the
    # throughput again)
    written = [line for line in out.read_text().splitlines() if line.startswith("| `")]
    assert len(written) == 3 and all(row in zoo_table.rendered_from_json(out) for row in written)


def test_zoo_table_trains_every_cifar10_member_under_one_protocol(tmp_path: Path) -> None:
    """The members' recipe files differ (each sets what its shipped weights were trained with: CRATE's a
    learning rate of 2.5e-3, 400 epochs, the policy on half of the images and a moving average of the
    weights; the ViT twin's 30 epochs without the policy); the table's runs must differ in the model alone."""
    import yaml

    from benchmarks import zoo_table
    from crate.lit import cli_main

    write_image_folder(tmp_path / "images", 2, per_class=1, size=32, suffix=".png", gray=False, seed=1)
    settings = {}
    for name in zoo_table.MEMBERS:
        args = [*zoo_table._recipe(name, "cifar10", str(tmp_path / "images")), "--trainer.max_epochs", "4"]
        cli = cli_main([*args, "--log_root", str(tmp_path / "logs")], run=False)
        assert cli.model.hparams.model_name == name
        flat = {f"model.{key}": value for key, value in cli.model.hparams.items() if key != "model_name"}
        flat |= {
            f"data.{key}": value for key, value in vars(cli.config.data.init_args.as_flat()).items() if key != "root"
        }
        flat |= {f"trainer.{key}": value for key, value in vars(cli.config.trainer.as_flat()).items()}
        settings[name] = {key: repr(value) for key, value in flat.items()}
        settings[name]["seed"] = repr(cli.config.seed_everything)
    reference = settings["vit_nano_patch4_32"]
    differences = {
        name: sorted(key for key in reference.keys() | these.keys() if these.get(key) != reference.get(key))
        for name, these in settings.items()
    }
    assert differences == {name: [] for name in settings}
    recipe = yaml.safe_load((REPO / "configs" / "cifar10.yaml").read_text())
    hparams, augmentation = cli.model.hparams, cli.datamodule.augmentation
    assert hparams.lr == recipe["model"]["lr"] and hparams.warmup_epochs == 1 and hparams.ema_decay is None
    assert (augmentation.policy, augmentation.padding, augmentation.hflip, augmentation.re_prob) == (None, 4, 0.5, 0.0)
    assert cli.trainer.max_epochs == 4


@pytest.mark.slow
def test_zoo_table_on_cifar10_trains_the_cifar_recipes_on_the_given_folder(tmp_path: Path, monkeypatch) -> None:
    from benchmarks import zoo_table

    write_cifar10_like_folder(tmp_path / "images", per_class=3)
    out = tmp_path / "zoo_cifar.md"
    args = ["--dataset", "cifar10", "--root", str(tmp_path / "images"), "--epochs", "1", "--seeds", "0"]
    args += ["--members", "vit_nano_patch4_32", "crate_nano_patch4_32_mlp", "--repeats", "1", "--out", str(out)]
    args += ["--probe-images", "16"]
    monkeypatch.setattr(sys, "argv", ["zoo_table.py", *args])
    zoo_table.main()
    assert "on cifar10" in out.read_text() and "`crate_nano_patch4_32_mlp` | CRATE-MLP" in out.read_text()


def test_controls_table_measures_shipped_tags_beside_their_init_and_re_renders_from_json(
    tmp_path: Path, monkeypatch
) -> None:
    """Two shipped CIFAR-10 tags on a small stand-in folder: every direction per layer, the subspace steps
    only for CRATE, the random init differs from the trained weights, and the file renders again from its
    JSON to the same text."""
    from benchmarks import controls_table

    write_cifar10_like_folder(tmp_path / "images")
    out = tmp_path / "controls.md"
    argv = ["controls_table.py", "--tags", "crate_nano_patch4_32.cifar10", "vit_nano_patch4_32.cifar10"]
    argv += ["--images", "8", "--count-seeds", "4", "--out", str(out), "--data.root", str(tmp_path / "images")]
    monkeypatch.setattr(sys, "argv", argv)
    controls_table.main()
    saved = json.loads(out.with_suffix(".json").read_text())["results"]
    crate_summary = saved["crate_nano_patch4_32.cifar10"]["trained"]["official"]
    vit_summary = saved["vit_nano_patch4_32.cifar10"]["trained"]["official"]
    assert len(crate_summary["before"]) == 4 and crate_summary["draws"] == 8
    assert all(slope is not None for slope in crate_summary["theory_step"]["slope"])
    assert all(slope is None for slope in vit_summary["theory_step"]["slope"])
    init = saved["crate_nano_patch4_32.cifar10"]["random_init"]["official"]
    assert init["trained"]["slope"] != crate_summary["trained"]["slope"]
    text = out.read_text()
    assert "`crate_nano_patch4_32.cifar10 (random init)`" in text
    # a row per layer and model (trained and random init) in the R^c table and in the whole-objective table
    assert text.count("| `vit_nano") == 16 and "## The whole objective" in text and "Rate reduction R - R^c" in text
    assert controls_table.rendered_from_json(out) == text
    # the untrained architecture's counts under seeds 0-3 (--count-seeds 4), seed 0's those of its full controls,
    # and each trained count in the text read against them
    from crate.interpret.objective_table import count_against_seeds
    from crate.interpret.verdicts import null_counts

    measured = saved["crate_nano_patch4_32.cifar10"]
    seeds = measured["seed_counts"]
    assert list(seeds) == ["0", "1", "2", "3"] and seeds["0"] == null_counts(
        controls_table._as_controls(measured["random_init"])
    )
    count = null_counts(controls_table._as_controls(measured["trained"]))["compression"]
    against = count_against_seeds(count, 4, [c["compression"] for c in seeds.values()])
    assert f"beyond the shared null in {count} of 4{against}." in text


def test_controls_table_defaults_to_every_shipped_cifar10_classifier() -> None:
    """The default tags are the CIFAR-10 weight files in checkpoints/ that carry a classifier: a file shipped later
    joins the table without an edit, and the self-supervised encoder (no classifier, nothing to compare) stays out."""
    import timm

    from benchmarks import controls_table

    files = {p.name.removesuffix(".safetensors") for p in (REPO / "checkpoints").glob("*.cifar10*.safetensors")}
    classifiers = {tag for tag in files if timm.models.get_pretrained_cfg(tag).num_classes != 0}
    assert "vit_cct4_3x2_32.cifar10" in classifiers and "crate_nano_patch4_32.cifar10_simdino" in files - classifiers
    assert set(controls_table.cifar10_tags()) == classifiers


def test_the_objective_trade_off_is_no_finding_where_the_untrained_architecture_beats_the_nulls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two-layer runs whose snapshots carry their per-layer verdicts: weight 0.01 beats both nulls on both in
    every layer at the same accuracy; a finding beside an untrained step 0 that does in no layer, none beside
    one that does in every layer."""
    from benchmarks import objective_tradeoff

    def rows(snapshot: dict) -> list[dict]:
        return [{"rate_reduction_beyond_nulls": b, "alignment_beyond_nulls": b} for b in snapshot["beyond"]]

    monkeypatch.setattr(objective_tradeoff, "layer_rows", rows)

    def records(untrained: list[bool]) -> dict:
        start = {"step": 0, "beyond": untrained, "val_accuracy": 0.1}
        return {
            "0": {"snapshots": [start, {"step": 9, "beyond": [True, False], "val_accuracy": 0.90}]},
            "0.01": {"snapshots": [start, {"step": 9, "beyond": [True, True], "val_accuracy": 0.895}]},
        }

    found = objective_tradeoff.verdict(records([False, False]))
    assert found.startswith("At weight 0.01 every layer's attention step raises R - R^c beyond both nulls")
    assert "the untrained architecture (step 0 of the runs): 0 of 2" in found
    overturned = objective_tradeoff.verdict(records([True, True]))
    assert overturned.startswith("Not a finding: the untrained architecture (step 0 of the runs) already has every")
