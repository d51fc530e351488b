"""Shared helpers of the test suite."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` spreads the files over one worker per core (pytest-xdist): one thread each, for this process
    # and the processes its tests start, so the workers do not share cores thread against thread. Set before
    # torch, numpy and scipy load their thread pools (OpenMP and OpenBLAS read these when they load).
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks.common import write_image_folder  # noqa: E402,F401  (the tests' image folders)

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def write_cifar10_like_folder(root: Path, per_class: int = 2) -> Path:
    """A small stand-in for CIFAR-10 at ``root``: train/ and val/ of 32-pixel RGB PNGs under CIFAR-10's ten class
    names, ``per_class`` images each; returns ``root``."""
    from crate.models.shipped import CIFAR10_CLASSES

    write_image_folder(root, CIFAR10_CLASSES, per_class=per_class, size=32, suffix=".png", gray=False, seed=1)
    return root


def run_train(
    *args: str, cwd: Path = REPO, timeout: int = 600, program: str = "train.py"
) -> subprocess.CompletedProcess:
    """Run ``train.py`` (or ``pretrain.py``) in a subprocess, as a user would, and return the finished process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO / "tests"))
    return subprocess.run(
        [sys.executable, str(REPO / program), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_in_process(*args: str, program: str = "train.py") -> subprocess.CompletedProcess:
    """``train.py`` (or ``pretrain.py``) run in this process, its exit status and output captured as
    :func:`run_train` returns them: for the many tests of what the CLI refuses, where a new process would
    spend seconds on imports. Tests of what belongs to the process (signals, DDP, bitwise resume) use
    :func:`run_train`."""
    import contextlib
    import io
    import traceback

    from crate.lit import cli_main

    model_class = None
    if program == "pretrain.py":  # its --objective picks the module, as the script does
        from pretrain import OBJECTIVES, objective_and_rest

        objective, rest = objective_and_rest(list(args))
        model_class, args = OBJECTIVES[objective], tuple(rest)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    # what the run sets in its environment dies with a process; here it must not reach later tests' processes
    # (a LOCAL_RANK left by a DDP run makes Lightning take the next two-process run as launched already)
    environment = dict(os.environ)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(list(args), **({"model_class": model_class} if model_class else {}))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:  # what an uncaught error does to a process: a traceback and status 1
            err.write(traceback.format_exc())
            code = 1
        finally:
            os.environ.clear()
            os.environ.update(environment)
    return subprocess.CompletedProcess([program, *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def train_cli():
    return run_train


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run inside it (one kernel launch each on a GPU, views aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
