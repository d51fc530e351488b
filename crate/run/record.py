"""Which program and module wrote a checkpoint: a classifier (``train.py``), masked pretraining or
self-distillation (``pretrain.py``)."""

from __future__ import annotations

from crate.models import Checkpoint

__all__ = ["PROGRAMS", "module_kind"]

# the command that trains each module kind, for messages
PROGRAMS = {
    "ImageClassifier": "train.py",
    "MaskedAutoencoder": "pretrain.py",
    "SelfDistillation": "pretrain.py --objective simdino",
}


def module_kind(held: Checkpoint) -> str | None:
    """The module class that wrote a Lightning checkpoint of the zoo: recorded, or for files written before
    the record, told by its hyper-parameters (only masked pretraining has ``mask_ratio``)."""
    if held.source != "lightning":
        return None
    recorded = held.lightning.get("module")
    if recorded:
        return str(recorded)
    return "MaskedAutoencoder" if "mask_ratio" in held.lightning.get("hyper_parameters", {}) else "ImageClassifier"
