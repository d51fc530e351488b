"""Masked pretraining with Lightning, and the pretrained encoder probed and loaded for fine-tuning."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import REPO, write_image_folder

import crate  # noqa: F401
from crate.export import main as export_main
from crate.lit import ImageClassifier, MaskedAutoencoder, cli_main
from crate.lit.rate_monitor import layer_rate_values

PRETRAIN = str(REPO / "configs" / "crate_mae_nano_digits.yaml")
PROBE = str(REPO / "configs" / "crate_mae_nano_digits_probe.yaml")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def test_masked_pretraining_refuses_a_model_without_a_decoder() -> None:
    with pytest.raises(ValueError, match="not a masked autoencoder"):
        MaskedAutoencoder("crate_nano_patch4_32")
    with pytest.raises(ValueError, match="not a masked autoencoder"):
        MaskedAutoencoder("crate_mae_nano_patch4_32", model_kwargs={"decoder_depth": 0})


def test_probe_starts_from_the_pretrained_encoder_and_trains_only_the_head(tmp_path: Path) -> None:
    torch.manual_seed(0)
    pretrained = MaskedAutoencoder("crate_mae_nano_patch4_32", in_chans=1, img_size=16)
    state = {f"model.{k}": v for k, v in pretrained.model.state_dict().items()}
    hparams = {"model_name": "crate_mae_nano_patch4_32", "in_chans": 1, "img_size": 16}
    torch.save(
        {"state_dict": state, "hyper_parameters": hparams, "pytorch-lightning_version": "2"}, tmp_path / "p.ckpt"
    )
    probe = ImageClassifier(
        "crate_mae_nano_patch4_32",
        num_classes=10,
        in_chans=1,
        img_size=16,
        model_kwargs={"decoder_depth": 0},
        pretrained_file=str(tmp_path / "p.ckpt"),
        freeze_backbone=True,
    )
    encoder = {k: v for k, v in pretrained.model.state_dict().items() if not k.startswith(("decoder", "mask_token"))}
    loaded = probe.model.state_dict()
    for key, value in encoder.items():
        torch.testing.assert_close(loaded[key], value, rtol=0, atol=0)
    trainable = {n for n, p in probe.model.named_parameters() if p.requires_grad}
    assert trainable == {"head.weight", "head.bias"}


def test_decoder_is_measured_under_its_own_keys_as_the_official_measurement_would() -> None:
    from test_trace import official_coding_rate

    torch.manual_seed(0)
    model = timm.create_model("crate_mae_nano_patch4_32", in_chans=1, img_size=16, num_classes=0, decoder_depth=4)
    model.eval()
    images = torch.randn(8, 1, 16, 16)
    quantities = ("Rc_before_attention", "Rc_after_attention")
    encoder = layer_rate_values(model, images, quantities=quantities)
    decoder = layer_rate_values(model, images, quantities=quantities, decoder=True)
    assert set(encoder) == {f"rate/{q}/layer_{i}" for q in quantities for i in range(4)}
    assert set(decoder) == {k.replace("rate/", "rate_decoder/") for k in encoder}
    # independently: what each decoder MSSA's projection outputs (a hook on `qkv`, as the official
    # measurement code does) on the probe masked with the monitor's seed, through the official formula
    outputs: list[np.ndarray] = []

    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        batch, tokens, _ = output.shape
        outputs.append(output.detach().double().numpy().reshape(batch, tokens, 4, -1).transpose(0, 2, 1, 3))

    handles = [block.attn.qkv.register_forward_hook(hook) for block in model.decoder_blocks]
    noise = torch.rand(8, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.forward_mae(images, noise=noise)
    for handle in handles:
        handle.remove()
    for layer, X in enumerate(outputs):
        expected = official_coding_rate(X)
        assert decoder[f"rate_decoder/Rc_before_attention/layer_{layer}"] == pytest.approx(expected, rel=1e-6)


def _final(path: Path, key: str) -> float:
    with path.open() as handle:
        values = [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]
    return values[-1]


@pytest.mark.slow
def test_pretraining_run_then_probe_beats_the_same_probe_on_a_random_encoder(tmp_path: Path, capsys) -> None:
    # 16 epochs (the recipe's 10 warm-up and 6 more): the probe reads 0.76 against the random encoder's 0.55 here
    cli_main(
        ["fit", "--config", PRETRAIN, "--trainer.max_epochs", "16", "--log_root", str(tmp_path), *QUIET],
        model_class=MaskedAutoencoder,
    )
    run = tmp_path / "crate_mae_nano_digits" / "version_0"
    with (run / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    losses = [float(r["val/loss"]) for r in rows if r.get("val/loss")]
    assert losses[-1] < 0.8 * losses[0]  # the reconstruction improves
    columns = set(rows[0])
    assert "rate/Rc_before_attention/layer_0" in columns and "rate_decoder/Rc_after_attention/layer_3" in columns
    assert any(b"mae/reconstruction" in p.read_bytes() for p in run.glob("events.out.tfevents.*"))
    checkpoint = run / "checkpoints" / "last.ckpt"
    with pytest.raises(SystemExit) as refused:  # no classifier to export: the line names the probe run to make
        export_main([str(checkpoint), "--out", str(tmp_path / "encoder.safetensors")])
    said = capsys.readouterr().err
    assert refused.value.code == 2 and not (tmp_path / "encoder.safetensors").exists()
    assert f"--config configs/crate_mae_nano_digits_probe.yaml --model.pretrained_file {checkpoint})" in said
    accuracies = {}
    for name, extra in (("pretrained", ["--model.pretrained_file", str(checkpoint)]), ("random", [])):
        args = ["fit", "--config", PROBE, "--trainer.max_epochs", "15", "--run_name", name, "--log_root", str(tmp_path)]
        cli_main([*args, *extra, *QUIET])
        accuracies[name] = _final(tmp_path / name / "version_0" / "metrics.csv", "val/acc")
    assert accuracies["pretrained"] > accuracies["random"] + 0.05, accuracies


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "corrupt", "another model"])
def test_a_bad_pretrained_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    from conftest import run_in_process

    if case == "missing":
        path, message = tmp_path / "absent.ckpt", "absent.ckpt"
    elif case == "corrupt":
        path, message = tmp_path / "truncated.ckpt", "corrupt or truncated"
        model = timm.create_model("crate_mae_nano_patch4_32", in_chans=1, img_size=16, num_classes=0, decoder_depth=4)
        torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, path)
        path.write_bytes(path.read_bytes()[:5000])
    else:
        path, message = REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors", "does not fit crate_mae"
    proc = run_in_process(
        "fit", "--config", PROBE, "--model.pretrained_file", str(path), "--log_root", str(tmp_path / "logs")
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("train.py: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in proc.stderr, proc.stderr[-1500:]


@pytest.mark.slow
def test_imagefolder_pretraining_config_runs_on_a_folder(tmp_path: Path) -> None:

    write_image_folder(tmp_path / "images", classes=2, per_class=8)
    config = str(REPO / "configs" / "crate_mae_nano_imagefolder.yaml")
    args = ["fit", "--config", config, "--data.root", str(tmp_path / "images"), "--data.num_workers", "0"]
    cli_main(
        [*args, "--trainer.max_epochs", "1", "--log_root", str(tmp_path / "logs"), *QUIET],
        model_class=MaskedAutoencoder,
    )
    run = tmp_path / "logs" / "crate_mae_nano_imagefolder" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert math.isfinite(_final(run / "metrics.csv", "val/loss"))


def test_a_folder_pretraining_run_is_answered_with_a_probe_on_its_own_folder(tmp_path: Path, capsys) -> None:
    """Export of a masked-pretraining run names the probe to train first. For a run on an image folder that is the
    folder's own config with the probe's settings, not the digits' probe config (another data set, channels and
    size); the command it names trains, and its run exports."""
    import shlex

    root = write_image_folder(tmp_path / "folder", 2, per_class=4, size=16, suffix=".png", gray=False, seed=0)
    folder_config = str(REPO / "configs" / "crate_mae_nano_imagefolder.yaml")
    quick = ["--trainer.max_epochs", "1", "--data.num_workers", "0", "--log_root", str(tmp_path), *QUIET]
    cli_main(["fit", "--config", folder_config, "--data.root", str(root), *quick], model_class=MaskedAutoencoder)
    checkpoint = tmp_path / "crate_mae_nano_imagefolder" / "version_0" / "checkpoints" / "last.ckpt"
    with pytest.raises(SystemExit) as refused:
        export_main([str(checkpoint), "--out", str(tmp_path / "encoder.safetensors")])
    said = capsys.readouterr().err
    assert refused.value.code == 2 and "digits" not in said, said
    command = shlex.split(said.split("on its data (", 1)[1].rsplit(") and export that run", 1)[0])
    assert command[:2] == ["train.py", "fit"] and command[command.index("--data.root") + 1] == str(root)
    cli_main([*command[1:], *quick, "--run_name", "probe", "--baseline.enabled", "false"])
    export_main(
        [str(tmp_path / "probe" / "version_0" / "checkpoints" / "last.ckpt"), "--out", str(tmp_path / "p.safetensors")]
    )
    card = (tmp_path / "p.md").read_text()
    assert "starting from the weights of" in card and str(checkpoint) in card


@pytest.mark.parametrize("module", ["ImageClassifier", "MaskedAutoencoder", "SelfDistillation"])
@pytest.mark.parametrize("setting", [{"img_size": 24}, {"in_chans": 1}, {"num_classes": 3}])
def test_model_kwargs_that_set_what_the_data_sets_are_refused_in_every_module(module: str, setting: dict) -> None:
    """Each was a TypeError from Python: create_classifier() got multiple values for argument 'img_size'."""
    import crate.lit

    name = "crate_mae_nano_patch4_32" if module == "MaskedAutoencoder" else "crate_nano_patch4_32"
    (key,) = setting
    with pytest.raises(ValueError, match=rf"^model_kwargs sets {key}, which the model is built with .*leave them out"):
        getattr(crate.lit, module)(name, img_size=32, model_kwargs=setting)
