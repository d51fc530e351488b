"""Any folder of images in the ImageNet layout: ``root/train/<class>/*`` and ``root/val/<class>/*``."""

from __future__ import annotations

from pathlib import Path

import torch
from timm.data import create_transform, resolve_data_config
from torchvision import datasets

from .base import ImageDataModule

__all__ = ["ImageFolderDataModule"]


def _class_names(split: Path) -> list[str]:
    return sorted(entry.name for entry in split.iterdir() if entry.is_dir())


class ImageFolderDataModule(ImageDataModule):
    """Images from class folders, with timm's transforms resolved from the model's pretrained cfg.

    Grayscale (and palette, RGBA) images are converted to RGB on load, so the model sees 3 channels.
    Mean, std, interpolation and crop ratio come from the model being trained when the DataModule is
    attached to a trainer, otherwise from ImageNet defaults; the size is always ``img_size``.
    """

    def __init__(
        self,
        root: str,
        img_size: int = 224,
        batch_size: int = 64,
        num_workers: int = 4,
        seed: int = 0,
    ) -> None:
        super().__init__(img_size, batch_size, num_workers, seed)
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
        val_classes = _class_names(self.root / "val")
        if unknown := sorted(set(val_classes) - set(self.classes)):
            raise ValueError(f"val/ has classes that train/ lacks: {unknown}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def _data_config(self) -> dict:
        model = None
        if self.trainer is not None and self.trainer.lightning_module is not None:
            model = getattr(self.trainer.lightning_module, "model", None)
        config = resolve_data_config({}, model=model) if isinstance(model, torch.nn.Module) else {}
        return dict(config, input_size=(3, self.img_size, self.img_size))

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        config = self._data_config()
        class_index = {name: index for index, name in enumerate(self.classes)}
        train = datasets.ImageFolder(str(self.root / "train"), transform=create_transform(**config, is_training=True))
        val = datasets.ImageFolder(str(self.root / "val"), transform=create_transform(**config))
        val.class_to_idx = class_index
        val.samples = [(path, class_index[Path(path).parent.name]) for path, _ in val.samples]
        val.targets = [target for _, target in val.samples]
        self.train_set, self.val_set = train, val
