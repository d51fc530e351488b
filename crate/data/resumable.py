"""Data loading that can resume mid-epoch exactly: the order and the augmentation of every sample are
functions of (seed, epoch, position), not of a global random state, and the loader can skip the batches
an interrupted run already consumed.

- :class:`ResumableSampler` yields ``(index, sample_seed)`` in a permutation drawn from ``seed + epoch``,
  this process's share of it under ``torch.distributed`` (every ``world_size``-th position from ``rank``);
- :class:`SeededTransformDataset` applies a random transform under ``sample_seed`` (torch's, Python's and
  NumPy's generators: timm's crops and RandAugment draw from Python's ``random``), leaving the global
  random states untouched;
- :class:`ResumableDataLoader` reports ``{"epoch", "batches"}`` through ``state_dict`` (Lightning saves it
  in checkpoints) and skips those batches after ``load_state_dict``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, SequentialSampler

from .process_shares import rank_and_world

__all__ = ["OrderedResumableSampler", "ResumableDataLoader", "ResumableSampler", "SeededTransformDataset"]


class ResumableSampler(DistributedSampler):
    """Shuffled (or ordered) indices with a per-sample seed; deterministic given (seed, epoch).

    It shares the data among processes itself, like :class:`DistributedSampler` (which it subclasses so
    that Lightning leaves it in place instead of wrapping it), reading rank and world size when iterated.
    """

    def __init__(self, num_samples: int, seed: int = 0, shuffle: bool = True) -> None:  # noqa: D107
        # DistributedSampler.__init__ needs a process group at construction; this sampler asks for one
        # only when it is iterated, so the parent's constructor is deliberately not called.
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self._skip = 0
        self._skip_epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_next(self, samples: int, epoch: int) -> None:
        """Leave out the first ``samples`` of this process's share in the next pass, if it is of ``epoch``."""
        self._skip, self._skip_epoch = samples, epoch

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.num_samples)
        rank, world = rank_and_world()
        total = -(-self.num_samples // world) * world  # padded so every process gets as many samples
        order = torch.cat([order, order[: total - len(order)]])
        start = self._skip if self._skip_epoch == self.epoch else 0
        self._skip = 0
        base = (self.seed * 1_000_003 + self.epoch) * 1_000_003
        # this process takes every world-th position from its rank; a sample's seed is its position in the
        # whole epoch, so N processes with batch B see the very samples one process with batch N*B sees
        order = order.tolist()  # one conversion, not a read per sample
        for position in range(rank + start * world, total, world):
            yield order[position], base + position

    def __len__(self) -> int:
        rank, world = rank_and_world()
        return -(-self.num_samples // world)


@contextmanager
def preserved_random_state() -> Iterator[None]:
    """torch's (CPU), Python's and NumPy's global random states restored on exit."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def reseed(seed: int) -> None:
    """Seed torch's CPU, Python's and NumPy's global generators (torch.manual_seed would also seed every
    accelerator, at 100 times the cost)."""
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


class OrderedResumableSampler(ResumableSampler, SequentialSampler):
    """A :class:`ResumableSampler` in the data's order, which Lightning's ``overfit_batches`` takes as the
    sequential sampler it asks for (it would otherwise put a plain one, which yields no sample seeds, in its
    place)."""

    def __init__(self, num_samples: int, seed: int = 0) -> None:  # noqa: D107
        super().__init__(num_samples, seed=seed, shuffle=False)


class SeededTransformDataset(Dataset):
    """``base[index]`` and then ``transform``, both under the sample's own seed (global random states
    restored after each batch), so random transforms inside ``base`` (torchvision datasets) are
    reproducible too. DataLoaders fetch a batch at once through ``__getitems__``."""

    def __init__(self, base: Dataset, transform: Callable[[Any], Any] | None) -> None:
        self.base = base
        self.transform = transform

    def __len__(self) -> int:
        return len(self.base)

    def _sample(self, index: int, sample_seed: int) -> Any:
        reseed(sample_seed)
        image, label = self.base[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[Any]:
        with preserved_random_state():
            return [self._sample(index, sample_seed) for index, sample_seed in keys]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]


class ResumableDataLoader(DataLoader):
    """A DataLoader over a :class:`ResumableSampler` that can be saved and restored mid-epoch.

    ``batches_done`` tells how many batches of the current epoch the training loop has consumed (loaders
    prefetch, so the loader's own count runs ahead of the loop's); ``epoch_batches`` how many it takes from
    an epoch (default: all of them; Lightning's ``limit_train_batches`` takes fewer).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        batches_done: Callable[[], int] | None = None,
        epoch_batches: Callable[[], float] | None = None,
        **kwargs: Any,
    ) -> None:
        self.resumable_sampler = (
            ResumableSampler(len(dataset), seed=seed) if shuffle else OrderedResumableSampler(len(dataset), seed=seed)
        )
        # its own generator, so that making an iterator does not draw from the global random state
        kwargs.setdefault("generator", torch.Generator().manual_seed(seed))
        super().__init__(dataset, batch_size=batch_size, sampler=self.resumable_sampler, **kwargs)
        self._batches_done = batches_done
        self._epoch_batches = epoch_batches or (lambda: len(self))

    def state_dict(self) -> dict[str, int]:
        """Where the next batch comes from: ``{"epoch", "batches"}`` (batches of that epoch already done)."""
        done = int(self._batches_done()) if self._batches_done is not None else 0
        epoch = self.resumable_sampler.epoch
        if done >= self._epoch_batches():  # a finished epoch: the next batch is the first of the next one
            return {"epoch": epoch + 1, "batches": 0}
        return {"epoch": epoch, "batches": done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from ``state``. The epoch is set here, not left to the trainer: Lightning makes the first
        iterator of a resumed run before it sets the sampler's epoch, and a loader with worker processes
        draws its first indices as soon as the iterator exists."""
        epoch, done = int(state["epoch"]), int(state["batches"])
        if done >= len(self):  # written at the end of an epoch (by an older state_dict)
            epoch, done = epoch + 1, 0
        self.resumable_sampler.set_epoch(epoch)
        self.resumable_sampler.skip_next(done * int(self.batch_size), epoch)
