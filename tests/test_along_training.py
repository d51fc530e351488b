"""Snapshots along training: written at the configured steps and epochs, read by the one checkpoint reader, and
measured by benchmarks/along_training.py with the controls table's own code (the same numbers for the same
weights and images)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import REPO, run_in_process

pytestmark = pytest.mark.slow  # a train.py run and the controls of a snapshot


def test_snapshots_land_at_their_points_load_through_the_reader_and_measure_as_the_controls_table(
    tmp_path: Path,
) -> None:
    from benchmarks import along_training
    from benchmarks.controls_table import controls_of
    from crate.interpret import load_data
    from crate.models import read_checkpoint
    from crate.run import build_model, read_record, resolve_data

    proc = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_nano_digits.yaml"), "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false", "--log_root", str(tmp_path), "--snapshots.enabled", "true",
        "--snapshots.steps", "[0, 10]", "--snapshots.epochs", "[1]",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "crate_nano_digits" / "version_0"
    names = [path.name for _, _, path in along_training.snapshot_files(run)]
    # 23 steps an epoch: step 0, step 10, the first epoch's end (asked) and the last epoch's end (always)
    assert names == [
        "step0000000-epoch0000.safetensors",
        "step0000010-epoch0000.safetensors",
        "step0000023-epoch0000-end.safetensors",
        "step0000046-epoch0001-end.safetensors",
    ]
    last = run / "snapshots" / names[-1]
    held = read_checkpoint(last)
    assert held.model_name == "crate_nano_patch4_32"
    assert read_record(held).data_config["class_path"].endswith("DigitsDataModule")
    ema = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    key = "model_ema.module.head.weight"
    assert torch.equal(held.state_dict["head.weight"], ema[key].to(torch.float16))  # the evaluated (EMA) weights

    entry = along_training.measure(last, images=16, probe_images=64, overrides={})
    model, _, recorded = build_model("crate_nano_patch4_32", last)
    sample = load_data(resolve_data(None, recorded), model, limit=64).val_images[:16]
    torch.manual_seed(0)
    assert entry["controls"] == controls_of(model, sample)["official"]  # one code path, the same numbers
    rows = along_training.layer_rows(entry)
    assert len(rows) == 4 and all(0 <= row["sparsity_of_code"] <= 1 for row in rows)
    assert 0 <= entry["val_accuracy"] <= 1
