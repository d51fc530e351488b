"""Small images at the model's speed: each split decoded once into a uint8 tensor store, training batches
augmented as whole tensors on the device they train on (:mod:`crate.data.tensor_store`,
:mod:`crate.data.batch_augmentation`).

A training batch leaves the loader as a ``SeededBatch`` (uint8 images, labels, per-sample seeds), one indexing
of the store, and :meth:`StoredImageDataModule.on_after_batch_transfer` (which Lightning calls after moving the
batch to the device) augments and normalises it; evaluation batches leave the loader normalised. Nothing is
decoded while training, so the loader needs no worker processes (``num_workers=0`` by default): on a CPU
every core stays with the model.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.trainer.states import RunningStage
from timm.data import create_transform
from torch.utils.data import Dataset

from crate.data import (
    BatchAugmentation,
    BatchMixing,
    MixedBatch,
    MultiCrop,
    SeededBatch,
    SeededStoredImages,
    StoredImages,
    StoreError,
    TensorStore,
    as_batch,
    pad_batch,
)
from crate.data.tensor_store import MixedSizes, folder_store

from .base import DataError, ImageDataModule
from .folder import FolderLayout, UnlabelledImages, check_predict_root

__all__ = ["StoredImageDataModule", "StoredImageFolderDataModule"]


class StoredImageDataModule(ImageDataModule):
    """Base of the DataModules whose splits are tensor stores; subclasses implement :meth:`stores`.

    Mean and std of the normalisation are those of the model's pretrained cfg (timm's data config, as
    :class:`ImageFolderDataModule` resolves them), so that timm's own evaluation transform of an exported
    model normalises as training did. Images are resized to ``img_size`` when stored at another size
    (antialiased bilinear).
    """

    def __init__(
        self,
        img_size: int,
        batch_size: int,
        num_workers: int,
        augmentation: BatchAugmentation,
        seed: int,
        predict_split: str,
        drop_last: bool = False,
        multi_crop: MultiCrop | None = None,
        mixing: BatchMixing | None = None,
        fixed_eval_shape: bool = False,
    ) -> None:
        super().__init__(img_size, batch_size, num_workers, seed, predict_split, drop_last)
        if mixing is not None and multi_crop is not None:
            raise ValueError("mixing (Mixup/CutMix) is for classification; multi_crop views are for self-distillation")
        if multi_crop is not None and multi_crop.global_size != img_size:
            raise ValueError(
                f"multi_crop.global_size ({multi_crop.global_size}) must be the model's image size ({img_size})"
            )
        self.augmentation = augmentation
        self.multi_crop = multi_crop
        self.mixing = mixing
        self.fixed_eval_shape = fixed_eval_shape
        self.mean: tuple[float, ...] = ()
        self.std: tuple[float, ...] = ()
        self._train_store: TensorStore | None = None

    def eval_transform(self) -> dict[str, Any]:
        """The model's mean and std, and no crop: the store evaluates whole images. Where it holds them at another
        size than ``img_size`` square, it resizes each whole to that square, bilinearly (timm's ``squash``;
        :class:`~crate.data.tensor_store.StoredImages`); at that size nothing is resized, and the model's
        interpolation stays."""
        settings = {**super().eval_transform(), "crop_pct": 1.0, "crop_mode": "center"}
        store = getattr(self.val_set, "store", None)
        if store is not None and tuple(store.images.shape[-2:]) != (self.img_size, self.img_size):
            settings.update(interpolation="bilinear", crop_mode="squash")
        return settings

    def stores(self, splits: Collection[str] = ("train", "val", "test")) -> dict[str, TensorStore]:
        """The stores of those of ``splits`` (all three by default) that the data has, and of any other split
        that comes with one of them at no cost (CIFAR's test split is also its validation split)."""
        raise NotImplementedError

    def files(self, split: str) -> list[tuple[Path, int]]:
        """The files a split's store was decoded from, in its order, with their labels (none: arrays)."""
        return []

    def splits_for(self, stage: str | None) -> set[str]:
        """The splits a stage reads: ``train`` and ``val`` always (fit, and the probes and baselines that read
        the training images), ``test`` only for ``test`` (or predict on it) and for a setup without a stage.
        A fit leaves a test split unread: not decoded, not cached, and an unreadable test image stops no fit."""
        wanted = {"train", "val"}
        if stage in (None, "test") or (stage == "predict" and self.predict_split == "test"):
            wanted.add("test")
        return wanted

    def setup(self, stage: str | None = None) -> None:
        sets = {"train": self.train_set, "val": self.val_set, "test": self.test_set}
        wanted = self.splits_for(stage) - {split for split, held in sets.items() if held is not None}
        if "test" in wanted and not self.has_test_split():
            wanted.discard("test")
        if not wanted:
            return
        if not self.mean:
            config = self.model_data_config()
            self.mean, self.std = tuple(config["mean"]), tuple(config["std"])
        stores = self.stores(sorted(wanted))
        for split, store in stores.items():
            if store.images.shape[1] != self.in_chans:
                raise DataError(f"the {split} store holds {store.images.shape[1]}-channel images, not {self.in_chans}")
        if "train" in stores:
            self._train_store = stores["train"]
        built = {
            split: StoredImages(store, self.mean, self.std, self.img_size, self.files(split))
            for split, store in stores.items()
        }
        self.train_set = built.get("train", self.train_set)
        self.val_set = built.get("val", self.val_set)
        self.test_set = built.get("test", self.test_set)

    def _seeded_train_set(self) -> tuple[Dataset, Callable[[Any], Any] | None]:
        return SeededStoredImages(self._train_store), as_batch

    def augment(self, images: torch.Tensor, seeds: torch.Tensor) -> Any:
        """A uint8 training batch augmented and normalised (each image by its own seed), for the trainer's
        current epoch (which turns the policy off after ``augmentation.policy_epochs``); with ``multi_crop``,
        its views instead (:class:`crate.data.MultiCrop`)."""
        if self.multi_crop is not None:  # self-distillation: (global views, local views), view-major
            return self.multi_crop(images, seeds, self.mean, self.std)
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        return self.augmentation(images, seeds, self.mean, self.std, size=self.img_size, epoch=epoch)

    def _evaluating(self) -> bool:
        stage = self.trainer.state.stage if self.trainer is not None else None
        return stage in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING, RunningStage.TESTING)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With ``fixed_eval_shape``, a validation or test batch smaller than ``batch_size`` (a split's last)
        padded to it on the host (:func:`crate.data.pad_batch`; the padding's label is left out of the
        metrics); prediction batches are never padded."""
        if self.fixed_eval_shape and self._evaluating() and isinstance(batch, (tuple, list)) and len(batch) == 2:
            return list(pad_batch(batch[0], batch[1], self.batch_size))
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A training batch (:class:`crate.data.SeededBatch`) augmented: ``(images, labels)``, or with ``mixing``
        on in this epoch a :class:`crate.data.MixedBatch` (each image mixed with the reversed batch's). The images
        are made here, after Lightning cast the batch for a "-true" precision: they are cast as it casts a batch."""
        if not isinstance(batch, SeededBatch):
            return batch
        images, labels, seeds = batch
        augmented = self.augment(images, seeds)
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        if self.mixing is not None and self.multi_crop is None and self.mixing.on(epoch):
            mixed, lam = self.mixing(augmented, seeds)
            made: Any = MixedBatch(mixed, labels, lam)
        else:
            made = (augmented, labels)
        return self.trainer.precision_plugin.convert_input(made) if self.trainer is not None else made


class StoredImageFolderDataModule(StoredImageDataModule):
    """An image folder (``root/{train,val[,test]}/<class>/<images>``, all of one size) through tensor stores.

    The first stage to read a split decodes it once (a fit reads train and val, ``test`` reads test), with the
    same reader as :class:`ImageFolderDataModule` (16-bit scaled, palettes and alpha converted), into
    ``<store_dir>/<split>-<L|RGB>.safetensors`` (``store_dir``: ``root/.tensor_store`` by default); later runs
    read those files, and rebuild one when its folder changed.
    Images of different sizes are refused (use :class:`ImageFolderDataModule`, which resizes each one).

    Args:
        root: the folder.
        img_size: the side the model sees; images stored at another side are resized to it.
        in_chans: 1, 3 or None (decided from a sample of the images, as ImageFolderDataModule does).
        store_dir: where the stores are written (a writable folder), ``root/.tensor_store`` by default.
        augmentation: the batched training augmentation (:class:`crate.data.BatchAugmentation`).
        drop_last: leave out an epoch's last, smaller training batch, so every step has the same shape (what
            CUDA graphs and compiled steps need; the left-out images come back in other epochs' orders).
        multi_crop: training batches as multi-crop views for self-distillation (:class:`crate.data.MultiCrop`,
            ``pretrain.py --objective simdino``) instead of ``augmentation``; None for classification.
        mixing: Mixup and CutMix of the augmented training batches on their device, each image's draws from its
            own seed (:class:`crate.data.BatchMixing`); None: no mixing.
        fixed_eval_shape: pad a split's last validation or test batch to ``batch_size`` (labels -1, left out
            of the metrics), so that a compiled model under CUDA graphs evaluates in one shape.
        predict_root: a folder of new images of any size (at any depth, no class folders needed) that
            ``train.py predict`` predicts instead of ``predict_split``: each read as the folder's images are and
            put in the evaluation form by timm's transform of the model's settings (what timm gives a user of the
            exported file); their labels are unknown (-1), and the class names are ``root``'s.
    """

    has_test_split_note = "there is no test/ folder next to train/ and val/"

    def __init__(
        self,
        root: str,
        img_size: int = 32,
        in_chans: int | None = None,
        store_dir: str | None = None,
        batch_size: int = 128,
        num_workers: int = 0,
        augmentation: BatchAugmentation = BatchAugmentation(),  # noqa: B008 - frozen, so one shared default is safe
        seed: int = 0,
        predict_split: str = "val",
        drop_last: bool = False,
        multi_crop: MultiCrop | None = None,
        mixing: BatchMixing | None = None,
        fixed_eval_shape: bool = False,
        predict_root: str | None = None,
    ) -> None:
        predict_folder = Path(predict_root).expanduser() if predict_root is not None else None
        if predict_folder is not None:
            check_predict_root(predict_folder)
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
        self.root = Path(root).expanduser()
        self.layout = FolderLayout.read(self.root, in_chans)
        self.classes = self.layout.classes
        self.store_dir = Path(store_dir) if store_dir is not None else self.root / ".tensor_store"
        self.predict_root = predict_folder

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if self.predict_root is not None and self.predict_set is None:
            config = {**self.model_data_config(), **self.eval_transform()}
            self.predict_set = UnlabelledImages(self.predict_root, create_transform(**config), self.layout.loader)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def data_identity(self) -> dict[str, Any]:
        return {**super().data_identity(), **self.layout.identity()}

    @property
    def in_chans(self) -> int:
        return self.layout.in_chans

    def has_test_split(self) -> bool:
        return "test" in self.layout.splits

    def store_path(self, split: str) -> Path:
        return self.store_dir / f"{split}-{self.layout.loader.mode}.safetensors"

    def files(self, split: str) -> list[tuple[Path, int]]:
        return self.layout.samples(split)

    def stores(self, splits: Collection[str] = ("train", "val", "test")) -> dict[str, TensorStore]:
        try:
            return {
                split: folder_store(
                    self.layout.samples(split),
                    self.classes,
                    self.root / split,
                    self.store_path(split),
                    self.layout.loader,
                )
                for split in self.layout.splits
                if split in splits
            }
        except MixedSizes as err:
            advice = (
                "resize its images to one size first: self-distillation's views are drawn from a tensor store"
                if self.multi_crop is not None
                else "resize its images to one size, or read the folder image by image with "
                "crate.lit.ImageFolderDataModule (configs/crate_nano_imagefolder.yaml)"
            )
            raise DataError(f"{err}; {advice}") from err
        except StoreError as err:
            raise DataError(str(err)) from err
