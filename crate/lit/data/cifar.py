"""CIFAR-10 and CIFAR-100 through torchvision (downloaded when online, read from ``root`` otherwise), fed
through the tensor-store path: torchvision's uint8 arrays are the store, augmented by the batch."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

from torchvision import datasets

from crate.data import BatchAugmentation, BatchMixing, MultiCrop, TensorStore

from .stored import StoredImageDataModule

__all__ = ["CIFAR_AUGMENTATION", "CIFARDataModule"]

# The usual CIFAR recipe: shifts by up to 4 pixels (padded crop) and horizontal flips.
CIFAR_AUGMENTATION = BatchAugmentation(padding=4, hflip=0.5)

_CIFAR = {
    "cifar10": (datasets.CIFAR10, "cifar-10-batches-py", 10),
    "cifar100": (datasets.CIFAR100, "cifar-100-python", 100),
}


class CIFARDataModule(StoredImageDataModule):
    """CIFAR-10/100 from torchvision's files; training augmentation by default the usual padded crop and flip.

    Args:
        root: folder holding (or to receive) ``cifar-10-batches-py`` / ``cifar-100-python``.
        dataset: ``cifar10`` or ``cifar100``.
        download: fetch the data when it is not under ``root`` (needs network).
        img_size: images are resized from 32 to this side when it differs.
        augmentation: the batched training augmentation (:class:`crate.data.BatchAugmentation`).
        seed: seed of the training order and augmentation.
        predict_split: the split ``train.py predict`` predicts. CIFAR's official test split is both the
            validation and the test split here (torchvision's files have no separate validation split; the
            image-folder copy of CIFAR-10 with its fixed 5,000-image val split goes through
            :class:`StoredImageFolderDataModule`).
        drop_last: leave out an epoch's last, smaller training batch (fixed shapes for compiled steps).
        multi_crop: training batches as multi-crop views for self-distillation (:class:`crate.data.MultiCrop`).
        mixing: Mixup and CutMix on the device (:class:`crate.data.BatchMixing`); None: no mixing.
        fixed_eval_shape: pad the last evaluation batch to ``batch_size`` (one shape for CUDA graphs).
    """

    validates_on_test_split = (
        "torchvision's CIFAR files hold a training and a test split only; for CIFAR-10, make cifar10-data writes "
        "an image folder with a val split of its own, which configs/cifar10.yaml reads"
    )

    def __init__(
        self,
        root: str = "data",
        dataset: Literal["cifar10", "cifar100"] = "cifar10",
        download: bool = True,
        img_size: int = 32,
        batch_size: int = 128,
        num_workers: int = 0,
        augmentation: BatchAugmentation = CIFAR_AUGMENTATION,
        seed: int = 0,
        predict_split: str = "val",
        drop_last: bool = False,
        multi_crop: MultiCrop | None = None,
        mixing: BatchMixing | None = None,
        fixed_eval_shape: bool = False,
    ) -> None:
        super().__init__(
            img_size,
            batch_size,
            num_workers,
            augmentation,
            seed,
            predict_split,
            drop_last,
            multi_crop,
            mixing,
            fixed_eval_shape,
        )
        if dataset not in _CIFAR:
            raise ValueError(f"dataset must be one of {sorted(_CIFAR)}, got {dataset!r}")
        self.root = Path(root).expanduser()
        self.dataset = dataset
        self.download = download

    @property
    def num_classes(self) -> int:
        return _CIFAR[self.dataset][2]

    def data_identity(self) -> dict[str, Any]:
        return {**super().data_identity(), "source": self.dataset, "root": str(self.root.resolve())}

    @property
    def folder(self) -> Path:
        """Where torchvision expects the extracted data."""
        return self.root / _CIFAR[self.dataset][1]

    def _open(self, train: bool, download: bool) -> datasets.VisionDataset:
        cls = _CIFAR[self.dataset][0]
        try:
            return cls(str(self.root), train=train, download=download)
        except (RuntimeError, OSError) as err:  # torchvision: missing/corrupt files; urllib: offline
            how = "could not be downloaded" if download else "is not there and download is off"
            raise FileNotFoundError(
                f"{self.dataset} {how}: expected the extracted folder {self.folder} ({err}). "
                f"Download it on a machine with network access and copy it there, or run with "
                f"--data.download true when online."
            ) from err

    def prepare_data(self) -> None:
        self._open(train=True, download=self.download)
        self._open(train=False, download=self.download)

    def stores(self, splits: Collection[str] = ("train", "val", "test")) -> dict[str, TensorStore]:
        # CIFAR ships a train and a test split; the test split serves for validation and for test, so asking
        # for either gives both
        held: dict[str, TensorStore] = {}
        if "train" in splits:
            train = self._open(train=True, download=False)
            held["train"] = TensorStore.from_arrays(train.data, train.targets, train.classes)
        if {"val", "test"} & set(splits):
            test = self._open(train=False, download=False)
            test_store = TensorStore.from_arrays(test.data, test.targets, test.classes)
            held.update(val=test_store, test=test_store)
        return held
