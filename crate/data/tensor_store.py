"""A dataset decoded once into memory: every image of a split as one uint8 tensor ``(N, C, H, W)``.

Small images (CIFAR's 32 pixels) cost more to decode and transform one by one with PIL than a small model
costs to train on them. A :class:`TensorStore` holds a split already decoded; an image folder's store is
written to a cache file (safetensors: the images, the labels, and in its metadata the class names and a
fingerprint of the source files) and read back by every later run, process and DDP rank. The file is
rebuilt when the folder changes (a file added, removed, resized or touched), written under a file lock
(``filelock``, the lock huggingface_hub and torch already use) so that ranks starting together decode the
folder once, and written to a temporary name first so that an interrupted build never leaves a partial
store behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision.transforms.v2.functional as TF
from filelock import FileLock
from PIL import Image
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch.utils.data import Dataset

from .batch_augmentation import normalize
from .batches import SeededBatch

__all__ = [
    "MixedSizes",
    "SeededStoredImages",
    "StoreError",
    "StoredImages",
    "TensorStore",
    "as_batch",
    "folder_fingerprint",
    "folder_store",
]

STORE_FORMAT = "crate-zoo tensor store 1"


class StoreError(ValueError):
    """A store file, or a source of one, that cannot be used, with what to do about it."""


class MixedSizes(StoreError):
    """A folder of images of more than one size, which one store cannot hold; what to do depends on its reader."""


@dataclass(frozen=True)
class TensorStore:
    """Images ``(N, C, H, W)`` uint8, labels ``(N,)`` int64 (indices into ``classes``)."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError(f"images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.shape != (len(self.images),):
            raise ValueError(f"{len(self.images)} images but labels of shape {tuple(self.labels.shape)}")

    def __len__(self) -> int:
        return len(self.images)

    @classmethod
    def from_arrays(cls, images_nhwc: np.ndarray, labels: Sequence[int], classes: Sequence[str]) -> TensorStore:
        """From arrays as torchvision's CIFAR holds them: ``(N, H, W, C)`` uint8."""
        images = torch.from_numpy(np.ascontiguousarray(images_nhwc)).permute(0, 3, 1, 2).contiguous()
        return cls(images, torch.as_tensor(np.asarray(labels), dtype=torch.int64), tuple(classes))

    def save(self, path: Path, fingerprint: str) -> None:
        """Write atomically: a temporary file beside ``path``, then renamed over it."""
        metadata = {"format": STORE_FORMAT, "classes": json.dumps(list(self.classes)), "fingerprint": fingerprint}
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        save_file({"images": self.images, "labels": self.labels}, str(partial), metadata=metadata)
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> tuple[TensorStore, str]:
        """The store in ``path`` and the fingerprint of the source it was built from."""
        try:
            with safe_open(str(path), framework="pt") as handle:  # one read: the tensors and the metadata
                metadata = handle.metadata() or {}
                tensors = {name: handle.get_tensor(name) for name in ("images", "labels")}
            if metadata.get("format") != STORE_FORMAT:
                raise StoreError(f"its format is {metadata.get('format')!r}, not {STORE_FORMAT!r}")
            store = cls(tensors["images"], tensors["labels"], tuple(json.loads(metadata["classes"])))
        except (SafetensorError, OSError, KeyError, ValueError) as err:
            raise StoreError(
                f"tensor store {path} is unreadable ({err}); delete it and it is rebuilt from its source"
            ) from err
        return store, metadata["fingerprint"]


def folder_fingerprint(files: Sequence[Path], root: Path) -> str:
    """What a folder's store depends on: every file's path under ``root``, size and modification time."""
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(f"{file.relative_to(root).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _decode(samples: Sequence[tuple[Path, int]], read: Callable[[str], Image.Image]) -> torch.Tensor:
    first = np.asarray(read(str(samples[0][0])))
    images = np.empty((len(samples), *first.shape), dtype=np.uint8)
    for i, (path, _) in enumerate(samples):
        array = first if i == 0 else np.asarray(read(str(path)))
        if array.shape != first.shape:
            raise MixedSizes(
                f"{path} is {array.shape[1]}x{array.shape[0]} pixels but {samples[0][0]} is "
                f"{first.shape[1]}x{first.shape[0]}: a tensor store holds images of one size"
            )
        images[i] = array
    if images.ndim == 3:  # one channel
        images = images[..., None]
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def folder_store(
    samples: Sequence[tuple[Path, int]],
    classes: Sequence[str],
    root: Path,
    cache: Path,
    read: Callable[[str], Image.Image],
    log: Callable[[str], None] = print,
) -> TensorStore:
    """The store of ``samples`` (image files under ``root`` with their labels), read from ``cache`` when it
    was built from the same files and classes by a reader of the same ``revision`` (an attribute of ``read``, where
    it has one), otherwise decoded with ``read`` and written there."""
    if not samples:
        raise StoreError(f"no images under {root}")
    fingerprint = folder_fingerprint([path for path, _ in samples], root)
    reader = getattr(read, "revision", "")  # how the reader turns files into pixels: a new way rebuilds the store
    fingerprint = hashlib.sha256(f"{fingerprint}\0{json.dumps(list(classes))}\0{reader}".encode()).hexdigest()
    created = not cache.parent.exists()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(cache) + ".lock")
    except OSError as err:
        raise StoreError(f"cannot write the tensor store beside {cache} ({err}); set --data.store_dir") from err
    try:
        return _cached_or_built(samples, classes, root, cache, read, log, fingerprint, lock)
    except BaseException:
        if created:  # a refused folder (an unreadable image, say) keeps no empty store folder in the user's data
            Path(str(cache) + ".lock").unlink(missing_ok=True)
            if cache.parent.is_dir() and not any(cache.parent.iterdir()):
                cache.parent.rmdir()
        raise


def _cached_or_built(
    samples: Sequence[tuple[Path, int]],
    classes: Sequence[str],
    root: Path,
    cache: Path,
    read: Callable[[str], Image.Image],
    log: Callable[[str], None],
    fingerprint: str,
    lock: FileLock,
) -> TensorStore:
    with lock:
        if cache.is_file():
            store, built_from = TensorStore.load(cache)
            if built_from == fingerprint:
                return store
            log(f"{root} (or how its images are read) changed since its tensor store was built; rebuilding {cache}")
        else:
            log(f"decoding {len(samples)} images of {root} once into {cache}")
        store = TensorStore(
            _decode(samples, read), torch.tensor([label for _, label in samples], dtype=torch.int64), tuple(classes)
        )
        try:
            store.save(cache, fingerprint)
        except OSError as err:
            raise StoreError(f"cannot write the tensor store {cache} ({err}); set --data.store_dir") from err
    return store


class StoredImages(Dataset):
    """A store in its evaluation form: ``(image, label)`` with the image resized to ``size`` (when it
    differs) and normalised; a DataLoader's batch is read with one indexing of the store. ``samples``: the
    files the store was decoded from, in its order, with their labels (as torchvision's ``ImageFolder.samples``:
    what names each prediction's file)."""

    def __init__(
        self,
        store: TensorStore,
        mean: Sequence[float],
        std: Sequence[float],
        size: int,
        samples: Sequence[tuple[Path, int]] = (),
    ) -> None:
        if samples and len(samples) != len(store):
            raise ValueError(f"{len(samples)} files for a store of {len(store)} images")
        self.store = store
        self.samples = list(samples)
        self.classes = list(store.classes)
        self.targets = store.labels.tolist()
        self.mean, self.std, self.size = tuple(mean), tuple(std), size

    def __len__(self) -> int:
        return len(self.store)

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        index = torch.as_tensor(indices, dtype=torch.int64)
        images = self.store.images[index]
        if tuple(images.shape[-2:]) != (self.size, self.size):
            images = TF.resize(images, [self.size, self.size], antialias=True)
        return list(zip(normalize(images, self.mean, self.std), self.store.labels[index], strict=True))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.__getitems__([index])[0]


class SeededStoredImages(Dataset):
    """A store in its training form for the resumable loader: keys are ``(index, sample_seed)`` and a batch
    is a :class:`SeededBatch` (uint8 images, labels, seeds), augmented later as a whole
    (:class:`BatchAugmentation`), on the device the batch is moved to. Use with ``collate_fn=as_batch``."""

    def __init__(self, store: TensorStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitems__(self, keys: list[tuple[int, int]]) -> SeededBatch:
        index = torch.tensor([key[0] for key in keys], dtype=torch.int64)
        seeds = torch.tensor([key[1] for key in keys], dtype=torch.int64)
        return SeededBatch(self.store.images[index], self.store.labels[index], seeds)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images, labels, seeds = self.__getitems__([key])
        return images[0], labels[0], seeds[0]


def as_batch(batch: Any) -> Any:
    """The collate function of :class:`SeededStoredImages`: its ``__getitems__`` already made the batch."""
    return batch
