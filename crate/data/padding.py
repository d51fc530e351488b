"""Evaluation batches of one shape: the last, smaller batch of a split padded to the full batch size.

A compiled model under CUDA graphs records one graph per input shape; a validation split whose size is not a
multiple of the batch size ends on a batch of another shape, which costs a second graph (and its warm-up)
every run. Padding that batch keeps one shape. The padding repeats the batch's first image and carries the
label :data:`PADDING_LABEL`, which the classifier's metrics leave out (``ignore_index``), so val/acc and
val/loss are those of the split's own images.
"""

from __future__ import annotations

import torch

__all__ = ["PADDING_LABEL", "pad_batch"]

PADDING_LABEL = -1


def pad_batch(images: torch.Tensor, labels: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` grown to ``size`` samples: copies of the first image labelled :data:`PADDING_LABEL`
    (a batch of ``size`` or more samples comes back as it is)."""
    missing = size - len(images)
    if missing <= 0:
        return images, labels
    filler = images[:1].expand(missing, *images.shape[1:])
    padding = torch.full((missing,), PADDING_LABEL, dtype=labels.dtype, device=labels.device)
    return torch.cat([images, filler]), torch.cat([labels, padding])
