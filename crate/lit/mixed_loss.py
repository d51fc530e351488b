"""The training loss of a mixed batch: Mixup or CutMix, by :class:`crate.data.BatchMixing` (the batch reversed) or by
timm's ``Mixup`` (soft targets), with the run's class weights where it has them.

The loss of image ``i``, mixed with its partner ``B - 1 - i`` in the share ``lam`` (1 for an image left unmixed), is
``lam CE(logits_i, y_i) + (1 - lam) CE(logits_i, y_partner)`` with the run's label smoothing: the cross-entropy
against timm's mixed soft targets, as CE is linear in its target.

With class weights ``w``, each term is weighed by its class, and the batch's sum is divided by the sum of the weights
its targets carry, ``sum_i (lam_i w[y_i] + (1 - lam_i) w[y_partner])``: the weighted mean that
``torch.nn.functional.cross_entropy(..., weight=w)`` takes of an unmixed batch, which it equals where ``lam`` is 1.
Soft targets ``t`` are weighed alike: ``sum_ik w_k t_ik CE_ik / sum_ik w_k t_ik``.
"""

from __future__ import annotations

import torch

__all__ = ["mixed_loss", "weighted_soft_target_loss"]


def mixed_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    lam: torch.Tensor,
    label_smoothing: float = 0.0,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """The (class-weighted) mean over the batch of ``lam CE(logits, y) + (1 - lam) CE(logits, y reversed)`` (see
    the module docstring)."""
    ce = torch.nn.functional.cross_entropy
    partners = targets.flip(0)
    own = ce(logits, targets, weight=weight, reduction="none", label_smoothing=label_smoothing)
    other = ce(logits, partners, weight=weight, reduction="none", label_smoothing=label_smoothing)
    total = lam * own + (1 - lam) * other
    if weight is None:
        return total.mean()
    return total.sum() / (lam * weight[targets] + (1 - lam) * weight[partners]).sum()


def weighted_soft_target_loss(logits: torch.Tensor, soft_targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against soft targets (timm's ``SoftTargetCrossEntropy``), class-weighted as the module docstring
    says."""
    weighted = soft_targets * weight
    return -(weighted * torch.nn.functional.log_softmax(logits, dim=-1)).sum() / weighted.sum()
