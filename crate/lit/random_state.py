"""Save the random number generators' states in checkpoints and restore them when training resumes."""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

__all__ = ["RandomStateCheckpoint"]


class RandomStateCheckpoint(Callback):
    """Checkpoints carry the torch (CPU and CUDA), numpy and Python random states of the moment they were
    written; a resumed run sets them back just before its first training batch, so random layers such as
    dropout draw what the uninterrupted run drew. (Data order and augmentation do not use these states:
    they are seeded per sample, see :mod:`crate.data.resumable`.) Under DDP the states of rank 0 are saved.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        name, keys, position, has_gauss, cached = np.random.get_state()
        state: dict[str, Any] = {  # plain tensors and numbers, so weights_only loading accepts them
            "torch": torch.get_rng_state(),
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)],
            "python": random.getstate(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is None:
            return
        state, self._pending = self._pending, None
        torch.set_rng_state(state["torch"])
        name, keys, position, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
        random.setstate(state["python"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
