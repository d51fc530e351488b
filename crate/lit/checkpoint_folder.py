"""A run's checkpoint callbacks keep their best across a resume or an evaluation that names the run's folder in
another spelling (relative or absolute, through a link, another ``--log_root`` string for the same folder) or finds
the run in another place (a moved or copied run folder, another working folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

__all__ = ["SameFolderCheckpoints"]

_FILES = ("best_model_path", "kth_best_model_path", "last_model_path")  # the recorded files, besides best_k_models


def _same_folder(first: str, second: str) -> bool:
    """Whether two spellings name one folder, as the process resolves them from its working folder."""
    try:
        return Path(first).resolve() == Path(second).resolve()
    except (OSError, RuntimeError):  # a path that cannot be resolved is not taken as the same
        return False


def _recorded_files(state: dict[str, Any]) -> list[str]:
    files = [state[key] for key in _FILES if isinstance(state.get(key), str) and state[key]]
    return files + [path for path in state.get("best_k_models") or {} if isinstance(path, str)]


def _moved_here(state: dict[str, Any], current: str) -> dict[str, Any] | None:
    """The record with its files in ``current``, where every file it names lies there under its name (the run's
    folder moved, or is read from another working folder), else None."""
    files = _recorded_files(state)
    here = Path(current)
    if not files or not all((here / Path(path).name).is_file() for path in files):
        return None
    moved = dict(state, dirpath=current)
    for key in _FILES:
        if isinstance(state.get(key), str) and state[key]:
            moved[key] = str(here / Path(state[key]).name)
    if isinstance(state.get("best_k_models"), dict):
        moved["best_k_models"] = {str(here / Path(path).name): score for path, score in state["best_k_models"].items()}
    return moved


class SameFolderCheckpoints(Callback):
    """Lightning's ``ModelCheckpoint`` restores its best score, its best files and its last file only where the
    folder its checkpoint recorded equals its own folder as a string. Otherwise it warns that the run moved and
    forgets them, and the next validation, however poor, becomes the run's best file: the run summary and
    ``--ckpt_path best`` then name that file. A run trained under ``logs`` and resumed with ``--log_root
    $PWD/logs`` was one such case; a run folder moved to another disk, another.

    Before Lightning compares them (it calls every callback's ``on_load_checkpoint`` before any callback's
    ``load_state_dict``), this callback rewrites the record to the callback's folder where the two name the same
    folder on disk, or where every file the record names lies in the callback's folder under its name (the files
    moved with the run; their recorded paths are rewritten too). A record whose files are not there keeps
    Lightning's warning.
    """

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get("callbacks")
        if not isinstance(states, dict):
            return
        for callback in trainer.checkpoint_callbacks:
            if not isinstance(callback, ModelCheckpoint) or not callback.dirpath:
                continue
            key = callback.state_key
            state = states.get(key)
            recorded = state.get("dirpath") if isinstance(state, dict) else None
            current = str(callback.dirpath)
            if not isinstance(recorded, str) or recorded == current:
                continue
            if _same_folder(recorded, current):
                state["dirpath"] = current
            elif (moved := _moved_here(state, current)) is not None:
                states[key] = moved
