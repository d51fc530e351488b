"""A run's checkpoint callbacks keep their best across a resume or an evaluation that names the run's folder in
another spelling: relative or absolute, through a link, another ``--log_root`` string for the same folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

__all__ = ["SameFolderCheckpoints"]


def _same_folder(first: str, second: str) -> bool:
    """Whether two spellings name one folder, as the process resolves them from its working folder."""
    try:
        return Path(first).resolve() == Path(second).resolve()
    except (OSError, RuntimeError):  # a path that cannot be resolved is not taken as the same
        return False


class SameFolderCheckpoints(Callback):
    """Lightning's ``ModelCheckpoint`` restores its best score, its best files and its last file only where the
    folder its checkpoint recorded equals its own folder as a string. Otherwise it warns that the run moved and
    forgets them, and the next validation, however poor, becomes the run's best file: the run summary and
    ``--ckpt_path best`` then name that file. A run trained under ``logs`` and resumed with ``--log_root
    $PWD/logs`` is one such case.

    Where the recorded folder and the callback's own name the same folder on disk, this callback rewrites the
    record to the callback's spelling before Lightning compares them (Lightning calls every callback's
    ``on_load_checkpoint`` before any callback's ``load_state_dict``). A run whose folder did move keeps
    Lightning's warning.
    """

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get("callbacks")
        if not isinstance(states, dict):
            return
        for callback in trainer.checkpoint_callbacks:
            if not isinstance(callback, ModelCheckpoint) or not callback.dirpath:
                continue
            state = states.get(callback.state_key)
            recorded = state.get("dirpath") if isinstance(state, dict) else None
            current = str(callback.dirpath)
            if isinstance(recorded, str) and recorded != current and _same_folder(recorded, current):
                state["dirpath"] = current
