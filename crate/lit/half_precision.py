"""A warning before a fit whose weights and optimizer state are float16 with no loss scaling."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["warn_if_float16_weights"]


def warn_if_float16_weights(trainer: L.Trainer) -> None:
    """Warn when a fit trains in ``16-true``: the weights, their gradients and AdamW's moments are float16, and
    nothing scales the loss. AdamW's second moment, a squared gradient (1e-3 squared is 1e-6, times 1 - beta2),
    falls below float16's smallest number, and its update divides by it: the zoo's recipes then do not learn
    (on the digits the accuracy stayed at chance). The run is not refused, the precisions that train are named."""
    if str(trainer.precision) == "16-true":
        rank_zero_warn(
            "--trainer.precision 16-true keeps the weights, gradients and AdamW's moments in float16 with no loss "
            "scaling: squared gradients fall below float16's range, and the zoo's recipes do not learn in it; train "
            "with bf16-true, bf16-mixed or 16-mixed (loss-scaled)"
        )
