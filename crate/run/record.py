"""What a zoo file records of its run beside the weights, and the keys it records them under.

A Lightning checkpoint of ``train.py`` / ``pretrain.py`` records which module wrote it, the data section of
the run's config, the data's identity (source, folder, classes, split sizes, image size, channels), the
classical baselines measured on the run's split, the images of an optimizer step, and Lightning's own loop
and optimizer state (epoch, step, the learning-rate schedule). An export's safetensors metadata records the
data section. :func:`read_record` reads all of it from a :class:`crate.models.Checkpoint` (whose ``record``
holds the file's entries as written), so the rest of the package never reads those keys itself."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crate.models import Checkpoint, file_sha256

__all__ = [
    "BASELINE_KEY",
    "BATCHES_PER_EPOCH_KEY",
    "DATA_CONFIG_KEY",
    "DATA_IDENTITY_KEY",
    "MODULE_KEY",
    "PROGRAMS",
    "START_WEIGHTS_KEY",
    "UPDATE_BATCH_KEY",
    "FileRecord",
    "epochs_and_steps",
    "module_kind",
    "read_record",
    "recorded_best",
    "run_config",
    "run_config_file",
    "start_weights",
]

MODULE_KEY = "crate_module"  # the LightningModule class that wrote a checkpoint
DATA_CONFIG_KEY = "data_config"  # the run's data section: class_path, init_args (also in an export's metadata)
DATA_IDENTITY_KEY = "data_identity"  # what the run's data was: source, root, classes, split sizes, size, channels
BASELINE_KEY = "classical_baseline"  # the classical models' scores on the run's own split
UPDATE_BATCH_KEY = "update_batch"  # the images of an optimizer step: batch_size, processes, accumulate
START_WEIGHTS_KEY = "start_weights"  # the file a run's weights started from (--model.pretrained_file): path, sha256
BATCHES_PER_EPOCH_KEY = "batches_per_epoch"  # the training batches of one of the run's epochs

# the command that trains each module kind, for messages
PROGRAMS = {
    "ImageClassifier": "train.py",
    "MaskedAutoencoder": "pretrain.py",
    "SelfDistillation": "pretrain.py --objective simdino",
}


@dataclass(frozen=True)
class FileRecord:
    """What a file records of its run. Files that record less (plain weights, older checkpoints) leave the
    fields they cannot fill at their defaults: ``None``, an empty dict, epoch -1."""

    module: str | None = None  # the LightningModule class that wrote it
    hyper_parameters: dict[str, Any] = field(default_factory=dict)
    epoch: int = -1  # Lightning's index of the epoch the file was written in
    epochs_trained: int = 0  # full epochs trained when the file was written
    batches_into_epoch: int = 0  # batches of the next epoch trained by then (a file written mid-epoch)
    global_step: int = 0
    data_config: dict[str, Any] | None = None  # the run's data section: class_path, init_args
    data_identity: dict[str, Any] | None = None
    classical_baseline: dict[str, Any] | None = None
    peak_lr: float | None = None
    planned_steps: int | None = None
    # the images of an optimizer step as {"batch_size", "processes", "accumulate"} (per process, how many, and
    # batches accumulated): their product is what each update of the run averaged its gradient over
    update_batch: dict[str, int] | None = None
    # the file the run's weights started from, as {"path", "sha256"} (its contents when the run started), or None
    start_weights: dict[str, str] | None = None
    # the metric this file was the run's best checkpoint by when it was written (its monitoring ModelCheckpoint
    # recorded the file's own name as best_model_path), or None: a latest, last or interrupt checkpoint
    best_by: str | None = None


def start_weights(path: str | Path) -> dict[str, str]:
    """The record of the file a run's weights start from: the path as given and the sha256 of its contents then,
    which still tells which weights they were after the file at that path is replaced."""
    return {"path": str(path), "sha256": file_sha256(path)}


def _planned_steps(loaded: Mapping[str, Any]) -> int | None:
    """The optimizer steps the run's learning-rate schedule was laid out for (timm's cosine schedule: its
    warmup, where it comes before the decay, plus the decay's length), or None where the file records no such
    schedule. A run stopped before them (``--trainer.max_time``, an interruption) ended before its learning rate
    finished decaying."""
    for state in loaded.get("lr_schedulers") or []:
        t_initial = state.get("t_initial") if isinstance(state, Mapping) else None
        if isinstance(t_initial, int) and t_initial > 0:
            warmup = state.get("warmup_t", 0) if state.get("warmup_prefix") else 0
            return t_initial + (warmup if isinstance(warmup, int) else 0)
    return None


def _peak_lr(loaded: Mapping[str, Any]) -> float | None:
    """The learning rate the run's schedule started from (its first optimizer's ``initial_lr``): the ``lr``
    hyperparameter, or that scaled to the run's batch where ``lr_base_size`` was set."""
    for state in loaded.get("optimizer_states") or []:
        for group in state.get("param_groups") or []:
            if isinstance(group.get("initial_lr"), float):
                return group["initial_lr"]
    return None


def epochs_and_steps(global_step: int, batches_per_epoch: int, accumulate: int = 1) -> tuple[int, int, int]:
    """(whole epochs, optimizer steps into the next, steps an epoch) of ``global_step`` steps, an epoch of
    ``batches_per_epoch`` batches taking one step per ``accumulate`` of them and one for a shorter last window."""
    per_epoch = math.ceil(batches_per_epoch / accumulate)
    return (*divmod(global_step, per_epoch), per_epoch)


def _progress(loaded: Mapping[str, Any]) -> tuple[int, int]:
    """Full epochs trained and batches of the next one, from Lightning's fit-loop progress: a file written at
    an epoch's end (or its validation) has processed that epoch; one written mid-epoch (an interrupt, a save
    every N steps), or at the end of an epoch cut short (``max_steps``, ``max_time``: its batches fewer than the
    run's epoch holds), has processed the epochs before it and some of its batches. Files without that
    progress: the epoch they were written in, counted whole."""
    epoch = int(loaded.get("epoch", -1))
    loop = (loaded.get("loops") or {}).get("fit_loop") or {}
    try:
        processed = int(loop["epoch_progress"]["current"]["processed"])
        batches = int(loop["epoch_loop.batch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        return epoch + 1, 0
    per_epoch = loaded.get(BATCHES_PER_EPOCH_KEY)
    accumulate = (loaded.get(UPDATE_BATCH_KEY) or {}).get("accumulate", 1)
    if isinstance(per_epoch, int) and per_epoch > 0 and isinstance(accumulate, int) and accumulate > 0:
        whole, _, _ = epochs_and_steps(int(loaded.get("global_step", 0)), per_epoch, accumulate)
        if whole < processed:  # an epoch cut short (max_steps, max_time), which Lightning counts as processed
            return whole, batches
        if batches >= per_epoch:  # the last epoch's whole count, not batches of the next (a save after fit)
            return processed, 0
    return processed, (batches if processed == epoch else 0)


def run_config_file(checkpoint_path: str | Path) -> Path:
    """Where the LightningCLI ``config.yaml`` of a checkpoint's run lies: ``<run>/config.yaml`` beside
    ``<run>/checkpoints/``."""
    return Path(checkpoint_path).resolve().parent.parent / "config.yaml"


def run_config(checkpoint_path: str | Path) -> dict[str, Any]:
    """The ``config.yaml`` of a checkpoint's run, ``{}`` where none lies there or it is not a YAML mapping."""
    config_file = run_config_file(checkpoint_path)
    try:
        config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    except yaml.YAMLError:
        return {}
    return dict(config) if isinstance(config, Mapping) else {}


def _run_folder_data_config(path: Path) -> dict[str, Any] | None:
    """The data section of ``<run>/config.yaml`` for a checkpoint in ``<run>/checkpoints/`` (checkpoints
    written before the data config was recorded in them)."""
    if path.resolve().parent.name != "checkpoints":
        return None
    data = run_config(path).get("data")
    return dict(data) if isinstance(data, Mapping) and "class_path" in data else None


def read_record(held: Checkpoint) -> FileRecord:
    """What ``held`` records of its run: everything for a Lightning checkpoint of the zoo, the data section
    for an export, nothing for plain weights."""
    record = held.record
    if held.source == "safetensors":
        data = record.get(DATA_CONFIG_KEY)
        return FileRecord(data_config=json.loads(data) if data else None)
    if held.source != "lightning":
        return FileRecord()
    data = record.get(DATA_CONFIG_KEY)
    epochs_trained, batches_into_epoch = _progress(record)
    return FileRecord(
        module=record.get(MODULE_KEY),
        hyper_parameters=dict(record.get("hyper_parameters") or {}),
        epoch=int(record.get("epoch", -1)),
        epochs_trained=epochs_trained,
        batches_into_epoch=batches_into_epoch,
        global_step=int(record.get("global_step", 0)),
        data_config=dict(data) if isinstance(data, Mapping) else _run_folder_data_config(Path(held.path)),
        data_identity=record.get(DATA_IDENTITY_KEY),
        classical_baseline=record.get(BASELINE_KEY),
        peak_lr=_peak_lr(record),
        planned_steps=_planned_steps(record),
        update_batch=_update_batch(record.get(UPDATE_BATCH_KEY)),
        start_weights=_start_weights(record.get(START_WEIGHTS_KEY)),
        best_by=_best_by(record, Path(held.path).name),
    )


def recorded_best(loaded: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(metric, path)`` of the best file a Lightning checkpoint's monitoring ``ModelCheckpoint`` recorded when the
    checkpoint was written, or None where none had recorded one (no validation scored yet, or no such callback)."""
    for state in (loaded.get("callbacks") or {}).values():
        if not isinstance(state, Mapping):
            continue
        metric, best = state.get("monitor"), state.get("best_model_path")
        if isinstance(metric, str) and metric and isinstance(best, str) and best:
            return metric, best
    return None


def _best_by(loaded: Mapping[str, Any], file_name: str) -> str | None:
    """The metric by which the file named ``file_name`` was its run's best checkpoint when written, else None."""
    best = recorded_best(loaded)
    return best[0] if best is not None and Path(best[1]).name == file_name else None


def _start_weights(value: Any) -> dict[str, str] | None:
    """A recorded start file with its path and sha256 as strings, None otherwise."""
    if not isinstance(value, Mapping) or not all(isinstance(value.get(key), str) for key in ("path", "sha256")):
        return None
    return {"path": value["path"], "sha256": value["sha256"]}


def _update_batch(value: Any) -> dict[str, int] | None:
    """A recorded update batch with its three counts as positive integers, None otherwise."""
    keys = ("batch_size", "processes", "accumulate")
    if not isinstance(value, Mapping) or not all(isinstance(value.get(key), int) and value[key] > 0 for key in keys):
        return None
    return {key: int(value[key]) for key in keys}


def module_kind(held: Checkpoint) -> str | None:
    """The module class that wrote a Lightning checkpoint of the zoo: recorded, or for files written before
    the record, told by its hyper-parameters (only masked pretraining has ``mask_ratio``)."""
    if held.source != "lightning":
        return None
    record = read_record(held)
    if record.module:
        return str(record.module)
    return "MaskedAutoencoder" if "mask_ratio" in record.hyper_parameters else "ImageClassifier"
