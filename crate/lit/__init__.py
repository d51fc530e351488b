"""Lightning: the classification module, DataModules and the CLI of ``train.py``."""

from .cli import CrateCLI, cli_main
from .data import (
    Augmentation,
    BatchAugmentation,
    CIFARDataModule,
    DigitsDataModule,
    ImageDataModule,
    ImageFolderDataModule,
    StoredImageFolderDataModule,
)
from .masked_pretraining import MaskedAutoencoder
from .module import ImageClassifier
from .rate_monitor import CodingRateMonitor
from .self_distillation import SelfDistillation

__all__ = [
    "Augmentation",
    "BatchAugmentation",
    "CIFARDataModule",
    "CodingRateMonitor",
    "CrateCLI",
    "DigitsDataModule",
    "ImageClassifier",
    "ImageDataModule",
    "ImageFolderDataModule",
    "MaskedAutoencoder",
    "SelfDistillation",
    "StoredImageFolderDataModule",
    "cli_main",
]
