"""Top-1 accuracy accumulated in a handful of tensor operations per batch, for training steps."""

from __future__ import annotations

from typing import Any

import torch

from .mean_over_samples import MeanOverSamples

__all__ = ["Top1Accuracy"]


class Top1Accuracy(MeanOverSamples):
    r"""The share of samples whose highest logit is their target's class.

    .. math::
        \text{acc} = \frac{1}{N} \sum_{i=1}^{N} [\arg\max_c \text{logits}_{ic} = y_i]

    The same value as torchmetrics' ``MulticlassAccuracy(num_classes, average="micro")``, which validation
    uses; this one keeps two counts, so an update is six tensor operations and reads nothing back to the
    host (``MulticlassAccuracy`` computes four confusion statistics, about 18 operations an update: on a GPU
    each is a kernel launch, and a training step of a small model is launch-bound). It does not check its
    arguments, for the same reason: use it where the inputs are the model's own logits and labels.

    Example:
        >>> import torch
        >>> from crate.metrics import Top1Accuracy
        >>> metric = Top1Accuracy()
        >>> metric.update(torch.tensor([[2.0, 0.1], [0.3, 0.9], [1.0, 0.0]]), torch.tensor([0, 1, 1]))
        >>> metric.compute()
        tensor(0.6667, dtype=torch.float64)
    """

    higher_is_better = True
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """Count the samples of a batch: ``logits`` (B, classes), ``targets`` (B,) class indices."""
        self._accumulate(logits.argmax(dim=-1) == targets)
