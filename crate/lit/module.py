"""The LightningModule: image classification with any timm model."""

from __future__ import annotations

import math
from typing import Any, Literal

import lightning as L
import torch
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from crate.models import CheckpointError

from .factory import create_classifier

__all__ = ["ImageClassifier", "param_groups_weight_decay", "warmup_cosine"]


def param_groups_weight_decay(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two parameter groups: weight decay on weight matrices, none on norms, biases and embeddings.

    Embeddings are what the model names in ``no_weight_decay()`` (position embedding, class token);
    norms and biases are the parameters with fewer than two dimensions.
    """
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name in skip or name.endswith(".bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Learning-rate factor: linear warmup from 0 to 1, then cosine decay from 1 to ``min_ratio``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class ImageClassifier(L.LightningModule):
    """Image classification with any timm model name (zoo or timm's own).

    Args:
        model_name: a timm model name, e.g. ``crate_nano_patch4_32`` or ``resnet18``.
        num_classes, in_chans, img_size: linked from the DataModule by ``train.py``.
        model_kwargs: further keyword arguments of the model constructor (e.g. ``drop_rate``).
        optimizer: ``adamw``, or ``lion`` (needs the ``lion-pytorch`` package).
        lr: peak learning rate after warmup; min_lr_ratio: final learning rate as a fraction of it.
        weight_decay: decoupled weight decay on weight matrices (norms, biases, embeddings skipped).
        betas: the optimizer's betas.
        warmup_epochs: linear warmup length in epochs (fractions allowed), then cosine decay per step.
        label_smoothing: label smoothing of the cross-entropy loss.
        grad_checkpointing: recompute activations in the backward pass (less memory, more compute),
            for models with ``set_grad_checkpointing`` (all of the zoo and timm's transformers).
    """

    def __init__(
        self,
        model_name: str = "crate_nano_patch4_32",
        num_classes: int = 10,
        in_chans: int = 3,
        img_size: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        optimizer: Literal["adamw", "lion"] = "adamw",
        lr: float = 1e-3,
        min_lr_ratio: float = 0.01,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_epochs: float = 5.0,
        label_smoothing: float = 0.1,
        grad_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_classifier(model_name, num_classes, in_chans, img_size, **(model_kwargs or {}))
        if grad_checkpointing:
            if not hasattr(self.model, "set_grad_checkpointing"):
                raise ValueError(f"{model_name} does not support gradient checkpointing")
            self.model.set_grad_checkpointing(True)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, targets = batch
        logits = self(images)
        loss = self.criterion(logits, targets)
        self.train_acc(logits, targets)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def _eval_step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str, metric: MulticlassAccuracy) -> None:
        images, targets = batch
        logits = self(images)
        self.log(f"{stage}/loss", self.criterion(logits, targets), prog_bar=stage == "val", sync_dist=True)
        metric(logits, targets)
        self.log(f"{stage}/acc", metric, prog_bar=True)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val", self.val_acc)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test", self.test_acc)

    def predict_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor | None]:
        """Class probabilities (and the labels where the batch has them), for the PredictionWriter."""
        images, labels = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) else (batch, None)
        return {"probabilities": self(images).softmax(dim=-1), "labels": labels}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse, with what to do, a checkpoint whose tensors do not fit this model (e.g. other classes)."""
        own = self.state_dict()
        wrong = [
            f"{k}: checkpoint {tuple(v.shape)}, this run {tuple(own[k].shape)}"
            for k, v in checkpoint.get("state_dict", {}).items()
            if k in own and tuple(v.shape) != tuple(own[k].shape)
        ]
        if wrong:
            saved = checkpoint.get("hyper_parameters", {})
            raise CheckpointError(
                f"the checkpoint does not fit this run's model ({'; '.join(wrong[:3])}). It was trained with "
                f"model_name={saved.get('model_name')!r}, num_classes={saved.get('num_classes')}, "
                f"in_chans={saved.get('in_chans')}, img_size={saved.get('img_size')}. Resume it with the same "
                "model and data, or start a new run that loads its weights through timm "
                "(pretrained_cfg_overlay with a head reset) to fine-tune on other classes."
            )

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        groups = param_groups_weight_decay(self.model, hp.weight_decay)
        if hp.optimizer == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas))
        elif hp.optimizer == "lion":
            try:
                from lion_pytorch import Lion
            except ImportError as err:
                raise ImportError(
                    "optimizer 'lion' needs the lion-pytorch package: pip install 'crate-zoo[lion]'"
                ) from err
            optimizer = Lion(groups, lr=hp.lr, betas=tuple(hp.betas))
        else:
            raise ValueError(f"unknown optimizer {hp.optimizer!r}; use 'adamw' or 'lion'")
        total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        warmup_steps = int(round(hp.warmup_epochs * total_steps / epochs))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, warmup_steps, total_steps, hp.min_lr_ratio)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
