"""The install is the tested one: the environment holds exactly the versions of ``requirements.lock``, and
the lock satisfies the ranges the pyproject declares for people who install the library themselves."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, sep, pinned = line.partition("==")
        assert sep and pinned, f"requirements.lock line {line!r} is not an exact pin"
        pins[canonicalize_name(name)] = pinned
    return pins


def test_installed_versions_equal_the_lock() -> None:
    pins = _pins()
    for name in ("torch", "torchvision", "timm", "lightning", "torchmetrics", "jsonargparse", "numpy"):
        assert name in pins, f"requirements.lock pins no {name}"
    wrong = []
    for name, pinned in pins.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            wrong.append(f"{name}: lock {pinned}, installed {installed}")
    assert not wrong, "the environment is not the locked one (make setup installs it): " + "; ".join(wrong)


def test_the_lock_satisfies_the_declared_ranges() -> None:
    pins = _pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    for text in declared:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{text} is declared but requirements.lock does not pin it (run make lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"lock {pins[name]} outside {text}"


def test_make_clean_removes_what_the_build_made_and_never_runs_or_data() -> None:
    """``make clean`` takes the environments, the package metadata and the docs site; a user's runs (logs/, hours of
    training), data and shipped checkpoints are never among what it deletes (``make -n`` prints without running)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    printed = subprocess.run(["make", "-n", "clean"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    removed = {word for line in printed.splitlines() if line.startswith("rm ") for word in shlex.split(line)[2:]}
    assert ".venv" in removed and "site" in removed
    assert not removed & {"logs", "lightning_logs", "data", "checkpoints", "results", "docs"}
