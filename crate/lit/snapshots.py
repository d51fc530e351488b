"""Weights along training, at log-spaced points, for the white-box figures along a run
(``benchmarks/along_training.py``).

:class:`WeightSnapshots` writes the weights a run evaluates (the moving average where the run keeps one, the
teacher's backbone for self-distillation) as float16 safetensors into ``<run folder>/snapshots/``, named by step and
epoch (``step0000500-epoch0002.safetensors``: after optimizer step 500, in epoch 2, 0-based; ``-end`` for the
state at an epoch's end). Each file records what an export records (the architecture, its build settings, the
data section the run held out) and its step and epoch, so the zoo's one checkpoint reader loads it and
``timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=PATH))`` rebuilds it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from safetensors.torch import save_file

from crate.layers import patch_embed_in_chans
from crate.run.record import DATA_CONFIG_KEY

__all__ = ["SNAPSHOT_EPOCHS", "SNAPSHOT_STEPS", "WeightSnapshots", "snapshot_name"]

SNAPSHOT_STEPS = (0, 50, 100, 200, 500)  # optimizer steps (0: the initialisation, before the first step)
SNAPSHOT_EPOCHS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # ends of these epochs (1: the first epoch's end)


def snapshot_name(step: int, epoch: int, epoch_end: bool) -> str:
    return f"step{step:07d}-epoch{epoch:04d}{'-end' if epoch_end else ''}.safetensors"


class WeightSnapshots(Callback):
    """Keep the evaluated weights at ``steps`` (optimizer steps done) and at the end of the ``epochs``-th epoch.

    Args:
        enabled: write snapshots (``--snapshots.enabled true``; off by default).
        steps: optimizer-step counts to snapshot at (0: before training); default :data:`SNAPSHOT_STEPS`.
        epochs: epoch counts whose end is snapshot (1: after the first epoch); the last epoch is always kept;
            default :data:`SNAPSHOT_EPOCHS`.
    """

    def __init__(self, enabled: bool = False, steps: list[int] | None = None, epochs: list[int] | None = None) -> None:
        steps = list(SNAPSHOT_STEPS) if steps is None else steps
        epochs = list(SNAPSHOT_EPOCHS) if epochs is None else epochs
        if any(s < 0 for s in steps) or any(e < 1 for e in epochs):
            raise ValueError(f"snapshot steps must be >= 0 and epochs >= 1, got {steps} and {epochs}")
        self.enabled = enabled
        self.steps = sorted(set(steps))
        self.epochs = sorted(set(epochs))
        self.written: list[Path] = []

    def _folder(self, trainer: L.Trainer) -> Path | None:
        return Path(trainer.log_dir) / "snapshots" if trainer.log_dir else None

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch_end: bool) -> None:
        folder = self._folder(trainer)
        if folder is None or not trainer.is_global_zero:
            return
        model = pl_module.evaluated_model() if hasattr(pl_module, "evaluated_model") else pl_module.model
        step, epoch = trainer.global_step, trainer.current_epoch
        path = folder / snapshot_name(step, epoch, epoch_end)
        if path.exists():  # a resumed run passes the same point again
            return
        hp = pl_module.hparams
        model_config = {
            "num_classes": int(getattr(model, "num_classes", 0)),
            "in_chans": patch_embed_in_chans(model.patch_embed),
            "img_size": int(model.patch_embed.img_size[0]),
            "model_kwargs": dict(hp.get("model_kwargs") or {}),
        }
        metadata = {
            "model_name": hp["model_name"],
            "format": "pt",
            "model_config": json.dumps(model_config),
            "step": str(step),
            "epoch": str(epoch),
            "epoch_end": str(epoch_end).lower(),
        }
        data = getattr(trainer.datamodule, "data_config", None)
        if data is not None:
            metadata[DATA_CONFIG_KEY] = json.dumps(data)
        state = {
            k: (v.detach().to("cpu", torch.float16) if v.is_floating_point() else v.detach().cpu()).contiguous()
            for k, v in model.state_dict().items()
        }
        folder.mkdir(parents=True, exist_ok=True)
        save_file(state, str(path), metadata=metadata)
        self.written.append(path)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled and trainer.global_step in self.steps:
            self._write(trainer, pl_module, epoch_end=False)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.enabled and trainer.global_step in self.steps and trainer.global_step > 0:
            self._write(trainer, pl_module, epoch_end=False)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        done = trainer.current_epoch + 1
        last = trainer.max_epochs is not None and done >= trainer.max_epochs
        if self.enabled and (done in self.epochs or last):
            self._write(trainer, pl_module, epoch_end=True)
