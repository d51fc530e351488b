"""Shared helpers of the test suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_train(*args: str, cwd: Path = REPO, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``train.py`` in a subprocess, as a user would, and return the finished process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO / "tests"))
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def train_cli():
    return run_train
