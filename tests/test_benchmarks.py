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
    # FLOPs of one training step, written out from crate_nano's sizes (batch 64, 64 patches of 4x4x3 and a
    # class token, width 96, 4 layers, 10 classes). Forward: patch embedding, then per layer the shared
    # projection, scores, attention-weighted sum, output projection and ISTA's two matmuls, then the
    # head. Backward: twice the forward for every matmul; torch counts 2.5x for the fused attention.
    tokens, width, layers = 65, 96, 4
    linear = 2 * 64 * 48 * width + layers * 2 * (2 * tokens * width * width + 2 * tokens * width * width)
    linear += 2 * width * 10
    attention = layers * 2 * (2 * tokens * tokens * width)
    expected_gflop = 64 * (3 * linear + 3.5 * attention) / 1e9
    for row in result["rows"]:
        assert row["train_gflop_per_step"] == pytest.approx(expected_gflop, rel=1e-9)
        assert 0 < row["train_mfu"] < 1.5  # a share of the matmul peak measured in the same run
    fp32 = result["rows"][0]
    assert fp32["reference_memory_mib"] > fp32["memory_mib"] > 0  # the reference keeps its N x N maps
    assert "| crate_nano_patch4_32 | bf16 | eager |" in proc.stdout


def test_digits_folder_holds_the_datamodule_split(tmp_path: Path) -> None:
    write_digits_folder(tmp_path, size=16, chans=1)
    _, val = load_digits_tensors(img_size=16, in_chans=1)
    files = sorted((tmp_path / "val").rglob("*.png"))
    assert len(files) == len(val) and len(list((tmp_path / "train").rglob("*.png"))) == 1797 - len(val)
    first = tmp_path / "val" / str(int(val.labels[0])) / "0.png"
    pixels = np.asarray(Image.open(first), dtype=np.float64) / 255
    assert np.abs(pixels - (val.images[0, 0].numpy() * 0.5 + 0.5)).max() <= 0.5 / 255 + 1e-6
