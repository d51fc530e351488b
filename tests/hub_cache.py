"""A Hugging Face hub repository laid out in a local hub cache, as ``huggingface_hub`` leaves one after a
download, with the hub client switched to offline mode: tests of hub loading never touch the network."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants


def serve_offline(monkeypatch: pytest.MonkeyPatch, cache: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """Place ``files`` (name in the repository -> local file) as the ``main`` snapshot of ``repo_id`` in the
    hub cache folder ``cache`` and make ``huggingface_hub`` read that cache only (``HF_HUB_OFFLINE=1``).
    Returns the snapshot folder."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()  # any 40-hex revision the ref points at
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for name, source in files.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, snapshot / name)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return snapshot
