"""``train.py predict`` writes what it predicted to a file a person can read: ``predictions.csv``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

__all__ = ["PredictionWriter"]


class PredictionWriter(BasePredictionWriter):
    """After ``predict``, write ``predictions.csv`` into the run's folder (or ``output``): one row per image
    with its index in the split, its file (for image folders), its label, the predicted class and the
    predicted probability; the class names are those of the data where it has them.

    Args:
        output: the CSV file to write; default ``<run folder>/predictions.csv``.
    """

    def __init__(self, output: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output = output
        self.path: Path | None = None

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        batches = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        if not batches:
            return
        probabilities = torch.cat([b["probabilities"] for b in batches]).float()
        labels = torch.cat([b["labels"] for b in batches]) if batches[0].get("labels") is not None else None
        dataset = trainer.predict_dataloaders.dataset
        files = [str(path) for path, _ in getattr(dataset, "samples", [])]
        # the data's classes (train/'s for a folder): a split's own list lacks the classes it has no images of
        names = getattr(trainer.datamodule, "classes", None) or getattr(dataset, "classes", None)
        folder = Path(trainer.log_dir) if trainer.log_dir else Path.cwd()
        self.path = Path(self.output) if self.output else folder / "predictions.csv"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        confidence, predicted = probabilities.max(dim=-1)
        with self.path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["index", "file", "label", "predicted", "predicted_name", "probability"])
            for index in range(len(predicted)):
                cls = int(predicted[index])
                writer.writerow(
                    [
                        index,
                        files[index] if index < len(files) else "",
                        int(labels[index]) if labels is not None else "",
                        cls,
                        names[cls] if names and cls < len(names) else "",
                        f"{float(confidence[index]):.6f}",
                    ]
                )
        print(f"wrote {len(predicted)} predictions to {self.path}")
