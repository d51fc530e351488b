"""Masked pretraining with Lightning, and the pretrained encoder probed and loaded for fine-tuning."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import timm
import torch
from conftest import REPO

import crate  # noqa: F401
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


def test_decoder_is_measured_under_its_own_keys() -> None:
    torch.manual_seed(0)
    model = timm.create_model("crate_mae_nano_patch4_32", in_chans=1, img_size=16, num_classes=0).eval()
    images = torch.randn(8, 1, 16, 16)
    encoder = layer_rate_values(model, images, quantities=("Rc_before_attention", "Rc_after_attention"))
    decoder = layer_rate_values(model, images, quantities=("Rc_before_attention", "Rc_after_attention"), decoder=True)
    assert set(encoder) == {
        f"rate/{q}/layer_{i}" for q in ("Rc_before_attention", "Rc_after_attention") for i in range(4)
    }
    assert set(decoder) == {k.replace("rate/", "rate_decoder/") for k in encoder}
    assert all(math.isfinite(v) for v in decoder.values())
    assert decoder != {k.replace("rate/", "rate_decoder/"): v for k, v in encoder.items()}


def _final(path: Path, key: str) -> float:
    with path.open() as handle:
        values = [float(row[key]) for row in csv.DictReader(handle) if row.get(key)]
    return values[-1]


@pytest.mark.slow
def test_pretraining_run_then_probe_beats_the_same_probe_on_a_random_encoder(tmp_path: Path) -> None:
    cli_main(
        ["fit", "--config", PRETRAIN, "--trainer.max_epochs", "40", "--log_root", str(tmp_path), *QUIET],
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
    accuracies = {}
    for name, extra in (("pretrained", ["--model.pretrained_file", str(checkpoint)]), ("random", [])):
        args = ["fit", "--config", PROBE, "--trainer.max_epochs", "15", "--run_name", name, "--log_root", str(tmp_path)]
        cli_main([*args, *extra, *QUIET])
        accuracies[name] = _final(tmp_path / name / "version_0" / "metrics.csv", "val/acc")
    assert accuracies["pretrained"] > accuracies["random"] + 0.05, accuracies
