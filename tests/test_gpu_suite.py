"""The GPU suite's entry point: it refuses to run its real steps without a GPU, and the SimDINO task's dry run
brings back its run. The crate_micro-style suite's report is checked step by step in the GPU queue's dry run
(``tests/test_gpu_queue.py``), which runs the same ``gpu_suite.py`` pipeline for the queue's first job."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_gpu_suite_refuses_to_run_its_real_steps_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "gpu_jobs" / "gpu_suite.sh"), "--out", str(tmp_path)],
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
