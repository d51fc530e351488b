"""The batch types the data and the training step agree on, so that neither reads a batch by its length."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["MixedBatch", "SeededBatch"]


class SeededBatch(NamedTuple):
    """A training batch as a tensor store's loader gives it: uint8 images, labels and each image's seed (its
    augmentation and mixing draws are functions of the seed)."""

    images: torch.Tensor
    labels: torch.Tensor
    seeds: torch.Tensor


class MixedBatch(NamedTuple):
    """A batch mixed by :class:`crate.data.BatchMixing`: each image mixed with the reversed batch's in the share
    ``lam`` of its own (1 where it was left unmixed); its loss weighs the two labels by ``lam``."""

    images: torch.Tensor
    labels: torch.Tensor
    lam: torch.Tensor
