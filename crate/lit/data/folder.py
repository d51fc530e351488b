"""Any folder of images in the ImageNet layout: ``root/train/<class>/*``, ``root/val/<class>/*`` and,
optionally, ``root/test/<class>/*``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config
from torchvision import datasets

from .base import DataError, ImageDataModule

__all__ = ["DataError", "ImageFolderDataModule", "load_rgb_image"]

IMAGE_SUFFIXES = datasets.folder.IMG_EXTENSIONS


def _class_names(split: Path) -> list[str]:
    return sorted(entry.name for entry in split.iterdir() if entry.is_dir())


def _check_class_folders(split: Path) -> None:
    empty = [
        str(folder)
        for folder in sorted(p for p in split.iterdir() if p.is_dir())
        if not any(f.suffix.lower() in IMAGE_SUFFIXES for f in folder.iterdir() if f.is_file())
    ]
    if empty:
        raise DataError(
            f"class folders without images: {empty[:5]}; add images ({', '.join(IMAGE_SUFFIXES[:4])}, ...) "
            "or remove the folders"
        )


def _to_8_bit(image: Image.Image) -> Image.Image:
    """16-bit (and 32-bit integer) grayscale scaled to 8 bits, instead of PIL's saturating conversion."""
    array = np.asarray(image, dtype=np.float64)
    full_scale = 65535.0 if image.mode.startswith("I;16") or array.max() > 255 else 255.0
    return Image.fromarray(np.clip(array / full_scale * 255.0 + 0.5, 0, 255).astype(np.uint8), mode="L")


def load_rgb_image(path: str) -> Image.Image:
    """An image file as RGB (grayscale, palette and RGBA converted; 16-bit scaled), or a DataError that
    names the file."""
    try:
        with Image.open(path) as image:
            image.load()
            if image.mode.startswith("I"):
                image = _to_8_bit(image)
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise DataError(f"cannot read image {path} ({err}); replace or remove the file") from err


class ImageFolderDataModule(ImageDataModule):
    """Images from class folders, with timm's transforms resolved from the model's pretrained cfg.

    Grayscale (and palette, RGBA; 16-bit scaled to 8) images are converted to RGB on load, so the model
    sees 3 channels. Mean, std, interpolation and crop ratio come from the model being trained when the
    DataModule is attached to a trainer, or from the model given to ``transforms_from`` (evaluation
    outside a trainer), otherwise from ImageNet defaults; the size is always ``img_size``. ``root/test``
    is the test split when it exists.

    Training augmentation is timm's (``create_transform``), with its settings in the config: ``scale`` and
    ``ratio`` of the random-resized crop (default: timm's (0.08, 1) from 128 pixels up, (0.6, 1) below,
    where an 8% crop leaves a few pixels), ``hflip`` (set 0 for data that is not mirror-symmetric, such
    as digits or text), ``color_jitter`` (default 0.4 from 128 pixels up, off below), ``auto_augment``
    (e.g. ``rand-m9-mstd0.5``, RandAugment) and ``re_prob`` (random erasing).
    """

    has_test_split_note = "there is no test/ folder next to train/ and val/"

    def __init__(
        self,
        root: str,
        img_size: int = 224,
        batch_size: int = 64,
        num_workers: int = 4,
        seed: int = 0,
        predict_split: str = "val",
        scale: tuple[float, float] | None = None,
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        hflip: float = 0.5,
        color_jitter: float | None = None,
        auto_augment: str | None = None,
        re_prob: float = 0.0,
    ) -> None:
        super().__init__(img_size, batch_size, num_workers, seed, predict_split)
        if scale is not None and not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, got {scale}")
        if not 0 <= hflip <= 1 or not 0 <= re_prob <= 1:
            raise ValueError(f"hflip and re_prob are probabilities, got {hflip} and {re_prob}")
        # timm's ImageNet crop range (0.08, 1) keeps 8% of a 224-pixel image: 63 pixels a side; of a
        # 32-pixel image it keeps 9 pixels, which destroys small images. Small images keep most of theirs.
        self.augmentation = dict(
            scale=tuple(scale) if scale is not None else ((0.08, 1.0) if img_size >= 128 else (0.6, 1.0)),
            ratio=tuple(ratio),
            hflip=hflip,
            color_jitter=color_jitter if color_jitter is not None else (0.4 if img_size >= 128 else 0.0),
            auto_augment=auto_augment,
            re_prob=re_prob,
        )
        self.root = Path(root)
        missing = [str(self.root / split) for split in ("train", "val") if not (self.root / split).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"ImageFolder root {self.root} lacks {', '.join(missing)}: give --data.root a folder holding "
                "train/<class>/<images> and val/<class>/<images>"
            )
        self.classes = _class_names(self.root / "train")
        if not self.classes:
            raise FileNotFoundError(f"{self.root / 'train'} holds no class folders (train/<class>/<images>)")
        self.splits = ["train", "val"] + (["test"] if (self.root / "test").is_dir() else [])
        for split in self.splits:
            _check_class_folders(self.root / split)
            if unknown := sorted(set(_class_names(self.root / split)) - set(self.classes)):
                raise DataError(f"{split}/ has classes that train/ lacks: {unknown}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def _data_config(self) -> dict:
        model = self.transform_model
        if model is None and self.trainer is not None and self.trainer.lightning_module is not None:
            model = getattr(self.trainer.lightning_module, "model", None)
        config = resolve_data_config({}, model=model) if isinstance(model, torch.nn.Module) else {}
        return dict(config, input_size=(3, self.img_size, self.img_size))

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        config = self._data_config()
        class_index = {name: index for index, name in enumerate(self.classes)}
        train = datasets.ImageFolder(
            str(self.root / "train"),
            transform=create_transform(**config, **self.augmentation, is_training=True),
            loader=load_rgb_image,
        )
        evaluated = []
        for split in self.splits[1:]:
            dataset = datasets.ImageFolder(
                str(self.root / split), transform=create_transform(**config), loader=load_rgb_image
            )
            dataset.class_to_idx = class_index  # indices of train/'s classes, even where a split lacks some
            dataset.samples = [(path, class_index[Path(path).parent.name]) for path, _ in dataset.samples]
            dataset.targets = [target for _, target in dataset.samples]
            evaluated.append(dataset)
        self.train_set, self.val_set = train, evaluated[0]
        self.test_set = evaluated[1] if len(evaluated) > 1 else None
