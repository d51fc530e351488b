"""Datasets and loaders as plain torch (no Lightning): the embedded digits, resumable loading, tensor
stores of decoded images, their batched augmentation and mixing, fixed-shape evaluation batches, evaluation
splits shared among processes, and JPEG folders decoded on the device."""

from .batch_augmentation import BatchAugmentation
from .batch_mixing import BatchMixing
from .batches import MixedBatch, SeededBatch
from .device_decode import DeviceImageTransform, EncodedImages, SeededEncodedImages, crop_box, decode_batch
from .digits import DIGITS_MEAN, DIGITS_STD, TensorImageDataset, load_digits_tensors
from .multi_crop import MultiCrop
from .padding import PADDING_LABEL, pad_batch
from .process_shares import EvaluationSampler, EvaluationShares, rank_and_world, share_positions
from .resumable import ResumableDataLoader, ResumableSampler, SeededTransformDataset
from .tensor_store import SeededStoredImages, StoredImages, StoreError, TensorStore, as_batch, folder_store

__all__ = [
    "BatchAugmentation",
    "BatchMixing",
    "MixedBatch",
    "SeededBatch",
    "DIGITS_MEAN",
    "DeviceImageTransform",
    "EncodedImages",
    "DIGITS_STD",
    "EvaluationSampler",
    "EvaluationShares",
    "MultiCrop",
    "PADDING_LABEL",
    "ResumableDataLoader",
    "ResumableSampler",
    "SeededEncodedImages",
    "SeededTransformDataset",
    "SeededStoredImages",
    "StoreError",
    "StoredImages",
    "TensorImageDataset",
    "TensorStore",
    "as_batch",
    "crop_box",
    "decode_batch",
    "folder_store",
    "pad_batch",
    "rank_and_world",
    "share_positions",
    "load_digits_tensors",
]
