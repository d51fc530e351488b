"""scikit-learn's bundled digits (1,797 real 8x8 grayscale images, 10 classes): the embedded dataset."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset
from torchvision.transforms import v2

from .base import ImageDataModule

__all__ = ["DigitsDataModule", "TensorImageDataset", "load_digits_tensors"]

DIGITS_MEAN = 0.5
DIGITS_STD = 0.5


class TensorImageDataset(Dataset):
    """Images and labels held in memory as tensors, with an optional per-image transform."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.images = images
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]


def load_digits_tensors(
    img_size: int = 32, in_chans: int = 1, val_fraction: float = 0.2, seed: int = 0
) -> tuple[TensorImageDataset, TensorImageDataset]:
    """Deterministic stratified split of digits, resized to ``img_size`` and normalised to about [-1, 1].

    Returns the train and validation sets without augmentation.
    """
    digits = load_digits()
    labels = digits.target.astype(np.int64)
    train_idx, val_idx = train_test_split(
        np.arange(len(labels)), test_size=val_fraction, stratify=labels, random_state=seed
    )
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    images = F.interpolate(images, size=(img_size, img_size), mode="bilinear", align_corners=False)
    images = ((images - DIGITS_MEAN) / DIGITS_STD).expand(-1, in_chans, -1, -1).contiguous()
    targets = torch.from_numpy(labels)
    return (
        TensorImageDataset(images[train_idx], targets[train_idx]),
        TensorImageDataset(images[val_idx], targets[val_idx]),
    )


class DigitsDataModule(ImageDataModule):
    """Digits from scikit-learn (no download), upsampled to the model's input size.

    Args:
        img_size: side of the square images given to the model (the 8x8 digits are resized to it).
        in_chans: 1 (grayscale) or 3 (the gray channel repeated, for RGB models).
        val_fraction: share of each class held out for validation (stratified, fixed by ``split_seed``).
        augment: light augmentation for training: small random rotation, shift and scale.
    """

    def __init__(
        self,
        img_size: int = 32,
        in_chans: int = 1,
        batch_size: int = 64,
        num_workers: int = 0,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        augment: bool = True,
    ) -> None:
        super().__init__(img_size, batch_size, num_workers)
        if in_chans not in (1, 3):
            raise ValueError(f"in_chans must be 1 or 3 for digits, got {in_chans}")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
        self._in_chans = in_chans
        self.val_fraction = val_fraction
        self.split_seed = split_seed
        self.augment = augment

    @property
    def num_classes(self) -> int:
        return 10

    @property
    def in_chans(self) -> int:
        return self._in_chans

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train, val = load_digits_tensors(self.img_size, self._in_chans, self.val_fraction, self.split_seed)
        if self.augment:
            background = -DIGITS_MEAN / DIGITS_STD
            train.transform = v2.RandomAffine(
                degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1), fill=background
            )
        self.train_set, self.val_set = train, val
