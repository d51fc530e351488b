"""timm's hub names (``local-dir:DIR``, ``hf-hub:ORG/NAME``): the files behind them, and what their
``config.json`` says the weights are, for the tools that take a model name and a weights file apart."""

from __future__ import annotations

import json
from pathlib import Path

from timm.models import parse_model_name

from .convert import CheckpointError

__all__ = ["folder_weights", "hub_file", "hub_weights", "hub_weights_file", "is_hub_name"]

# the weight files a hub folder may hold, in timm's order of preference
_FOLDER_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")


def _source(name: str) -> tuple[str | None, str]:
    """(timm's source of ``name``: ``local-dir``, ``hf-hub`` or None for its registry, what follows the prefix)."""
    try:
        return parse_model_name(name)
    except ValueError:  # an unknown prefix, or a path without one: not a hub name, and refused as a model name
        return None, name


def is_hub_name(name: str) -> bool:
    """Whether ``name`` names a hub folder or repository (``local-dir:DIR``, ``hf-hub:ORG/NAME``, as timm reads
    model names) rather than an architecture or a tag."""
    return _source(name)[0] is not None


def folder_weights(folder: Path) -> str:
    """The weight file of a hub folder (``local-dir:DIR``, or a hub snapshot)."""
    for name in _FOLDER_FILES:
        if (folder / name).is_file():
            return str(folder / name)
    raise CheckpointError(f"{folder} holds no weights file ({', '.join(_FOLDER_FILES)}); export it again")


def hub_file(repo: str, filename: str, revision: str | None = None) -> str:
    """A file of a Hugging Face hub repository, from the local cache or downloaded (``HF_HUB_OFFLINE=1``:
    the cache only)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return hf_hub_download(repo, filename, revision=revision)
    except LocalEntryNotFoundError as err:
        raise CheckpointError(
            f"{repo}/{filename} is not in the local hub cache and cannot be downloaded ({type(err).__name__}); "
            "download it on a machine with network access (huggingface-cli download) or pass its file"
        ) from err
    except (EntryNotFoundError, RepositoryNotFoundError) as err:
        raise CheckpointError(f"the hub has no {filename} in {repo} ({type(err).__name__})") from err


def hub_weights_file(repo: str, revision: str | None = None) -> str:
    """The weights of a hub repository as timm finds them: its ``model.safetensors``, else (a repository
    published before safetensors) its ``pytorch_model.bin``; from the cache, or downloaded."""
    tried = []
    for filename in _FOLDER_FILES[:2]:
        try:
            return hub_file(repo, filename, revision)
        except CheckpointError as err:
            tried.append(str(err))
    raise CheckpointError(f"{repo} gives no weights file: {'; nor '.join(tried)}")


def _architecture(config: Path, name: str) -> str:
    """The architecture a hub ``config.json`` names (timm's ``architecture`` field)."""
    try:
        architecture = json.loads(config.read_text(encoding="utf-8")).get("architecture")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(
            f"{name}: {config} is not a readable timm config.json ({detail}); export the folder again "
            "(python -m crate.export CKPT --hub-dir DIR) or download it again"
        ) from err
    if not isinstance(architecture, str) or not architecture:
        raise CheckpointError(
            f"{name}: {config} names no architecture (timm's 'architecture' field); export the folder again"
        )
    return architecture


def hub_weights(name: str) -> tuple[str, str]:
    """(the architecture, the weights file) of a hub name: ``local-dir:DIR`` reads the folder, ``hf-hub:ORG/NAME``
    (or ``ORG/NAME@REVISION``) the repository's ``config.json`` and weights (:func:`hub_weights_file`) from the
    hub cache, downloading what it lacks. A missing folder, a folder without ``config.json`` or weights, or a
    config that is not timm's is one :class:`CheckpointError` (a missing folder: ``FileNotFoundError``)."""
    source, where = _source(name)
    if source == "local-dir":
        folder = Path(where)
        if not folder.is_dir():
            raise FileNotFoundError(f"{name}: {folder} is not a folder; give the folder crate.export --hub-dir wrote")
        config = folder / "config.json"
        if not config.is_file():
            raise CheckpointError(
                f"{name}: {folder} holds no config.json, so it is not a hub folder; give a folder crate.export "
                "--hub-dir wrote"
            )
        return _architecture(config, name), folder_weights(folder)
    repo, _, revision = where.partition("@")
    config = Path(hub_file(repo, "config.json", revision or None))
    return _architecture(config, name), hub_weights_file(repo, revision or None)
