"""Lightning: the classification module, DataModules and the CLI of ``train.py``."""

from .cli import CrateCLI, cli_main
from .data import CIFARDataModule, DigitsDataModule, ImageDataModule, ImageFolderDataModule
from .module import ImageClassifier

__all__ = [
    "CIFARDataModule",
    "CrateCLI",
    "DigitsDataModule",
    "ImageClassifier",
    "ImageDataModule",
    "ImageFolderDataModule",
    "cli_main",
]
