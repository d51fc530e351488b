"""A run, read once from one of its checkpoint files: what wrote it, what it trained, how, and on what data."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from crate.models import Checkpoint, CheckpointError, architecture_of, read_checkpoint

from .held_out import describe_data
from .record import FileRecord, module_kind, read_record, run_config, run_config_file
from .weight_average import ema_decay_at

__all__ = ["RECIPE_KEYS", "UNKNOWN_RUN_SETTING", "UNKNOWN_START_DIGEST", "Run"]

# what a card says of a run setting that only the run's config.yaml records, when none lies beside the checkpoint
UNKNOWN_RUN_SETTING = "unknown (no readable config.yaml of the run beside its checkpoints/ folder)"
# what a card says of the start file's contents where the checkpoint predates their record
UNKNOWN_START_DIGEST = "unknown (the checkpoint records no sha256 of the file its run started from)"
# the module's hyper-parameters that make up a card's recipe (with the data section's settings)
RECIPE_KEYS = ("optimizer", "lr", "min_lr_ratio", "weight_decay", "betas", "layer_decay", "warmup_epochs")
RECIPE_KEYS += ("label_smoothing", "drop_path_rate", "ema_decay", "mixup_alpha", "cutmix_alpha")
RECIPE_KEYS += ("head_hidden_dim", "head_dim", "head_layers", "eps", "coeff", "expa_type", "teacher_momentum")


def _flatten(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(f"{prefix}{key}.", value))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@dataclass
class Run:
    """A Lightning checkpoint of ``train.py`` / ``pretrain.py`` and the run folder around it.

    ``config`` is the run's LightningCLI ``config.yaml`` (``<run>/config.yaml`` beside ``<run>/checkpoints/``),
    ``{}`` where none lies there (a checkpoint moved out of its run): what only it records is then "unknown".
    """

    path: Path
    checkpoint: Checkpoint
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """Read the checkpoint (the zoo's one reader) and its run's ``config.yaml``; refuse a file that is not a
        Lightning checkpoint of the zoo."""
        path = Path(path)
        held = read_checkpoint(path)
        if held.source != "lightning" or "model_name" not in held.hparams:
            raise CheckpointError(
                f"{held.describe()}: not a Lightning checkpoint of crate.lit.ImageClassifier; export works on the "
                ".ckpt files that train.py writes"
            )
        return cls(path, held, run_config(path))

    @cached_property
    def record(self) -> FileRecord:
        """What the checkpoint records of its run: module, hyper-parameters, epoch, data, schedule."""
        return read_record(self.checkpoint)

    @property
    def kind(self) -> str:
        """The module that wrote it: ``ImageClassifier``, ``MaskedAutoencoder`` or ``SelfDistillation``."""
        return module_kind(self.checkpoint) or "ImageClassifier"

    @property
    def is_encoder(self) -> bool:
        """A self-distillation run: what it yields is an encoder (its teacher's backbone), not a classifier."""
        return self.kind == "SelfDistillation"

    @property
    def has_classifier(self) -> bool:
        return not self.is_encoder and self.kind != "MaskedAutoencoder" and "num_classes" in self.hparams

    @property
    def hparams(self) -> dict[str, Any]:
        return self.record.hyper_parameters

    @property
    def model_name(self) -> str:
        """The architecture the run trained. A run named after a weights tag (``crate_cct4_3x2_32.cifar10``, a
        fine-tune from it) trained weights of its own, so the tag is left out: it would name the tag's weights."""
        return architecture_of(str(self.hparams["model_name"]))

    @property
    def num_classes(self) -> int:
        """Classes of what the run yields (0 for an encoder)."""
        return 0 if self.is_encoder else self.hparams["num_classes"]

    @property
    def data_config(self) -> dict[str, Any] | None:
        """The data section the run trained with (``class_path``, ``init_args``), or None where not recorded."""
        return self.record.data_config

    @property
    def data_description(self) -> str:
        data = self.data_config
        return describe_data(data) if data else "unknown (the checkpoint records no data config)"

    @property
    def config_file(self) -> Path:
        return run_config_file(self.path)

    @property
    def classical_baseline(self) -> dict[str, Any] | None:
        """The classical models' scores on the run's own split, where the run measured them (image folders)."""
        return self.record.classical_baseline

    @property
    def epochs(self) -> int:
        """Full epochs the run had trained when the file was written."""
        return self.record.epochs_trained

    @property
    def batches_into_epoch(self) -> int:
        """Batches of the next epoch trained by then: nonzero for a file written mid-epoch (an interrupt, a save
        every N steps)."""
        return self.record.batches_into_epoch

    def recipe(self) -> dict[str, Any]:
        """The training recipe a card shows: the weights it started from (``--model.pretrained_file``, or a
        pretrained tag), the
        module's optimisation settings, the training-only model settings, the data section's settings (a
        self-distillation run's views replace the classification augmentation, which never ran), and the
        precision and seed of the run's config (or "unknown" without one)."""
        hp = self.hparams
        recipe = {k: hp[k] for k in RECIPE_KEYS if hp.get(k) is not None}
        if hp.get("ema_decay") is not None:  # a cap the warm-up reaches late: the decay this file's average ended at
            recipe["ema_decay_last"] = round(ema_decay_at(hp["ema_decay"], self.record.global_step), 6)
        if hp.get("pretrained_file"):  # a fine-tune or a further cycle: its epochs are counted from those weights
            recipe["pretrained_file"] = hp["pretrained_file"]
            start = self.record.start_weights
            recipe["pretrained_sha256"] = start["sha256"] if start else UNKNOWN_START_DIGEST
        elif (hp.get("model_kwargs") or {}).get("pretrained") and hp["model_name"] != self.model_name:
            recipe["pretrained_tag"] = hp["model_name"]  # a fine-tune from a tag's weights
        if hp.get("objective_weight"):  # the layer-objective term, where a run trained with it
            recipe["objective_weight"] = hp["objective_weight"]
            recipe["objective_images"] = hp.get("objective_images", 8)  # 8: runs from before it was a setting
        if hp.get("lr_base_size"):  # lr is the rate at that batch size, scaled to the run's
            recipe.update(lr_base_size=hp["lr_base_size"], lr_base_scale=hp.get("lr_base_scale", "sqrt"))
            recipe["peak_lr"] = self.record.peak_lr
        architecture = self.checkpoint.architecture_kwargs
        regularisers = {k: v for k, v in (hp.get("model_kwargs") or {}).items() if k not in architecture}
        recipe.update(_flatten("model_kwargs.", regularisers))  # e.g. patch_drop_rate: training only
        init_args = dict((self.data_config or {}).get("init_args") or {})
        if init_args.get("multi_crop"):
            init_args.pop("augmentation", None)
        recipe.update(_flatten("data.", init_args))
        if self.config:
            recipe["precision"] = (self.config.get("trainer") or {}).get("precision") or "32-true"  # Lightning's
            recipe["seed"] = self.config.get("seed_everything")
        else:  # a checkpoint moved out of its run folder: say so rather than guess
            recipe["precision"] = recipe["seed"] = UNKNOWN_RUN_SETTING
        return recipe
