"""The fixed sample of a dataset that measurements read (probe batches, lenses, linear probes)."""

from __future__ import annotations

import torch

__all__ = ["SAMPLE_SEED", "sample_order"]

SAMPLE_SEED = 0


def sample_order(size: int, limit: int | None, seed: int = SAMPLE_SEED) -> list[int]:
    """At most ``limit`` indices of a dataset of ``size`` items, in a seeded random order. An image folder lists
    its images class by class, so its first images are one class (CIFAR-10's first 2,000 validation images
    cover 4 of its 10 classes); any prefix of a random order mixes the classes."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist()
    return order if limit is None else order[:limit]
