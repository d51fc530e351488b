"""The benchmarks' own checks: the throughput benchmark refuses to time a zoo model whose logits differ
from its reference, and writes its figures; the augmentation comparison writes the digits as a folder."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import throughput  # noqa: E402
from augmentation_recipes import write_digits_folder  # noqa: E402

from crate.data.digits import load_digits_tensors  # noqa: E402


def test_throughput_refuses_a_reference_that_computes_something_else() -> None:
    case = throughput.CASES["crate_nano_patch4_32"]
    other = replace(case, reference=throughput._official_crate(32, 4, 10, 96, 4, 2))  # 2 heads, not 4
    with pytest.raises(RuntimeError, match="logits differ"):
        throughput._build(other, torch.device("cpu"))
    model, reference = throughput._build(case, torch.device("cpu"))  # the real pair passes the check
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


@pytest.mark.slow
def test_throughput_benchmark_writes_ratios_and_utilisation(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    args = ["--models", "crate_nano_patch4_32", "--dtypes", "fp32,bf16", "--modes", "eager", "--steps", "1"]
    args += ["--repeats", "1", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "throughput.py"), *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [row["dtype"] for row in result["rows"]] == ["fp32", "bf16"]
    for row in result["rows"]:
        assert row["train_ratio"] == pytest.approx(row["train_img_s"] / row["train_reference_img_s"])
        assert 0 < row["train_mfu"] < 1.5 and row["memory_mib"] > 0  # a share of the measured matmul peak
        # the counted FLOPs of a training step: at least 3x the forward matmuls of the patch embedding
        assert row["train_gflop_per_step"] > 3 * 2 * 64 * 64 * 16 * 96 / 1e9
    assert "| crate_nano_patch4_32 | bf16 | eager |" in proc.stdout


def test_digits_folder_holds_the_datamodule_split(tmp_path: Path) -> None:
    write_digits_folder(tmp_path, size=16, chans=1)
    _, val = load_digits_tensors(img_size=16, in_chans=1)
    files = sorted((tmp_path / "val").rglob("*.png"))
    assert len(files) == len(val) and len(list((tmp_path / "train").rglob("*.png"))) == 1797 - len(val)
    first = tmp_path / "val" / str(int(val.labels[0])) / "0.png"
    pixels = np.asarray(Image.open(first), dtype=np.float64) / 255
    assert np.abs(pixels - (val.images[0, 0].numpy() * 0.5 + 0.5)).max() <= 0.5 / 255 + 1e-6
