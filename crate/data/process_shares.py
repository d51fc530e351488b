"""How the processes of a distributed run share an evaluation split so that every image counts once.

torch's ``DistributedSampler`` (which Lightning puts under a plain loader) evens out the processes' shares by
repeating the first images of the split, so a split whose size is not a multiple of the number of processes
is measured with some images twice: validation accuracy on 2 processes differs from 1 process's. Every process
must still run as many batches (a sharded model gathers its weights in each forward, on every process at
once), so the shares stay even here too, but the repeated images carry the label :data:`PADDING_LABEL`, which
the metrics leave out:

- :class:`EvaluationSampler` gives process ``r`` of ``W`` the positions ``r, r + W, ...`` of the split rounded
  up to a multiple of ``W``; a position past the split's end is a padding sample;
- :class:`EvaluationShares` reads the split at those positions, a padding position as a copy of an image of
  the split labelled :data:`PADDING_LABEL`.

On one process the two read the split in order, as a plain loader does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler, SequentialSampler

from .padding import PADDING_LABEL

__all__ = ["EvaluationSampler", "EvaluationShares", "rank_and_world", "share_positions"]


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (0 and 1 outside ``torch.distributed``)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def share_positions(start: int, count: int) -> list[int]:
    """The split positions of this process's evaluation samples ``start`` to ``start + count - 1``, counted in
    the order :class:`EvaluationSampler` gives them (positions from the split's size on are padding)."""
    rank, world = rank_and_world()
    return list(range(rank + start * world, rank + (start + count) * world, world))


class EvaluationSampler(DistributedSampler, SequentialSampler):
    """This process's even share of the positions of a split of ``size`` samples, in order; positions from
    ``size`` on are padding (read by :class:`EvaluationShares`).

    A :class:`DistributedSampler` so that Lightning leaves it in place instead of putting its own under the
    loader, and a :class:`SequentialSampler` so that its ``overfit_batches`` does too (it replaces a sampler it
    cannot tell is in order); it reads rank and world size when iterated, as the process group exists only then.
    """

    def __init__(self, size: int) -> None:  # noqa: D107
        # DistributedSampler.__init__ needs a process group at construction; this sampler asks for one only
        # when it is iterated, so the parent's constructor is deliberately not called.
        self.size = size

    def __iter__(self) -> Iterator[int]:
        return iter(share_positions(0, len(self)))

    def __len__(self) -> int:
        return -(-self.size // rank_and_world()[1])

    def set_epoch(self, epoch: int) -> None:
        """Evaluation reads one order in every epoch."""


class EvaluationShares(Dataset):
    """``split`` read at :class:`EvaluationSampler`'s positions: position ``i < len(split)`` is ``split[i]``, a
    later one a copy of ``split[i - len(split)]`` with its label (an item's second entry) set to
    :data:`PADDING_LABEL`. Batched reads go through the split's own ``__getitems__`` where it has one."""

    def __init__(self, split: Dataset) -> None:
        self.split = split
        self.size = len(split)

    def __len__(self) -> int:
        return self.size

    def __getitems__(self, positions: list[int]) -> list[Any]:
        indices = [position % self.size for position in positions]
        getitems = getattr(self.split, "__getitems__", None)
        items = list(getitems(indices)) if getitems is not None else [self.split[i] for i in indices]
        return [
            _as_padding(item) if position >= self.size else item
            for position, item in zip(positions, items, strict=True)
        ]

    def __getitem__(self, position: int) -> Any:
        return self.__getitems__([position])[0]


def _as_padding(item: Any) -> Any:
    """An ``(image, label, ...)`` item with :data:`PADDING_LABEL` for its label, of the label's own type."""
    label = item[1]
    padding = torch.full_like(label, PADDING_LABEL) if isinstance(label, torch.Tensor) else PADDING_LABEL
    return (item[0], padding, *item[2:]) if isinstance(item, tuple) else [item[0], padding, *item[2:]]
