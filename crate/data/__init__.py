"""Datasets and loaders as plain torch (no Lightning): the embedded digits, resumable loading."""

from .digits import DIGITS_MEAN, DIGITS_STD, TensorImageDataset, load_digits_tensors
from .resumable import ResumableDataLoader, ResumableSampler, SeededTransformDataset

__all__ = [
    "DIGITS_MEAN",
    "DIGITS_STD",
    "ResumableDataLoader",
    "ResumableSampler",
    "SeededTransformDataset",
    "TensorImageDataset",
    "load_digits_tensors",
]
