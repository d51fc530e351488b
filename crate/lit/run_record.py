"""What a checkpoint of ``train.py`` / ``pretrain.py`` records of its run besides the weights: the kind of
module that wrote it, and the data section of the run's config (so that the weights are later evaluated on
exactly the data the run held out: ``crate.export``, ``crate.interpret``)."""

from __future__ import annotations

from typing import Any

from crate.models import Checkpoint
from crate.models.checkpoint import DATA_CONFIG_KEY, DATA_IDENTITY_KEY, MODULE_KEY

__all__ = ["RunRecord", "module_kind"]

# the command that trains each module kind, for messages
PROGRAMS = {
    "ImageClassifier": "train.py",
    "MaskedAutoencoder": "pretrain.py",
    "SelfDistillation": "pretrain.py --objective simdino",
}


class RunRecord:
    """Mixin of the zoo's LightningModules: every checkpoint they write records the module's class name and,
    where the DataModule has one (``train.py`` sets it from the config), the run's ``data_config``
    (``{"class_path": ..., "init_args": {...}}``, plain YAML types) and the data's identity (its source, folder,
    classes, split sizes, image size and channels), which a resume is checked against."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[MODULE_KEY] = type(self).__name__
        datamodule = getattr(getattr(self, "_trainer", None), "datamodule", None)
        config = getattr(datamodule, "data_config", None)
        if config is not None:
            checkpoint[DATA_CONFIG_KEY] = config
        if hasattr(datamodule, "data_identity"):
            checkpoint[DATA_IDENTITY_KEY] = datamodule.data_identity()


def module_kind(held: Checkpoint) -> str | None:
    """The module class that wrote a Lightning checkpoint of the zoo: recorded, or for files written before
    the record, told by its hyper-parameters (only masked pretraining has ``mask_ratio``)."""
    if held.source != "lightning":
        return None
    recorded = held.lightning.get("module")
    if recorded:
        return str(recorded)
    return "MaskedAutoencoder" if "mask_ratio" in held.lightning.get("hyper_parameters", {}) else "ImageClassifier"
