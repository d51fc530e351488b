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
    they are seeded per sample, see :mod:`crate.data.resumable`.)

    Under DDP every process starts from the same seed and draws as many numbers, so rank 0's states, which the
    file holds, are every rank's. Of an accelerator, the state of the process's own device is saved, and set back
    on the device of the process that resumes: rank 3's GPU resumes its own stream, not the never-used copy of it
    that rank 0 saw (what every device's states, saved from rank 0 and set on all of them, gave).
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
            state["cuda"] = torch.cuda.get_rng_state()  # this process's own device
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
        cuda = state.get("cuda")
        if cuda is not None and torch.cuda.is_available():
            if isinstance(cuda, (list, tuple)):  # files written before: every device's state, as one process saw them
                torch.cuda.set_rng_state_all(cuda)
            else:
                torch.cuda.set_rng_state(cuda)  # onto this process's own device
