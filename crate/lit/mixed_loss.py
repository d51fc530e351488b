"""The training loss of a batch mixed by :class:`crate.data.BatchMixing` (Mixup or CutMix with the batch reversed).

The loss of image ``i``, mixed with its partner ``B - 1 - i`` in the share ``lam`` (1 for an image left unmixed), is
``lam CE(logits_i, y_i) + (1 - lam) CE(logits_i, y_partner)`` with the run's label smoothing: the cross-entropy
against timm's mixed soft targets, as CE is linear in its target.
"""

from __future__ import annotations

import torch

__all__ = ["mixed_loss"]


def mixed_loss(
    logits: torch.Tensor, targets: torch.Tensor, lam: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean over the batch of ``lam CE(logits, y) + (1 - lam) CE(logits, y reversed)`` (see the module docstring)."""
    ce = torch.nn.functional.cross_entropy
    own = ce(logits, targets, reduction="none", label_smoothing=label_smoothing)
    other = ce(logits, targets.flip(0), reduction="none", label_smoothing=label_smoothing)
    return (lam * own + (1 - lam) * other).mean()
