"""A run resumes only onto the data and the recipe it was trained with, and is evaluated only on data of its
classes and its held-out images: a checkpoint records its data's identity (source, folder, classes, split sizes,
split settings, image size, channels), its module's settings and its data section, and ``train.py fit
--ckpt_path`` compares them (and the precision of the run's ``config.yaml``) with the config before anything is
written (``validate``, ``test`` and ``predict`` compare the classes and channels, and the split settings of data
split by them: the digits). A resume restores the optimizer and the learning-rate schedule, so a changed rate would
not be used while the run's hyper-parameters, and its card, would say it was; other changes would hold for part of
the run only, which no card can say. Training on other data, or with another recipe, from a run's
weights is a new run (``--model.pretrained_file``), which never touches the old run's checkpoints or logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crate.models import Checkpoint, CheckpointError

from .held_out import class_difference, is_digits, shown_classes
from .record import read_record, run_config

__all__ = [
    "check_evaluation_data",
    "check_resume_data",
    "check_resume_recipe",
    "data_changes",
    "recipe_changes",
    "split_changes",
]

# settings of a run's data section that say which images it holds out (for checkpoints written before the
# data's identity was recorded)
_SPLIT_SETTINGS = ("root", "dataset", "img_size", "in_chans", "val_fraction", "split_seed")
# what an evaluation's data must share with the run's: the classes in label order (their names where both
# record them) and the channels; the folder, the split sizes and the image size may differ (data that moved,
# new images of the same classes; an image size the weights do not fit is refused by their shapes)
_LABELS = ("classes", "num_classes", "in_chans")
# what an evaluation's data must share with the run's where the data is one set split by settings (the digits):
# the settings that say which images are held out; other ones would score images the run trained on
_HELD_OUT = ("val_fraction", "split_seed")
# settings a resume may change, as they do not change what the run trains: speed and memory only, the weights a
# new run would start from (a resume starts from its checkpoint), where the data lies and how it is loaded or
# cached, what predict reads, and the data-linked sizes and classes that the data's own check compares
_FREE_MODULE_SETTINGS = frozenset(
    {"grad_checkpointing", "compile", "compile_mode", "pretrained_file", "_instantiator"}
    | {"num_classes", "in_chans", "img_size", "class_weights"}
)
_FREE_DATA_SETTINGS = frozenset(
    {"root", "num_workers", "store_dir", "predict_split", "predict_root", "in_chans", "img_size"}
)
# Lightning's older spellings of a precision, as its own unified names
_PRECISION_NAMES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}


def _shown(value: Any) -> str:
    return shown_classes(value) if isinstance(value, list) else str(value)


def data_changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for every key both identities hold with different values."""
    changes = []
    for key in recorded:
        old, new = recorded[key], current.get(key)
        if old is None or new is None or old == new:
            continue
        named = key == "classes" and isinstance(old, list) and isinstance(new, list)
        difference = f" ({class_difference(old, new)})" if named else ""
        changes.append(f"{key} {_shown(old)} -> {_shown(new)}{difference}")
    return changes


def _plain(value: Any) -> Any:
    """Tuples as lists (a parsed config and a checkpoint's hyper-parameters spell sequences either way)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def recipe_changes(recorded: dict[str, Any], current: dict[str, Any], free: frozenset[str] = frozenset()) -> list[str]:
    """``key: recorded -> current`` for every key both hold, other than ``free``, with different values (a
    setting turned on or off from None counts); where both values are mappings (an augmentation section, a
    model's keyword arguments), each of their keys, as ``key.inner``."""
    changes = []
    for key in recorded:
        if key not in current or key in free:
            continue
        before, after = recorded[key], current[key]
        if isinstance(before, dict) and isinstance(after, dict):
            changes += [f"{key}.{change}" for change in recipe_changes(before, after)]
        elif _plain(before) != _plain(after):
            changes.append(f"{key} {before} -> {after}")
    return changes


def _precision(value: Any) -> str:
    text = "32-true" if value is None else str(value)  # Lightning's default
    return _PRECISION_NAMES.get(text, text)


def _images(batch: dict[str, int]) -> int:
    """The images an optimizer step averages its gradient over."""
    return batch["batch_size"] * batch["processes"] * batch["accumulate"]


def _shown_update(batch: dict[str, int]) -> str:
    """An optimizer step's images, with the counts they are the product of."""
    processes = "process" if batch["processes"] == 1 else "processes"
    return (
        f"{_images(batch)} images (data.batch_size {batch['batch_size']} x {batch['processes']} {processes} x "
        f"{batch['accumulate']} accumulated)"
    )


def check_resume_recipe(
    held: Checkpoint,
    hparams: dict[str, Any],
    data_config: dict[str, Any] | None,
    precision: str,
    update_batch: dict[str, int],
) -> None:
    """Refuse to resume ``held`` with a recipe other than the one it was trained with: the module's settings
    (``hparams``, what the config builds now), the data section's settings other than where and how its images
    are read (``data_config``), the trainer's ``precision`` against the run's ``config.yaml`` (where one lies
    beside the checkpoint's folder), and the images of an optimizer step (``update_batch``: ``batch_size`` per
    process x ``processes`` x ``accumulate``d batches). A step's images may be shared out anew (a run of batch 64
    on one process resumes on two with batch 32, which read the same images a step), not changed; a file that
    does not record them is held to its data section's batch size and its config's accumulated batches.
    Settings a file does not record pass."""
    record = read_record(held)
    changes = [f"model.{change}" for change in recipe_changes(record.hyper_parameters, hparams, _FREE_MODULE_SETTINGS)]
    recorded_data, current_data = record.data_config or {}, data_config or {}
    free_data = _FREE_DATA_SETTINGS | ({"batch_size"} if record.update_batch else set())
    if recorded_data.get("class_path") == current_data.get("class_path"):  # another class: the data check's
        recorded_args, current_args = recorded_data.get("init_args") or {}, current_data.get("init_args") or {}
        changes += [f"data.{change}" for change in recipe_changes(recorded_args, current_args, free_data)]
    trainer = run_config(held.path).get("trainer")
    if isinstance(trainer, dict) and _precision(trainer.get("precision")) != _precision(precision):
        changes.append(f"trainer.precision {_precision(trainer.get('precision'))} -> {_precision(precision)}")
    if record.update_batch:
        images, sharing = _images(record.update_batch), update_batch["processes"] * update_batch["accumulate"]
        if update_batch["batch_size"] and images != _images(update_batch):
            shown = f"{_shown_update(record.update_batch)} -> {_shown_update(update_batch)}"
            keep = f", which --data.batch_size {images // sharing} keeps" if images % sharing == 0 else ""
            changes.append(f"the images of an optimizer step {shown}{keep}")
    else:
        recorded_accumulate = trainer.get("accumulate_grad_batches") if isinstance(trainer, dict) else None
        if recorded_accumulate is not None and int(recorded_accumulate) != update_batch["accumulate"]:
            changes.append(f"trainer.accumulate_grad_batches {recorded_accumulate} -> {update_batch['accumulate']}")
    if changes:
        raise CheckpointError(
            f"--ckpt_path {held.path} resumes a run trained with other settings ({'; '.join(changes)}); nothing was "
            "written. A resume continues the run as it was trained (its optimizer state and step count are "
            "restored, and its card names one recipe): give those settings their recorded values to continue it; "
            f"to train with these from its weights, start a new run with --model.pretrained_file {held.path} (and "
            "no --ckpt_path)"
        )


def _recorded_settings(config: dict[str, Any] | None) -> dict[str, Any]:
    """The split-defining settings of a data section, roots resolved (relative roots from the working folder)."""
    args = dict((config or {}).get("init_args") or {})
    settings = {key: args[key] for key in _SPLIT_SETTINGS if key in args}
    if settings.get("root") is not None:
        settings["root"] = str(Path(settings["root"]).resolve())
    return settings


def check_resume_data(held: Checkpoint, identity: dict[str, Any], data_config: dict[str, Any] | None) -> None:
    """Refuse to resume ``held`` onto data other than the one it recorded (``identity`` and ``data_config``:
    what the config builds now). Checkpoints of other programs or older ones without a record pass what they
    cannot tell."""
    record = read_record(held)
    recorded = record.data_identity
    if isinstance(recorded, dict):
        changes = data_changes(recorded, identity)
    else:
        changes = data_changes(_recorded_settings(record.data_config), _recorded_settings(data_config))
    if changes:
        raise CheckpointError(
            f"--ckpt_path {held.path} resumes a run trained on other data ({'; '.join(changes)}); nothing was "
            "written. To continue that run, give it the data it was trained on; to train on this data from its "
            f"weights, start a new run with --model.pretrained_file {held.path} (and no --ckpt_path)"
        )


def split_changes(held: Checkpoint, identity: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for each split setting (``val_fraction``, ``split_seed``) of data split by
    settings (the digits) that ``held``'s run had otherwise than ``identity``: where it holds out other images, the
    data's validation images include some the file's weights were trained on. Empty for files of other data, or
    without a record."""
    record = read_record(held)
    if isinstance(record.data_identity, dict):
        recorded = record.data_identity
    elif record.data_config is not None and is_digits(record.data_config):  # an export: the run's data section
        recorded = {"source": "digits", **(record.data_config.get("init_args") or {})}
    else:
        return []
    if recorded.get("source", "digits") != identity.get("source"):
        return []
    return data_changes({key: recorded[key] for key in _HELD_OUT if key in recorded}, identity)


def check_evaluation_data(held: Checkpoint, identity: dict[str, Any], subcommand: str) -> None:
    """Refuse to ``validate``, ``test`` or ``predict`` with ``held`` on data whose classes (or channels) are not
    the ones it recorded: each label would be scored, or named, as another class; and on data split by settings
    (the digits) that holds out other images than the run did: its validation images would include training
    images. Files without a record pass."""
    recorded = read_record(held).data_identity
    if not isinstance(recorded, dict):
        return
    if split := split_changes(held, identity):
        raise CheckpointError(
            f"--ckpt_path {held.path} was trained on this data split otherwise ({'; '.join(split)}): its validation "
            f"images would include images the run trained on, which {subcommand} would take for held-out ones; "
            "nothing was written. Leave these settings as the run had them (its config.yaml) to evaluate it on the "
            "images it held out"
        )
    changes = data_changes({key: recorded[key] for key in _LABELS if key in recorded}, identity)
    if changes:
        raise CheckpointError(
            f"--ckpt_path {held.path} was trained on other classes than this data has ({'; '.join(changes)}): "
            f"{subcommand} would take its labels for these classes; nothing was written. Give it data with the "
            "classes it was trained on (the same class folders; the root may differ), or train a new run on this "
            f"data from its weights with --model.pretrained_file {held.path}"
        )
