"""scikit-learn's bundled digits (1,797 real 8x8 grayscale images, 10 classes) as tensors: the embedded
dataset, with no download. Used by the Lightning DataModule, the export and the interpretability tools."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

__all__ = ["DIGITS_CLASSES", "DIGITS_MEAN", "DIGITS_STD", "TensorImageDataset", "digits_split", "load_digits_tensors"]

DIGITS_MEAN = 0.5
DIGITS_STD = 0.5
DIGITS_CLASSES = [str(digit) for digit in range(10)]  # the class names: the digit each label stands for


class TensorImageDataset(Dataset):
    """Images and labels held in memory as tensors, with an optional per-image transform and class names."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        classes: list[str] | None = None,
    ) -> None:
        self.images = images
        self.labels = labels
        self.transform = transform
        self.classes = classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]


def digits_split(labels: np.ndarray, val_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The indices of the training and validation images of the digits: a stratified split, fixed by ``seed``."""
    train_idx, val_idx = train_test_split(
        np.arange(len(labels)), test_size=val_fraction, stratify=labels, random_state=seed
    )
    return train_idx, val_idx


def load_digits_tensors(
    img_size: int = 32, in_chans: int = 1, val_fraction: float = 0.2, seed: int = 0
) -> tuple[TensorImageDataset, TensorImageDataset]:
    """Deterministic stratified split of digits (:func:`digits_split`), resized to ``img_size`` and normalised
    to about [-1, 1].

    Returns the train and validation sets without augmentation.
    """
    digits = load_digits()
    labels = digits.target.astype(np.int64)
    train_idx, val_idx = digits_split(labels, val_fraction, seed)
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    images = F.interpolate(images, size=(img_size, img_size), mode="bilinear", align_corners=False)
    images = ((images - DIGITS_MEAN) / DIGITS_STD).expand(-1, in_chans, -1, -1).contiguous()
    targets = torch.from_numpy(labels)
    return (
        TensorImageDataset(images[train_idx], targets[train_idx], classes=DIGITS_CLASSES),
        TensorImageDataset(images[val_idx], targets[val_idx], classes=DIGITS_CLASSES),
    )
