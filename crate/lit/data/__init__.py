"""DataModules: embedded digits (the default), CIFAR-10/100, and any ImageFolder."""

from .base import ImageDataModule
from .cifar import CIFARDataModule
from .digits import DigitsDataModule
from .folder import ImageFolderDataModule

__all__ = ["CIFARDataModule", "DigitsDataModule", "ImageDataModule", "ImageFolderDataModule"]
