"""A classical baseline beside every run on an image folder: does the transformer earn its cost?

Before training, the run's own split is read as pixels (each image through the run's reader, gray or RGB,
resized to the run's input side or 32, whichever is smaller, with PIL's bilinear filter, scaled to [0, 1] and
flattened) and two scikit-learn models
are fitted on the training images and scored on the validation images: logistic regression (on standardised
pixels) and an RBF support vector machine (scikit-learn's defaults). Training sets larger than ``max_train``
images (or ``8,000,000`` pixel values) are subsampled (a seeded, class-stratified choice), which keeps both fits to
about a minute on one core (10,000 gray 28x28 images, 2,600 colour 32x32 ones);
every validation image is scored. The scores go into the end-of-run summary, every checkpoint of the run and the
card ``crate.export`` writes.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image

from crate.run.record import BASELINE_KEY  # where checkpoints record the scores

__all__ = ["ClassicalBaseline", "baseline_scores", "pixel_features"]

MAX_SIDE = 32


def pixel_features(paths: list[Path], read: Callable[[str], Image.Image], side: int) -> np.ndarray:
    """(N, C * side * side) float32 pixels in [0, 1]: each image read by ``read`` and, where it is not
    ``side`` x ``side`` already, resized to it (PIL's bilinear filter)."""
    rows = []
    for path in paths:
        image = read(str(path))
        if image.size != (side, side):
            image = image.resize((side, side), Image.BILINEAR)
        rows.append(np.asarray(image, dtype=np.float32).reshape(-1) / 255.0)
    return np.stack(rows)


def _subsample(labels: np.ndarray, limit: int, seed: int = 0) -> np.ndarray:
    """Indices of at most ``limit`` samples, each class kept in its share (seeded)."""
    if len(labels) <= limit:
        return np.arange(len(labels))
    from sklearn.model_selection import train_test_split

    kept, _ = train_test_split(np.arange(len(labels)), train_size=limit, stratify=labels, random_state=seed)
    return np.sort(kept)


def baseline_scores(
    train_x: np.ndarray,
    train_y: np.ndarray,
    val_x: np.ndarray,
    val_y: np.ndarray,
    max_train: int = 10_000,
    max_values: int = 8_000_000,
) -> dict[str, Any]:
    """Validation accuracy of logistic regression and an RBF SVM fitted on (a stratified subsample of) the
    training pixels: at most ``max_train`` images and ``max_values`` pixel values (10,000 gray 28x28 images, 2,600
    colour 32x32 ones: both fits about a minute on one core); with the subsample's size and the seconds it took."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    start = time.perf_counter()
    kept = _subsample(train_y, max(10, min(max_train, max_values // max(train_x.shape[1], 1))))
    x, y = train_x[kept], train_y[kept]
    with warnings.catch_warnings(record=True) as caught:  # said in the scores, not printed mid-run
        warnings.simplefilter("always", ConvergenceWarning)
        logistic = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x, y)
    svm = SVC().fit(x, y)
    return {
        "rbf_svm": float(svm.score(val_x, val_y)),
        "logistic": float(logistic.score(val_x, val_y)),
        "logistic_converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "train_images": int(len(kept)),
        "val_images": int(len(val_y)),
        "pixels": int(train_x.shape[1]),
        "seconds": round(time.perf_counter() - start, 1),
    }


class ClassicalBaseline(Callback):
    """Measure the classical baseline (module docstring) at the start of a fit on an image folder.

    Args:
        enabled: measure it (``--baseline.enabled false`` leaves it out).
        max_train: training images the two models fit at most (a stratified subsample beyond).
    """

    def __init__(self, enabled: bool = True, max_train: int = 10_000) -> None:
        if max_train < 10:
            raise ValueError(f"max_train must be >= 10, got {max_train}")
        self.enabled = enabled
        self.max_train = max_train
        self.scores: dict[str, Any] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from .module import ImageClassifier  # a classifier's baseline: pretraining has no labels to score

        datamodule = trainer.datamodule
        layout = getattr(datamodule, "layout", None)
        if not self.enabled or layout is None or self.scores is not None or not trainer.is_global_zero:
            return
        if not isinstance(pl_module, ImageClassifier):
            return
        train, val = layout.samples("train"), layout.samples("val")
        if len({label for _, label in train}) < 2 or not val:
            return
        side = min(MAX_SIDE, int(datamodule.img_size))  # the run's input, at most 32x32
        train_x = pixel_features([p for p, _ in train], layout.loader, side)
        val_x = pixel_features([p for p, _ in val], layout.loader, side)
        train_y = np.array([label for _, label in train])
        val_y = np.array([label for _, label in val])
        self.scores = baseline_scores(train_x, train_y, val_x, val_y, self.max_train)
        rank_zero_info(
            f"classical baseline on the run's pixels: RBF SVM {self.scores['rbf_svm']:.4f} · logistic "
            f"{self.scores['logistic']:.4f} ({self.scores['train_images']:,} training images, "
            f"{self.scores['seconds']} s; --baseline.enabled false leaves it out)"
        )

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if self.scores is not None:
            checkpoint[BASELINE_KEY] = self.scores

    def state_dict(self) -> dict[str, Any]:
        return {"scores": self.scores}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scores = state_dict.get("scores")  # a resumed run keeps the baseline it measured
