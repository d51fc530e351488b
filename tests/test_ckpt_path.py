"""What ``--ckpt_path`` names, without a training run: Lightning's registry only where its client is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from crate.lit import ckpt_path
from crate.lit.ckpt_path import resolve_checkpoint
from crate.models import CheckpointError


@pytest.mark.parametrize("given", ["registry", "registry:my-model:v2"])
def test_the_registry_needs_its_client_and_says_so(tmp_path: Path, monkeypatch, given: str) -> None:
    real = importlib.util.find_spec

    def without_litmodels(name: str, *args):
        return None if name == "litmodels" else real(name, *args)

    monkeypatch.setattr(ckpt_path.importlib.util, "find_spec", without_litmodels)
    with pytest.raises(CheckpointError, match=r"needs the litmodels package \(pip install litmodels\)"):
        resolve_checkpoint(given, str(tmp_path), "run", "validate")
    monkeypatch.setattr(ckpt_path.importlib.util, "find_spec", lambda name, *args: object())  # installed
    assert resolve_checkpoint(given, str(tmp_path), "run", "validate") == given  # Lightning's to download
