"""The GPU suite's entry point refuses to run its real steps without a GPU. What its steps leave is checked in the
GPU queue's one dry run (``tests/test_gpu_queue.py``), which runs a job of each kind through this entry point."""

from __future__ import annotations

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
