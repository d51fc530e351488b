"""The GPU suite's entry point refuses to run its real steps without a GPU, and its margins around a training run
cover what the committed one-GPU runs took. What its steps leave is checked in the GPU queue's one dry run
(``tests/test_gpu_queue.py``), which runs a job of each kind through this entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from gpu_queue import load_queue
from gpu_suite import AFTER_TRAINING_S, STARTUP_S

REPO = Path(__file__).resolve().parents[1]
# The committed records of the member jobs that ran on a GPU: the first stopped by the suite's kill, the rest ran out.
RECORDS = [
    REPO / "benchmarks" / "results" / "gpu_queue" / f"{job}.json"
    for job in (
        "crate_cct4_200_epochs",
        "vit_cct4_200_epochs",
        "crate_cct4_200_epochs_lr2e3",
        "crate_alpha_cct4_200_epochs_lr2e3",
    )
]


def _result(record: Path) -> dict:
    return json.loads(record.read_text())["result"]


@pytest.mark.parametrize("record", RECORDS, ids=lambda path: path.stem)
def test_the_margins_around_training_cover_what_a_gpu_run_took(record: Path) -> None:
    """Before its fit clock starts, train.py imports, loads the stores and compiles its sanity check; its last
    logged clock reading is within an epoch of the end, so the process's wall time beyond it bounds that start-up.
    After it, the suite exports and times the bare step: its wall time less the data and the training."""
    result = _result(record)
    clock = [epoch["elapsed_s"] for epoch in result["epochs"] if "elapsed_s" in epoch]
    start_up = result["train"]["wall_s"] - clock[-1]
    after_training = result["wall_s"] - result["data_ready_s"] - result["train"]["wall_s"]
    assert 0 < start_up < STARTUP_S, start_up
    assert 0 < after_training < AFTER_TRAINING_S, after_training


def test_the_leading_job_has_time_for_its_whole_schedule_at_the_measured_epoch_time() -> None:
    """``crate_cct4_200_epochs_lr2e3`` runs the member the first GPU run timed: its budget, less the data, the
    margins and the first (compiling) epoch, holds its 200 epochs at that run's median epoch time."""
    result = _result(RECORDS[0])
    job = next(job for job in load_queue() if job.name == "crate_cct4_200_epochs_lr2e3")
    budget = float(re.search(r"--budget-s (\S+)", job.run).group(1))
    fit_clock = budget - result["data_ready_s"] - AFTER_TRAINING_S - STARTUP_S
    first = result["epochs"][0]["elapsed_s"]
    assert first + 199 * result["epoch_s"] <= fit_clock, (first, result["epoch_s"], fit_clock)


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
