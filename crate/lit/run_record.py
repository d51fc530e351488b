"""What a checkpoint of ``train.py`` / ``pretrain.py`` records of its run besides the weights: the kind of
module that wrote it, and the data section of the run's config (so that the weights are later evaluated on
exactly the data the run held out: ``crate.export``, ``crate.interpret``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L

from crate.models.checkpoint import EVAL_TRANSFORM_KEY, LABEL_NAMES_KEY, settings_built_from_file
from crate.run.record import (
    BATCHES_PER_EPOCH_KEY,
    DATA_CONFIG_KEY,
    DATA_IDENTITY_KEY,
    MODULE_KEY,
    PROGRAMS,
    START_WEIGHTS_KEY,
    UPDATE_BATCH_KEY,
    module_kind,
)

__all__ = ["PROGRAMS", "RunRecord", "module_kind", "update_batch"]


def update_batch(trainer: L.Trainer, datamodule: Any) -> dict[str, int]:
    """The images of an optimizer step as the run's checkpoints record them and a resume compares them: the data's
    batch size per process (0 where the data has none), the number of processes and the batches accumulated."""
    batch_size = getattr(datamodule, "batch_size", None)
    return {
        "batch_size": batch_size if isinstance(batch_size, int) else 0,
        "processes": int(trainer.world_size),
        "accumulate": int(trainer.accumulate_grad_batches),
    }


class RunRecord:
    """Mixin of the zoo's LightningModules: every checkpoint they write records the module's class name and,
    where the DataModule has one (``train.py`` sets it from the config), the run's ``data_config``
    (``{"class_path": ..., "init_args": {...}}``, plain YAML types) and the data's identity (its source, folder,
    classes, split sizes, image size and channels), which a resume is checked against as it is against the images
    of an optimizer step (batch size, processes, accumulated batches), the class names in label order (what
    ``timm.create_model`` gives the model as ``pretrained_cfg['label_names']``) and the data's evaluation
    transform (mean, std, interpolation, crop: what ``resolve_data_config`` then gives). A module whose weights
    started from a file sets ``start_weights`` (:func:`crate.run.record.start_weights`): its checkpoints record that
    file's path and sha256, and a resumed run keeps the record of the run's start."""

    start_weights: dict[str, str] | None = None

    def record_settings_from_file(self, model_name: str, kwargs: Mapping[str, Any]) -> None:
        """Add to the hyper-parameters' ``model_kwargs`` the build settings a model built as
        ``timm.create_model(model_name, **kwargs)`` took from the file it read (``lambd``, ``num_heads``...:
        :func:`crate.models.settings_built_from_file`), so that the run's own checkpoints and exports build the
        model it trained, not the model name's."""
        taken = settings_built_from_file(model_name, kwargs)
        if taken:
            self.hparams["model_kwargs"] = {**(self.hparams.get("model_kwargs") or {}), **taken}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[MODULE_KEY] = type(self).__name__
        if self.start_weights is not None:
            checkpoint[START_WEIGHTS_KEY] = self.start_weights
        trainer = getattr(self, "_trainer", None)
        datamodule = getattr(trainer, "datamodule", None)
        if trainer is not None and (step := update_batch(trainer, datamodule))["batch_size"]:
            checkpoint[UPDATE_BATCH_KEY] = step  # the images of an optimizer step, which a resume must keep
        if trainer is not None and isinstance(trainer.num_training_batches, int):
            checkpoint[BATCHES_PER_EPOCH_KEY] = trainer.num_training_batches  # tells an epoch cut short
        config = getattr(datamodule, "data_config", None)
        if config is not None:
            checkpoint[DATA_CONFIG_KEY] = config
        if hasattr(datamodule, "data_identity"):
            identity = datamodule.data_identity()
            checkpoint[DATA_IDENTITY_KEY] = identity
            if identity.get("classes"):  # the class names in label order, under the key exports use too
                checkpoint[LABEL_NAMES_KEY] = list(identity["classes"])
        if hasattr(datamodule, "eval_transform"):  # how its images become the tensors validation reads
            checkpoint[EVAL_TRANSFORM_KEY] = datamodule.eval_transform()

    def keep_start_weights(self, checkpoint: dict[str, Any]) -> None:
        """On a resume: the start file's record is the checkpoint's (the file at that path may have been replaced
        since the run started); none where the checkpoint predates the record."""
        if self.start_weights is not None:
            recorded = checkpoint.get(START_WEIGHTS_KEY)
            self.start_weights = dict(recorded) if isinstance(recorded, dict) else None
