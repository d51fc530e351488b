"""Datasets and loaders as plain torch (no Lightning): the embedded digits, resumable loading, tensor
stores of decoded images, their batched augmentation and mixing, and fixed-shape evaluation batches."""

from .batch_augmentation import BatchAugmentation
from .batch_mixing import BatchMixing
from .digits import DIGITS_MEAN, DIGITS_STD, TensorImageDataset, load_digits_tensors
from .multi_crop import MultiCrop
from .padding import PADDING_LABEL, pad_batch
from .resumable import ResumableDataLoader, ResumableSampler, SeededTransformDataset
from .tensor_store import SeededStoredImages, StoredImages, StoreError, TensorStore, as_batch, folder_store

__all__ = [
    "BatchAugmentation",
    "BatchMixing",
    "DIGITS_MEAN",
    "DIGITS_STD",
    "MultiCrop",
    "PADDING_LABEL",
    "ResumableDataLoader",
    "ResumableSampler",
    "SeededTransformDataset",
    "SeededStoredImages",
    "StoreError",
    "StoredImages",
    "TensorImageDataset",
    "TensorStore",
    "as_batch",
    "folder_store",
    "pad_batch",
    "load_digits_tensors",
]
