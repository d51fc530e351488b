"""A run resumes only onto the data it was trained on, and is evaluated only on data of its classes: a
checkpoint records its data's identity (source, folder, classes, split sizes, image size, channels), and
``train.py fit --ckpt_path`` compares it with the data of the config before anything is written (``validate``,
``test`` and ``predict`` compare the classes and channels). Training on other data from a run's weights is a new
run (``--model.pretrained_file``), which never touches the old run's checkpoints or logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crate.models import Checkpoint, CheckpointError

from .held_out import shown_classes
from .record import read_record

__all__ = ["check_evaluation_data", "check_resume_data", "data_changes"]

# settings of a run's data section that say which images it holds out (for checkpoints written before the
# data's identity was recorded)
_SPLIT_SETTINGS = ("root", "dataset", "img_size", "in_chans", "val_fraction", "split_seed")
# what an evaluation's data must share with the run's: the classes in label order (their names where both
# record them) and the channels; the folder, the split sizes and the image size may differ (data that moved,
# new images of the same classes; an image size the weights do not fit is refused by their shapes)
_LABELS = ("classes", "num_classes", "in_chans")


def _shown(value: Any) -> str:
    return shown_classes(value) if isinstance(value, list) else str(value)


def data_changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for every key both identities hold with different values."""
    return [
        f"{key} {_shown(recorded[key])} -> {_shown(current[key])}"
        for key in recorded
        if key in current and recorded[key] is not None and current[key] is not None and recorded[key] != current[key]
    ]


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


def check_evaluation_data(held: Checkpoint, identity: dict[str, Any], subcommand: str) -> None:
    """Refuse to ``validate``, ``test`` or ``predict`` with ``held`` on data whose classes (or channels) are not
    the ones it recorded: each label would be scored, or named, as another class. Files without a record pass."""
    recorded = read_record(held).data_identity
    if not isinstance(recorded, dict):
        return
    changes = data_changes({key: recorded[key] for key in _LABELS if key in recorded}, identity)
    if changes:
        raise CheckpointError(
            f"--ckpt_path {held.path} was trained on other classes than this data has ({'; '.join(changes)}): "
            f"{subcommand} would take its labels for these classes; nothing was written. Give it data with the "
            "classes it was trained on (the same class folders; the root may differ), or train a new run on this "
            f"data from its weights with --model.pretrained_file {held.path}"
        )
