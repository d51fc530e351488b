"""The embedded digits as a LightningDataModule (scikit-learn's bundled digits, no download)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

from crate.data.digits import DIGITS_CLASSES, DIGITS_MEAN, DIGITS_STD, load_digits_tensors
from crate.models.shipped import DIGITS_EVAL_TRANSFORM

from .augmentation import Augmentation, train_transform
from .base import ImageDataModule

__all__ = ["DIGITS_AUGMENTATION", "DigitsDataModule"]

# Chosen on the digits' validation split (benchmarks/default_job.py; the comparison is in docs/results_digits.md):
# the digits fill their frame, so the crop keeps 70-100% of it with mild aspect changes; they are not
# mirror-symmetric, so no flips. Rotations/shifts (RandomAffine), random erasing, mixup and RandAugment
# did not do better here.
DIGITS_AUGMENTATION = Augmentation(scale=(0.7, 1.0), ratio=(0.8, 1.25), hflip=0.0)


def _as_pil(image: torch.Tensor) -> Image.Image:
    """A normalised digits tensor (C, H, W) back to an 8-bit PIL image (the form timm's augmentations
    take); in NumPy, which costs half of the same steps as torch operations on a 16-pixel image."""
    pixels = np.rint(np.clip(image.numpy() * DIGITS_STD + DIGITS_MEAN, 0.0, 1.0) * 255.0).astype(np.uint8)
    return Image.fromarray(pixels[0] if len(pixels) == 1 else np.ascontiguousarray(pixels.transpose(1, 2, 0)))


class DigitsDataModule(ImageDataModule):
    """Digits from scikit-learn (no download), upsampled to the model's input size.

    Args:
        img_size: side of the square images given to the model (the 8x8 digits are resized to it).
        in_chans: 1 (grayscale) or 3 (the gray channel repeated, for RGB models).
        val_fraction: share of each class held out for validation (stratified, fixed by ``split_seed``).
        augmentation: training augmentation (timm's settings, see :class:`Augmentation`); geometric
            operations fill with the black background. ``null`` trains on the images as they are.
        seed: seed of the training order and augmentation (see :class:`ImageDataModule`).
        predict_split: the split ``train.py predict`` predicts (digits has no test split).
    """

    has_test_split_note = "its 1,797 images are split into train and validation only"

    def __init__(
        self,
        img_size: int = 32,
        in_chans: int = 1,
        batch_size: int = 64,
        num_workers: int = 0,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        augmentation: Augmentation | None = DIGITS_AUGMENTATION,
        seed: int = 0,
        predict_split: str = "val",
    ) -> None:
        super().__init__(img_size, batch_size, num_workers, seed, predict_split)
        if in_chans not in (1, 3):
            raise ValueError(f"in_chans must be 1 or 3 for digits, got {in_chans}")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
        self._in_chans = in_chans
        self.val_fraction = val_fraction
        self.split_seed = split_seed
        self.augmentation = augmentation

    @property
    def num_classes(self) -> int:
        return 10

    def data_identity(self) -> dict[str, Any]:
        split = {"val_fraction": self.val_fraction, "split_seed": self.split_seed}
        return {**super().data_identity(), "source": "digits", "classes": self.classes, **split}

    def has_test_split(self) -> bool:
        return False

    def eval_transform(self) -> dict[str, Any]:
        """The digits' own normalisation, whatever the model's, and a bilinear resize of the whole 8x8 image: timm's
        evaluation transform of a digit as an 8-bit gray image (value * 255 / 16) gives the tensor validation reads."""
        channels = self._in_chans
        return {**DIGITS_EVAL_TRANSFORM, "mean": (DIGITS_MEAN,) * channels, "std": (DIGITS_STD,) * channels}

    @property
    def classes(self) -> list[str]:
        """The class names: the digit each label stands for."""
        return list(DIGITS_CLASSES)

    @property
    def in_chans(self) -> int:
        return self._in_chans

    def _train_transform(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        if self.augmentation is None:
            return None
        channels = self._in_chans
        augment = train_transform(
            self.augmentation,
            self.img_size,
            mean=(DIGITS_MEAN,) * channels,
            std=(DIGITS_STD,) * channels,
            interpolation="bilinear",
            fill=(0.0,) * channels,
        )
        return v2.Compose([_as_pil, augment])

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train, val = load_digits_tensors(self.img_size, self._in_chans, self.val_fraction, self.split_seed)
        self.train_transform = self._train_transform()
        self.train_set, self.val_set = train, val
