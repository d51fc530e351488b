"""``train.py predict`` writes what it predicted to a file a person can read: ``predictions.csv``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter

__all__ = ["PredictionWriter"]


class PredictionWriter(BasePredictionWriter):
    """After ``predict``, write ``predictions.csv`` into the run's folder (``predictions_<split>.csv`` for a
    ``predict_split`` other than ``val``; or ``output``): one row per image
    with its index in the split, its file (for image folders), its label and the label's name (empty for images
    without one, a folder's ``predict_root``), the predicted
    class, its name and its probability; the class names are those of the data where it has them. On several
    processes each predicts its share of the split; rank zero gathers the shares and writes each row by the
    index of its image, so the file is the one a single process writes.

    Args:
        output: the CSV file to write; default ``<run folder>/predictions.csv`` (``predictions_test.csv`` for the
            test split).
    """

    def __init__(self, output: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output = output
        self.path: Path | None = None

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        indices, probabilities, labels = _in_split_order(trainer, predictions, batch_indices)
        log_dir = trainer.log_dir  # a collective: every process asks
        if indices is None or not trainer.is_global_zero:
            return
        dataset = trainer.predict_dataloaders.dataset
        files = [str(path) for path, _ in getattr(dataset, "samples", [])]
        # the data's classes (train/'s for a folder): a split's own list lacks the classes it has no images of
        names = getattr(trainer.datamodule, "classes", None) or getattr(dataset, "classes", None)
        folder = Path(log_dir) if log_dir else Path.cwd()
        self.path = Path(self.output) if self.output else folder / default_file(trainer.datamodule)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        confidence, predicted = probabilities.max(dim=-1)
        # file and class names as the file system gave them (undecodable bytes written back as they were)
        with self.path.open("w", newline="", encoding="utf-8", errors="surrogateescape") as handle:
            writer = csv.writer(handle)
            writer.writerow(["index", "file", "label", "label_name", "predicted", "predicted_name", "probability"])
            for row, index in enumerate(indices.tolist()):
                cls = int(predicted[row])
                label = int(labels[row]) if labels is not None and labels[row] >= 0 else None  # -1: no label
                writer.writerow(
                    [
                        index,
                        files[index] if index < len(files) else "",
                        "" if label is None else label,
                        _name(names, label),
                        cls,
                        _name(names, cls),
                        f"{float(confidence[row]):.6f}",
                    ]
                )
        bar = trainer.progress_bar_callback  # a bar prints it on a line of its own, not after the bar's last state
        said = bar.print if bar is not None and bar.is_enabled else print
        part = len(indices) < len(dataset)  # --trainer.limit_predict_batches, fast_dev_run: part of the split
        of = f" ({len(indices):,} of its {len(dataset):,} images: --trainer.limit_predict_batches)" if part else ""
        said(f"wrote {len(indices)} predictions to {self.path}{of}")


def default_file(datamodule: Any) -> str:
    """``predictions.csv`` for the validation split (the default ``predict_split``), ``predictions_<split>.csv`` for
    another and ``predictions_<folder name>.csv`` for a ``predict_root``, so that predicting other images does not
    replace the validation split's file."""
    root = getattr(datamodule, "predict_root", None)
    if root is not None:
        return f"predictions_{Path(root).name}.csv"
    split = getattr(datamodule, "predict_split", "val")
    return "predictions.csv" if split == "val" else f"predictions_{split}.csv"


def _name(names: Any, index: int | None) -> str:
    """The name of class ``index`` where the data names its classes, else an empty cell."""
    return str(names[index]) if names and index is not None and 0 <= index < len(names) else ""


def _first_loader(outputs: Any) -> list[Any]:
    """The per-batch entries of the (only) predict dataloader: Lightning nests them per loader."""
    return outputs[0] if outputs and isinstance(outputs[0], list) else list(outputs or [])


def _in_split_order(
    trainer: L.Trainer, predictions: Any, batch_indices: Any
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Every process's predictions, on every process, as (indices in the split, probabilities, labels), sorted
    by index and each index once. Each process of a distributed run predicts its own share of the split, so
    its n-th prediction is not the split's n-th image: the indices Lightning recorded for each batch place it.
    ``indices`` is None where no process predicted anything."""
    batches = _first_loader(predictions)
    seen = [list(b) for b in _first_loader(batch_indices)]
    local: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
    if batches:
        probabilities = torch.cat([b["probabilities"] for b in batches]).float().cpu()
        labels = torch.cat([b["labels"] for b in batches]).cpu() if batches[0].get("labels") is not None else None
        if len(seen) == len(batches):
            indices = torch.tensor([i for batch in seen for i in batch], dtype=torch.long)
        elif trainer.world_size == 1:  # a loader Lightning could not track: one process predicts in order
            indices = torch.arange(len(probabilities))
        else:
            raise RuntimeError(
                "predict: the dataloader's sample indices are unknown, so a distributed run's "
                "predictions cannot be placed; predict on one process (--trainer.devices 1)"
            )
        local = (indices, probabilities, labels)
    shares = [local]
    if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
        shares = [None] * trainer.world_size
        dist.all_gather_object(shares, local)
    shares = [share for share in shares if share is not None]
    if not shares:
        return None, torch.empty(0), None
    indices = torch.cat([share[0] for share in shares])
    probabilities = torch.cat([share[1] for share in shares])
    labels = torch.cat([share[2] for share in shares]) if shares[0][2] is not None else None
    order = indices.argsort(stable=True)
    indices, probabilities = indices[order], probabilities[order]
    labels = labels[order] if labels is not None else None
    first = torch.ones_like(indices, dtype=torch.bool)
    first[1:] = indices[1:] != indices[:-1]  # a sampler that repeats samples to even out the shares
    return indices[first], probabilities[first], labels[first] if labels is not None else None
