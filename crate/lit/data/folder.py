"""Any folder of images in the ImageNet layout: ``root/train/<class>/*``, ``root/val/<class>/*`` and,
optionally, ``root/test/<class>/*``."""

from __future__ import annotations

import copy
import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from PIL import Image
from timm.data import create_transform
from torch.utils.data import Dataset
from torchvision import datasets

from crate.data import SeededTransformDataset
from crate.data.device_decode import (
    DeviceImageTransform,
    EncodedImages,
    SeededEncodedImages,
    collate_encoded,
    decode_batch,
)

from .augmentation import Augmentation, check_device_augmentation, device_transform, train_transform
from .base import DataError, ImageDataModule
from .folder_recipe import FolderRecipe, choose_recipe, survey_folder

__all__ = [
    "DataError",
    "DataRootError",
    "FolderLayout",
    "ImageFolderDataModule",
    "ImageLoader",
    "UnlabelledImages",
    "check_predict_root",
    "load_rgb_image",
]

IMAGE_SUFFIXES = datasets.folder.IMG_EXTENSIONS


def _class_names(split: Path) -> list[str]:
    return sorted(entry.name for entry in split.iterdir() if entry.is_dir())


def _image_files(folder: Path) -> Iterator[Path]:
    """A class folder's image files, its subfolders' included, as torchvision's ``make_dataset`` finds the files
    a split holds (links followed), in a sorted walk."""
    for directory, subfolders, names in os.walk(folder, followlinks=True):
        subfolders.sort()
        for name in sorted(names):
            if name.lower().endswith(IMAGE_SUFFIXES):
                yield Path(directory) / name


def _check_class_folders(split: Path) -> None:
    empty = [
        str(folder)
        for folder in sorted(p for p in split.iterdir() if p.is_dir())
        if next(_image_files(folder), None) is None
    ]
    if empty:
        raise DataError(
            f"class folders without images: {empty[:5]}; add images ({', '.join(IMAGE_SUFFIXES[:4])}, ...) "
            "or remove the folders"
        )


def _no_class_folders(split: Path) -> str:
    """What to say of a split folder without class folders: images lying in it have no class to be read from."""
    loose = next((path for path in sorted(split.iterdir()) if path.name.lower().endswith(IMAGE_SUFFIXES)), None)
    if loose is None:
        return f"{split} holds no class folders: a split holds {split.name}/<class>/<images>"
    return (
        f"{split} holds images ({loose.name}, ...) but no class folders: a split's images lie in "
        f"{split.name}/<class>/, whose name is their class; images of unknown class are classified through timm "
        "(crate.export writes the run's file, timm.create_model loads it)"
    )


# files an operating system leaves in folders, not a user's data (hidden files, starting with a dot, too)
_SYSTEM_FILES = frozenset({"Thumbs.db", "desktop.ini"})
GRAYSCALE_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
CHANNEL_SAMPLE = 8  # images per class folder and split whose mode decides the channel count


def _to_8_bit(image: Image.Image, path: str) -> Image.Image:
    """A grayscale image of more than 8 bits scaled to 8, instead of PIL's conversion, which saturates at 255.

    The full scale is the file's, the same for every image of a folder: 65535 for 16-bit files (PIL reads a
    PGM of more than 8 bits as 32-bit integers scaled to 16 bits), 1 for floating-point ones. A 32-bit integer
    file has no full scale of its own: its values are read as 8-bit where they stay within 0-255, else as 16-bit.
    Values outside the full scale are refused: clipped, they would read as a wrong image without a word."""
    array = np.asarray(image, dtype=np.float64)
    low, high = float(np.nanmin(array)), float(np.nanmax(array))
    if image.mode == "F":
        full_scale, words = 1.0, "a floating-point image is read as intensities from 0 to 1"
    elif image.mode.startswith("I;16") or image.format == "PPM" or high > 255:
        full_scale, words = 65535.0, "a 16-bit image is read as values from 0 to 65535"
    else:
        full_scale, words = 255.0, "a 32-bit integer image is read as values from 0 to 255 or to 65535"
    if not np.isfinite(array).all() or low < 0 or high > full_scale:
        raise DataError(
            f"{path} is an image of mode {image.mode} with values from {low:g} to {high:g}, and {words}: scale it "
            "into that range or save it as an 8- or 16-bit image (PNG, TIFF)"
        )
    return Image.fromarray(np.clip(array / full_scale * 255.0 + 0.5, 0, 255).astype(np.uint8), mode="L")


def _unreadable(path: str, err: Exception) -> DataError:
    return DataError(f"cannot read image {path} ({err}); replace or remove the file")


class ImageLoader:
    """Reads an image file as ``mode`` ("L" or "RGB"; palette, alpha, 16-bit and float converted, the last two
    scaled from their full scale, see ``_to_8_bit``).

    ``strict``: a colour image is an error instead of being turned gray (when one channel was decided from
    a sample of the folder, not asked for). Errors are :class:`DataError` naming the file.
    """

    # which pixels a file gives: a tensor store built by a reader of another revision is rebuilt (2: images of more
    # than 8 bits read from their file's full scale)
    revision = 2

    def __init__(self, mode: str = "RGB", strict: bool = False) -> None:
        if mode not in ("L", "RGB"):
            raise ValueError(f"mode must be 'L' or 'RGB', got {mode!r}")
        self.mode = mode
        self.strict = strict

    def __call__(self, path: str) -> Image.Image:
        try:
            with Image.open(path) as image:
                image.load()
                if self.strict and self.mode == "L" and image.mode not in GRAYSCALE_MODES:
                    raise DataError(
                        f"{path} is a {image.mode} image, but the folder was read as grayscale from a sample "
                        "of its images; pass --data.in_chans 3 (or 1 to convert colour images to gray)"
                    )
                if image.mode.startswith("I") or image.mode == "F":
                    image = _to_8_bit(image, path)
                return image.convert(self.mode)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            if isinstance(err, DataError):
                raise
            raise _unreadable(path, err) from err


def load_rgb_image(path: str) -> Image.Image:
    """An image file as RGB (see :class:`ImageLoader`)."""
    return ImageLoader("RGB")(path)


class UnlabelledImages(Dataset):
    """The image files of a folder at any depth, in a sorted walk, as ``(image, -1)``: images to predict, whose
    class is not known (-1: no label)."""

    def __init__(self, root: Path, transform: Callable[[Any], Any], loader: Callable[[str], Any]) -> None:
        self.root = root
        self.samples = [(str(path), -1) for path in _image_files(root)]
        self.targets = [label for _, label in self.samples]
        self.transform, self.loader = transform, loader

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        return self.transform(self.loader(path)), label


def check_predict_root(root: Path) -> None:
    """Refuse a ``predict_root`` that is not a folder of images, before anything is built."""
    if not root.is_dir():
        raise DataError(f"--data.predict_root {root} is not a folder: give the folder that holds the images to predict")
    if next(_image_files(root), None) is None:
        raise DataError(
            f"--data.predict_root {root} holds no image files at any depth (read: {', '.join(IMAGE_SUFFIXES)})"
        )


def _sampled_channels(root: Path, splits: list[str]) -> int:
    """1 when the first images of every class folder are all grayscale, else 3 (headers only are read)."""
    for split in splits:
        for folder in sorted(p for p in (root / split).iterdir() if p.is_dir()):
            for file in itertools.islice(_image_files(folder), CHANNEL_SAMPLE):
                try:
                    with Image.open(file) as image:
                        if image.mode not in GRAYSCALE_MODES:
                            return 3
                except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                    raise _unreadable(str(file), err) from err
    return 1


_OTHER_NAMES = {"train": ("training", "Train", "TRAIN"), "val": ("valid", "validation", "Val", "VAL", "dev")}


def _layout_hint(root: Path) -> str:
    """What the folder holds instead of the splits, where that says what to do: it is a split itself, a split
    has another name, class folders lie without splits, or there is no validation split."""
    if not root.is_dir():
        return ""
    if root.name in ("train", "val", "test") and all((root.parent / split).is_dir() for split in ("train", "val")):
        return f"; {root} is a split of the data root: give its parent, {root.parent}"
    renamed = [
        f"{other}/ to {split}/"
        for split, others in _OTHER_NAMES.items()
        if not (root / split).is_dir()
        for other in others
        if (root / other).is_dir()
    ]
    if renamed:
        return f"; rename (or link) {' and '.join(renamed[:2])}"
    scored = "(the images the run is scored on)"
    if not (root / "train").is_dir() and not (root / "val").is_dir():
        classes = [p.name for p in sorted(root.iterdir()) if p.is_dir() and next(_image_files(p), None) is not None]
        if classes:
            shown = ", ".join(classes[:3]) + (", ..." if len(classes) > 3 else "")
            return (
                f"; it holds class folders ({shown}) itself: move them into train/, and a share of each class's "
                f"images into val/<class>/ {scored}"
            )
    if (root / "train").is_dir() and not (root / "val").is_dir():
        return f"; move a share of each class's images from train/<class>/ into val/<class>/ {scored}"
    return ""


class DataRootError(FileNotFoundError):
    """A data root that lacks the splits the DataModule reads; each command adds the flag that sets the root."""


@dataclass(frozen=True)
class FolderLayout:
    """A checked ``root/{train,val[,test]}/<class>/<images>`` folder: its classes (train/'s), splits, the channels
    its images are read in (``in_chans`` or, when None, those of the images), the channels a sample of the images
    has (1: gray; what the recipe reads the kind of images from, whatever they are read in) and the image reader."""

    root: Path
    classes: list[str]
    splits: list[str]
    in_chans: int
    loader: ImageLoader
    image_channels: int

    @classmethod
    def read(cls, root: Path, in_chans: int | None) -> FolderLayout:
        if in_chans not in (None, 1, 3):
            raise ValueError(f"in_chans must be 1, 3 or None (decided from the images), got {in_chans}")
        missing = [str(root / split) for split in ("train", "val") if not (root / split).is_dir()]
        if missing:
            cifar10 = " (CIFAR-10's: make cifar10-data writes data/cifar10)" if root.name == "cifar10" else ""
            raise DataRootError(
                f"ImageFolder root {root} lacks {', '.join(missing)}: the data root must be a folder holding "
                f"train/<class>/<images> and val/<class>/<images>{cifar10}{_layout_hint(root)}"
            )
        splits = ["train", "val"] + (["test"] if (root / "test").is_dir() else [])
        for split in splits:
            if not _class_names(root / split):
                raise DataError(_no_class_folders(root / split))
        classes = _class_names(root / "train")
        for split in splits:
            _check_class_folders(root / split)
            if unknown := sorted(set(_class_names(root / split)) - set(classes)):
                raise DataError(
                    f"{root / split} has classes that {root / 'train'} lacks: {unknown}; a model learns only train/'s "
                    f"classes: add their images to train/ or remove them from {split}/"
                )
            if lacking := sorted(set(classes) - set(_class_names(root / split))):
                rank_zero_warn(
                    f"{root / split} lacks {len(lacking)} of train/'s {len(classes)} classes ({', '.join(lacking[:5])}"
                    f"{', ...' if len(lacking) > 5 else ''}): its accuracy says nothing of them; add {split} images "
                    "of every class for a fair score"
                )
        sampled = _sampled_channels(root, splits)
        chans = in_chans if in_chans is not None else sampled
        loader = ImageLoader("L" if chans == 1 else "RGB", strict=in_chans is None)
        return cls(root, classes, splits, chans, loader, sampled)

    @cached_property
    def split_sizes(self) -> dict[str, int]:
        """The number of images of each split (listed once)."""
        return {split: len(self.samples(split)) for split in self.splits}

    def identity(self) -> dict[str, Any]:
        """The folder (resolved), its classes and the number of images of each split: what a run trained on."""
        root = str(self.root.resolve())
        return {"source": "image folder", "root": root, "classes": self.classes, "split_sizes": self.split_sizes}

    @cached_property
    def _listings(self) -> dict[str, list[tuple[Path, int]]]:
        """Each split's files, listed once (the recipe's survey, the identity, the baseline and stores share it).
        Files of other types in the class folders (a GIF, a HEIC photo) are left out, as torchvision leaves them
        out, and said so once: a user's images are not dropped without a word."""
        class_index = {name: index for index, name in enumerate(self.classes)}
        others: Counter[str] = Counter()

        def is_image(path: str) -> bool:
            name = Path(path).name
            if name.lower().endswith(IMAGE_SUFFIXES):
                return True
            if not name.startswith(".") and name not in _SYSTEM_FILES:
                others[Path(name).suffix.lower() or "(no suffix)"] += 1
            return False

        listings = {
            split: [
                (Path(path), label)
                for path, label in datasets.folder.make_dataset(
                    str(self.root / split), class_index, is_valid_file=is_image, allow_empty=True
                )
            ]
            for split in self.splits
        }
        if others:
            kinds = ", ".join(f"{suffix} {count:,}" for suffix, count in others.most_common())
            rank_zero_warn(
                f"{self.root}: left out {sum(others.values()):,} files of the class folders that are not of an image "
                f"type read here ({kinds}); images among them are used once converted to .png or .jpg "
                f"(read: {', '.join(IMAGE_SUFFIXES)})"
            )
        return listings

    def samples(self, split: str) -> list[tuple[Path, int]]:
        """The split's image files, sorted, with the index of their class among train/'s classes."""
        return list(self._listings[split])


class ImageFolderDataModule(ImageDataModule):
    """Images from class folders, with timm's transforms resolved from the model's pretrained cfg.

    Channels: ``in_chans=None`` (default) gives one channel when the images sampled from every class folder
    are grayscale (8- or 16-bit; 16-bit scaled to 8) and three otherwise; a colour image met later in a
    folder judged grayscale is an error naming it, never silently turned gray. ``in_chans=3`` converts
    everything to RGB (gray replicated), ``in_chans=1`` everything to gray. Mean, std, interpolation and
    crop ratio come from the model being trained when the DataModule is attached to a trainer, or from the
    model given to ``transforms_from`` (evaluation outside a trainer), otherwise from ImageNet defaults
    (for one channel, their luma-weighted average); the size is always ``img_size``. ``root/test`` is the
    test split when it exists.

    Training augmentation: :class:`Augmentation` (timm's settings; below 128 pixels the crop keeps
    60-100% of the image and colour jitter is off unless set).

    ``img_size``, ``batch_size``, ``augmentation`` and ``class_weights`` left at None / ``"auto"`` are chosen
    from the folder (:mod:`crate.lit.data.folder_recipe`: its images' side, channels, count and class balance),
    and ``recipe`` holds the choice (with the epochs it suggests); a value given is kept.

    ``decode="device"`` (for GPUs and ImageNet-size JPEGs): the loaders' workers read files only, and each batch is
    decoded, cropped, flipped and normalised on the device it trains on (:mod:`crate.data.device_decode`);
    ``train_set``, ``val_set`` and ``test_set`` keep timm's transforms for whatever reads single images.

    ``predict_root``: a folder of new images (at any depth, no class folders needed) that ``train.py predict``
    predicts instead of ``predict_split``, each in the evaluation form; their labels are unknown (-1), and the
    class names are ``root``'s.
    """

    has_test_split_note = "there is no test/ folder next to train/ and val/"

    def __init__(
        self,
        root: str,
        img_size: int | None = None,
        in_chans: int | None = None,
        batch_size: int | None = None,
        num_workers: int = 4,
        augmentation: Augmentation | None = None,
        seed: int = 0,
        predict_split: str = "val",
        class_weights: list[float] | str | None = "auto",
        decode: str = "cpu",
        predict_root: str | None = None,
    ) -> None:
        if decode not in ("cpu", "device"):
            raise ValueError(f"decode must be 'cpu' (PIL in the loader's workers) or 'device', got {decode!r}")
        predict_folder = Path(predict_root).expanduser() if predict_root is not None else None
        if predict_folder is not None:
            check_predict_root(predict_folder)
        layout = FolderLayout.read(Path(root).expanduser(), in_chans)
        chosen = {img_size, batch_size, augmentation, class_weights if isinstance(class_weights, str) else 0}
        self.recipe: FolderRecipe | None = None
        if None in chosen or "auto" in chosen:  # what is left open is chosen from the folder
            survey = survey_folder(
                layout.samples("train"), layout.classes, layout.split_sizes["val"], layout.image_channels
            )
            self.recipe = choose_recipe(survey)
        if class_weights not in (None, "auto") and not isinstance(class_weights, list):
            raise ValueError(f"class_weights must be 'auto', null or a list of numbers, got {class_weights!r}")
        super().__init__(
            img_size if img_size is not None else self.recipe.img_size,
            batch_size if batch_size is not None else self.recipe.batch_size,
            num_workers,
            seed,
            predict_split,
        )
        self.augmentation = augmentation if augmentation is not None else self.recipe.augmentation
        self.decode = decode
        self.predict_root = predict_folder
        if decode == "device":
            check_device_augmentation(self.augmentation, self.img_size)
        self.device_transform: DeviceImageTransform | None = None
        self._train_images: datasets.ImageFolder | None = None  # the training images as decoded, for augmenting
        self._encoded: dict[int, EncodedImages] = {}  # id of a split's dataset -> its files for the device path
        self._class_weights = self.recipe.class_weights if class_weights == "auto" else class_weights
        if self._class_weights is not None and len(self._class_weights) != len(layout.classes):
            raise ValueError(f"class_weights has {len(self._class_weights)} weights for {len(layout.classes)} classes")
        self.root = Path(root).expanduser()
        self.layout = layout
        self.classes, self.splits, self._in_chans = self.layout.classes, self.layout.splits, self.layout.in_chans
        self.loader = self.layout.loader

    @property
    def class_weights(self) -> list[float] | None:
        """The loss's weight of each class (train/'s order), or None for an unweighted loss."""
        return self._class_weights

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def data_identity(self) -> dict[str, Any]:
        return {**super().data_identity(), **self.layout.identity()}

    def has_test_split(self) -> bool:
        return "test" in self.splits

    @property
    def in_chans(self) -> int:
        return self._in_chans

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        config = self.model_data_config()
        augment = train_transform(
            self.augmentation,
            self.img_size,
            mean=config["mean"],
            std=config["std"],
            interpolation=config.get("interpolation", "bilinear"),
        )
        class_index = {name: index for index, name in enumerate(self.classes)}
        # the training loader augments the decoded images (under each sample's seed); train_set is the same
        # images in the evaluation form, for everything that reads them outside training (probes, predict)
        self._train_images = datasets.ImageFolder(str(self.root / "train"), loader=self.loader)
        self.train_transform = augment
        train = copy.copy(self._train_images)  # the same file list, read once
        train.transform = create_transform(**config)
        evaluated = []
        for split in self.splits[1:]:
            dataset = datasets.ImageFolder(
                str(self.root / split), transform=create_transform(**config), loader=self.loader
            )
            dataset.class_to_idx = class_index  # indices of train/'s classes, even where a split lacks some
            dataset.samples = [(str(path), label) for path, label in self.layout.samples(split)]
            dataset.targets = [target for _, target in dataset.samples]
            evaluated.append(dataset)
        self.train_set, self.val_set = train, evaluated[0]
        self.test_set = evaluated[1] if len(evaluated) > 1 else None
        if self.predict_root is not None:
            self.predict_set = UnlabelledImages(self.predict_root, create_transform(**config), self.loader)
        if self.decode == "device":
            self.device_transform = device_transform(self.augmentation, self.img_size, config)
            for split, dataset in zip(self.splits, (train, *evaluated), strict=True):
                self._encoded[id(dataset)] = EncodedImages(self.layout.samples(split), self.loader)
            if self.predict_set is not None:
                self._encoded[id(self.predict_set)] = EncodedImages(self.predict_set.samples, self.loader)

    # decode "device": the loaders read files (bytes, or pixels where the device cannot decode them), and each
    # batch is decoded and transformed on the device before the transfer; train_set, val_set and test_set keep
    # their PIL transforms for everything that reads single images (interpretation, probes, baselines)
    def _seeded_train_set(self) -> tuple[Dataset, Callable[[Any], Any] | None]:
        if self.decode != "device":
            return SeededTransformDataset(self._train_images, self.train_transform), None
        return SeededEncodedImages(self._encoded[id(self.train_set)]), collate_encoded

    def _evaluation_source(self, dataset: Dataset) -> tuple[Dataset, Callable[[Any], Any] | None]:
        if self.decode != "device":
            return super()._evaluation_source(dataset)
        return self._encoded[id(dataset)], collate_encoded

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """decode "device": a batch of files decoded and transformed where the model runs, ``[images, labels]``."""
        if not (isinstance(batch, dict) and "payloads" in batch):
            return batch
        trainer = self.trainer
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        try:
            images = decode_batch(batch["payloads"], batch["paths"], device)
        except ValueError as err:
            raise DataError(str(err)) from err
        if "seeds" in batch:
            epoch = trainer.current_epoch if trainer is not None else 0
            return [self.device_transform.train(images, batch["seeds"].tolist(), epoch), batch["labels"]]
        return [self.device_transform.evaluate(images), batch["labels"]]
