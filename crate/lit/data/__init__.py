"""DataModules: embedded digits (the default), CIFAR-10/100, any ImageFolder (image by image with PIL, or
decoded once into tensor stores for small images)."""

from crate.data import BatchAugmentation

from .augmentation import Augmentation
from .base import ImageDataModule
from .cifar import CIFARDataModule
from .digits import DigitsDataModule
from .folder import ImageFolderDataModule
from .stored import StoredImageDataModule, StoredImageFolderDataModule

__all__ = [
    "Augmentation",
    "BatchAugmentation",
    "CIFARDataModule",
    "DigitsDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
    "StoredImageDataModule",
    "StoredImageFolderDataModule",
]
