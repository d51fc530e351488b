"""The GPU suite's dry run: the same steps as on a GPU (data stores, the GPU recipe through train.py, the
export, the bare step, the report) on the CPU with tiny limits, from the shell script a GPU machine runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_suite_s_dry_run_reports_every_step(tmp_path: Path) -> None:
    env = dict(os.environ, OUT_DRY=str(tmp_path))
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "--dry-run"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_dry_run_cpu.json").read_text())
    assert report["dry_run"] is True and report["model"] == "crate_micro_patch4_32"
    assert report["train"]["exit_status"] == 0
    assert "--config configs/cifar10/gpu.yaml" in report["train"]["command"]
    assert [e["epoch"] for e in report["epochs"]] == [0, 1, 2] and report["epochs_run"] == 3
    assert 0 < report["epoch_s"] and 0 < report["bare_step_ms"] and 0 < report["loop_vs_bare_gpu"]
    timed = sorted(e["epoch_s"] for e in report["epochs"][2:])  # past the first two epochs (compilation)
    assert report["epoch_s"] == round(timed[len(timed) // 2], 3)
    assert report["val_acc_last"] == report["epochs"][-1]["val_acc"]
    assert report["val_acc_best"] == max(e["val_acc"] for e in report["epochs"])
    assert 0 < report["val_s"] < report["epoch_s"]  # the validation pass is a part of the epoch
    for threshold, hit in report["time_to_val_acc"].items():  # the first validation at or above it, or null
        reaching = [e for e in report["epochs"] if e["val_acc"] >= float(threshold)]
        expected = reaching[0] if reaching else None
        assert hit == (
            expected
            and {"seconds": expected["elapsed_s"], "epoch": expected["epoch"] + 1, "val_acc": expected["val_acc"]}
        )
    assert sorted(report["time_to_val_acc"]) == ["0.70", "0.80", "0.85", "0.90"]
    elapsed = [e["elapsed_s"] for e in report["epochs"]]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= sum(e["epoch_s"] for e in report["epochs"][:-1])
    assert report["train_epoch_s"] == pytest.approx(report["epoch_s"] - report["val_s"], abs=1e-3)
    assert report["loop_vs_bare_gpu_train"] == pytest.approx(
        report["steps_per_epoch"] * report["bare_step_ms"] / 1000 / report["train_epoch_s"], abs=1e-3
    )
    assert report["loop_vs_bare_gpu"] == pytest.approx(
        report["steps_per_epoch"] * report["bare_step_ms"] / 1000 / report["epoch_s"], abs=1e-3
    )
    export = report["export"]
    assert export["exit_status"] == 0 and Path(export["file"]).is_file()
    assert export["val_images"] == 16 and 0 <= export["val_acc"] <= 1  # the stand-in folder's 16 val images
    assert (
        export["shipped_val_acc"]
        == json.loads((REPO / "checkpoints/crate_micro_patch4_32.cifar10.json").read_text())["val_accuracy"]
    )
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file() and (tmp_path / "train.log").is_file()
    assert (tmp_path / "run" / "config.yaml").is_file()  # what export reads the precision and seed from


def test_the_gpu_suite_refuses_to_run_its_real_steps_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "--out", str(tmp_path)],
        cwd=REPO, env=dict(os.environ, CIFAR10_TAR=str(tmp_path / "none.tar.gz")), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("gpu_suite.sh: no CUDA device")
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_the_simdino_task_s_dry_run_calibrates_trains_and_brings_back_its_run(tmp_path: Path) -> None:
    env = dict(os.environ, OUT_DRY=str(tmp_path))
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "--dry-run", "--task", "simdino"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "simdino_dry_run_cpu.json").read_text())
    run = report["runs"]["simdino"]
    assert set(report["runs"]) == {"simdino"} and run["exit_status"] == 0 and run["calibration"]["exit_status"] == 0
    assert "--objective simdino fit" in run["command"] and "--trainer.limit_val_batches 0" in run["calibration_command"]
    assert run["epochs_run"] == run["epochs_planned"] == len(run["knn_by_epoch"]) == len(run["epoch_s"]) == 1
    assert 0 <= run["knn_by_epoch"][0] <= 1 and 0 < run["calibration"]["step_s"]
    assert (tmp_path / "simdino" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "simdino" / "config.yaml").is_file() and (tmp_path / "simdino_train.log").is_file()
