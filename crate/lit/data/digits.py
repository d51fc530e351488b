"""The embedded digits as a LightningDataModule (scikit-learn's bundled digits, no download)."""

from __future__ import annotations

from torchvision.transforms import v2

from crate.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_tensors

from .base import ImageDataModule

__all__ = ["DigitsDataModule"]


class DigitsDataModule(ImageDataModule):
    """Digits from scikit-learn (no download), upsampled to the model's input size.

    Args:
        img_size: side of the square images given to the model (the 8x8 digits are resized to it).
        in_chans: 1 (grayscale) or 3 (the gray channel repeated, for RGB models).
        val_fraction: share of each class held out for validation (stratified, fixed by ``split_seed``).
        augment: light augmentation for training: small random rotation, shift and scale.
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
        augment: bool = True,
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
            self.train_transform = v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1), fill=background)
        self.train_set, self.val_set = train, val
