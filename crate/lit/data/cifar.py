"""CIFAR-10 and CIFAR-100 through torchvision: downloaded when online, read from ``root`` otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from torchvision import datasets, transforms

from .augmentation import Augmentation, train_transform
from .base import ImageDataModule

__all__ = ["CIFAR_AUGMENTATION", "CIFARDataModule"]

# The usual CIFAR recipe: shifts by up to 4 pixels (padded crop) and horizontal flips.
CIFAR_AUGMENTATION = Augmentation(padding=4, hflip=0.5)

_CIFAR = {
    "cifar10": (
        datasets.CIFAR10,
        "cifar-10-batches-py",
        10,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
    ),
    "cifar100": (
        datasets.CIFAR100,
        "cifar-100-python",
        100,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
    ),
}


class CIFARDataModule(ImageDataModule):
    """CIFAR-10/100; training augmentation by default the usual padded crop and flip.

    Args:
        root: folder holding (or to receive) ``cifar-10-batches-py`` / ``cifar-100-python``.
        dataset: ``cifar10`` or ``cifar100``.
        download: fetch the data when it is not under ``root`` (needs network).
        img_size: images are resized from 32 to this side when it differs.
        augmentation: training augmentation (timm's settings, see :class:`Augmentation`); the padded crop
            pads the resized image, so its ``padding`` is in output pixels.
        seed: seed of the training order and augmentation.
        predict_split: the split ``train.py predict`` predicts. CIFAR's official test split is both the
            validation and the test split here (CIFAR has no separate validation split).
    """

    def __init__(
        self,
        root: str = "data",
        dataset: Literal["cifar10", "cifar100"] = "cifar10",
        download: bool = True,
        img_size: int = 32,
        batch_size: int = 128,
        num_workers: int = 2,
        augmentation: Augmentation = CIFAR_AUGMENTATION,
        seed: int = 0,
        predict_split: str = "val",
    ) -> None:
        super().__init__(img_size, batch_size, num_workers, seed, predict_split)
        if dataset not in _CIFAR:
            raise ValueError(f"dataset must be one of {sorted(_CIFAR)}, got {dataset!r}")
        self.root = Path(root)
        self.dataset = dataset
        self.download = download
        self.augmentation = augmentation

    @property
    def num_classes(self) -> int:
        return _CIFAR[self.dataset][2]

    @property
    def folder(self) -> Path:
        """Where torchvision expects the extracted data."""
        return self.root / _CIFAR[self.dataset][1]

    def _open(self, train: bool, transform: transforms.Compose | None, download: bool) -> datasets.VisionDataset:
        cls = _CIFAR[self.dataset][0]
        try:
            return cls(str(self.root), train=train, transform=transform, download=download)
        except (RuntimeError, OSError) as err:  # torchvision: missing/corrupt files; urllib: offline
            how = "could not be downloaded" if download else "is not there and download is off"
            raise FileNotFoundError(
                f"{self.dataset} {how}: expected the extracted folder {self.folder} ({err}). "
                f"Download it on a machine with network access and copy it there, or run with "
                f"--data.download true when online."
            ) from err

    def prepare_data(self) -> None:
        self._open(train=True, transform=None, download=self.download)
        self._open(train=False, transform=None, download=self.download)

    def _transforms(self, train: bool) -> transforms.Compose:
        mean, std = _CIFAR[self.dataset][3:]
        if train:
            return train_transform(self.augmentation, self.img_size, mean, std, interpolation="bilinear")
        steps: list = [transforms.Resize(self.img_size, antialias=True)] if self.img_size != 32 else []
        return transforms.Compose([*steps, transforms.ToTensor(), transforms.Normalize(mean, std)])

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set = self._open(train=True, transform=self._transforms(True), download=False)
            # CIFAR ships a train and a test split; the test split serves for validation and for test
            self.val_set = self._open(train=False, transform=self._transforms(False), download=False)
            self.test_set = self.val_set
