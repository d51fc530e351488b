"""When two accuracies measured on the same number of images can be told apart: their difference beyond two
binomial standard errors of a difference of two accuracies, 2 sqrt(2 p (1 - p) / n) at their mean p."""

from __future__ import annotations

import math

__all__ = ["accuracy_noise", "beyond_noise"]


def accuracy_noise(first: float, second: float, images: int) -> float:
    """Two standard errors of the difference of two accuracies, each read on ``images`` images."""
    p = (first + second) / 2
    return 2 * math.sqrt(2 * p * (1 - p) / images)


def beyond_noise(first: float, second: float, images: int) -> bool:
    """Whether ``first`` and ``second`` lie further apart than :func:`accuracy_noise`."""
    return abs(first - second) > accuracy_noise(first, second, images)
