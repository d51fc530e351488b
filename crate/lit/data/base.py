"""What every DataModule of the zoo offers: the data's classes, channels and image size, and loaders."""

from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader, Dataset

__all__ = ["ImageDataModule"]


class ImageDataModule(L.LightningDataModule):
    """Base of the zoo's image DataModules.

    ``train.py`` links ``num_classes``, ``in_chans`` and ``img_size`` of the data to the model.
    Subclasses set ``self.train_set`` and ``self.val_set`` in ``setup``; validation and test share a split.
    """

    def __init__(self, img_size: int, batch_size: int, num_workers: int) -> None:
        super().__init__()
        self.img_size = img_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    @property
    def in_chans(self) -> int:
        return 3

    def _loader(self, dataset: Dataset | None, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before its dataloaders are asked for")
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)
