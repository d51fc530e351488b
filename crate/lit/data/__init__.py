"""DataModules: embedded digits (the default), CIFAR-10/100, and any ImageFolder."""

from .augmentation import Augmentation
from .base import ImageDataModule
from .cifar import CIFARDataModule
from .digits import DigitsDataModule
from .folder import ImageFolderDataModule

__all__ = ["Augmentation", "CIFARDataModule", "DigitsDataModule", "ImageDataModule", "ImageFolderDataModule"]
