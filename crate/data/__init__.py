"""Datasets as plain tensors (no Lightning): the embedded digits."""

from .digits import DIGITS_MEAN, DIGITS_STD, TensorImageDataset, load_digits_tensors

__all__ = ["DIGITS_MEAN", "DIGITS_STD", "TensorImageDataset", "load_digits_tensors"]
