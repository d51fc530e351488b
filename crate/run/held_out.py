"""The data a run held out, read from the data config its checkpoint records: which DataModule and settings,
what a config given later may change (where the images lie, how they are batched) and what it may not (which
images are held out), and the whole validation split scored by top-k accuracy. Export, the results table, the
white-box report and the benchmarks all take a run's held-out images from here."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from jsonargparse import ArgumentError, ArgumentParser
from torch.utils.data import DataLoader, Dataset

from crate.errors import DataError, innermost_refusal
from crate.layers import patch_embed_in_chans
from crate.models import CheckpointError

__all__ = [
    "DIGITS",
    "NoDataFolder",
    "check_label_names",
    "class_difference",
    "datamodule_from_config",
    "describe_data",
    "held_out_accuracy",
    "held_out_set",
    "held_out_topk",
    "is_digits",
    "digits_split",
    "model_in_chans",
    "resolve_data",
    "shown_classes",
    "validation_split_note",
]

DIGITS = "crate.lit.DigitsDataModule"
# settings that change how the data is read or augmented, not which images are held out: an evaluation that
# leaves them out takes none of them from the run
_NOT_THE_SPLIT = {"batch_size", "num_workers", "augmentation", "seed", "predict_split", "root", "download"}
# and settings an evaluation takes from the run where it leaves them out, which change how the images are read,
# batched, weighed or mixed in training, or what predict reads, but still not which images are held out: given
# otherwise, they evaluate the same split (the model itself refuses a size or channel count it was not built for)
_NOT_WHICH_IMAGES = _NOT_THE_SPLIT | {"img_size", "in_chans", "decode", "store_dir", "drop_last", "fixed_eval_shape"}
_NOT_WHICH_IMAGES |= {"class_weights", "mixing", "multi_crop", "predict_root"}
# DigitsDataModule's settings (the digits are read here without it: their foreground masks come along)
_DIGITS_SETTINGS = {"img_size", "in_chans", "batch_size", "num_workers", "val_fraction", "split_seed"}
_DIGITS_SETTINGS |= {"augmentation", "seed", "predict_split"}


def _instantiate_datamodule(class_path: str, init_args: dict[str, Any], channels: int) -> Any:
    """The DataModule a train.py config describes, parsed and type-checked as train.py does (jsonargparse),
    reading images with the model's channel count where the DataModule lets it be chosen."""
    cls = _data_class(class_path)
    taken = inspect.signature(cls).parameters
    open_ended = any(param.kind is inspect.Parameter.VAR_KEYWORD for param in taken.values())
    if not open_ended and (unknown := sorted(set(init_args) - set(taken))):
        raise ValueError(
            f"{cls.__name__} takes no setting {', '.join(unknown)}; its settings: {', '.join(sorted(taken))}"
        )
    if "in_chans" in taken:
        init_args = dict(init_args, in_chans=channels)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data")
    try:
        config = parser.parse_object({"data": {"class_path": class_path, "init_args": init_args}})
    except ArgumentError as err:
        raise ValueError(f"{cls.__name__} does not take these settings: {err}") from err
    try:
        return parser.instantiate_classes(config).data
    except ValueError as err:  # the DataModule's own refusal, not jsonargparse's wrapping of it
        raise innermost_refusal(err, final=(CheckpointError, DataError)) from err


def _data_class(class_path: str) -> type:
    """The DataModule class a config's ``class_path`` names; a ValueError where it cannot be imported."""
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"data.class_path {class_path} cannot be imported: {err}") from err


def validation_split_note(config: dict[str, Any]) -> str | None:
    """Why the data config's validation split is the data's official test split (its DataModule's
    ``validates_on_test_split``: CIFAR through torchvision), or None where it holds images of its own."""
    try:
        return getattr(_data_class(str(config.get("class_path", ""))), "validates_on_test_split", None)
    except ValueError:  # a class that cannot be imported is refused where the data is read
        return None


def model_input_size(model: torch.nn.Module) -> tuple[int, int, int]:
    """(channels, height, width) the model takes: its patch embedding's (zoo PatchEmbed or timm's conv
    PatchEmbed), or for a network without one (a CNN, which takes any size) its pretrained cfg's."""
    embed = getattr(model, "patch_embed", None)
    if embed is None:
        channels, height, width = model.pretrained_cfg["input_size"]
        return int(channels), int(height), int(width)
    return patch_embed_in_chans(embed), *map(int, embed.img_size)


def model_in_chans(model: torch.nn.Module) -> int:
    """Channels the model takes (:func:`model_input_size`)."""
    return model_input_size(model)[0]


def describe_data(config: dict[str, Any]) -> str:
    """One line for cards and reports: the DataModule and the settings that choose its images."""
    args = config.get("init_args") or {}
    shown = [f"{k}={args[k]}" for k in sorted(args) if k not in _NOT_WHICH_IMAGES]
    shown += [f"root={args['root']}"] if "root" in args else []
    return f"{config['class_path'].rpartition('.')[2]}({', '.join(shown)})"


def _split_args(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (config.get("init_args") or {}).items() if k not in _NOT_THE_SPLIT}


def _images_args(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (config.get("init_args") or {}).items() if k not in _NOT_WHICH_IMAGES}


class NoDataFolder(ValueError):
    """A data folder given for data that lies in none: scikit-learn's digits ship with scikit-learn."""


def is_digits(config: dict[str, Any]) -> bool:
    return _class_name(config) == "DigitsDataModule"


def resolve_data(
    spec: str | None, recorded: dict[str, Any] | None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The data config to evaluate a checkpoint on: the one its run recorded, unless ``spec`` asks for other
    data; ``overrides`` of its settings (``{"root": DIR}`` for data that moved). ``spec`` is None (the
    recorded data; the digits with their default split for a file that records none), ``digits`` (the
    run's digits split where it trained on digits), or a train.py YAML config. A config of the run's own
    DataModule class that holds out other images than the run did (another ``split_seed`` or
    ``val_fraction``, given in the YAML or as an override) is refused: its validation images would include
    training images of the run."""
    if spec is None or spec == "digits":
        if recorded is not None and spec == "digits" and not is_digits(recorded):
            raise ValueError(
                f"the checkpoint was trained on {describe_data(recorded)}, not the digits: leave --data out to "
                "evaluate on the data its run held out, or give a train.py YAML config of other data"
            )
        config = recorded if recorded is not None else {"class_path": DIGITS, "init_args": {}}
    else:
        path = Path(spec)
        if not path.is_file():
            raise FileNotFoundError(f"--data must be 'digits' or a train.py YAML config; {spec} is neither")
        data = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("data") or {}
        if "class_path" not in data:
            raise ValueError(f"{spec} has no data.class_path section (see configs/*.yaml)")
        config = {"class_path": data["class_path"], "init_args": dict(data.get("init_args") or {})}
    if is_digits(config) and "root" in (overrides or {}):
        raise NoDataFolder(
            "the checkpoint's run trained on scikit-learn's digits, which lie in no folder: give it no data root "
            "(or check that this is the checkpoint you meant)"
        )
    config = {
        "class_path": config["class_path"],
        "init_args": _with_overrides(config.get("init_args") or {}, overrides),
    }
    same_class = recorded is not None and _class_name(config) == _class_name(recorded)
    if same_class:
        # what the config leaves out is taken as the run had it
        config["init_args"] = {**_split_args(recorded), **config["init_args"]}
        theirs, ours = (_images_args(args) for args in (recorded, config))
        differing = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        if differing:
            raise ValueError(
                "the data asked for holds out other images than the checkpoint's run did ("
                + ", ".join(f"{k}: run {theirs.get(k)!r}, asked {ours.get(k)!r}" for k in differing)
                + "): its validation images may be training images of the run. Leave --data and these "
                "settings out to evaluate on the run's own held-out data"
            )
    return config


def _class_name(config: dict[str, Any]) -> str:
    return str(config.get("class_path", "")).rpartition(".")[2]


def _with_overrides(init_args: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    init_args = dict(init_args)
    for key, value in (overrides or {}).items():  # "augmentation.scale" -> init_args["augmentation"]["scale"]
        *parents, leaf = key.split(".")
        target = init_args
        for parent in parents:
            target[parent] = dict(target[parent]) if isinstance(target.get(parent), dict) else {}
            target = target[parent]
        target[leaf] = value
    return init_args


def datamodule_from_config(config: dict[str, Any], model: torch.nn.Module) -> Any:
    """The DataModule a data config (``class_path``, ``init_args``) describes, with the evaluation
    transforms training used for ``model`` (its pretrained cfg: mean, std, interpolation, crop), prepared
    (downloaded, where its config downloads) and set up."""
    # the images predict reads are no part of the data a run trained on and held out (and may be gone since)
    init_args = {key: value for key, value in (config.get("init_args") or {}).items() if key != "predict_root"}
    datamodule = _instantiate_datamodule(config["class_path"], init_args, channels=model_in_chans(model))
    if hasattr(datamodule, "transforms_from"):
        datamodule.transforms_from(model)  # the evaluation transforms training used for this model
    datamodule.prepare_data()  # torchvision's CIFAR download where the config asks for it; nothing for folders
    datamodule.setup("fit")
    check_label_names(model, getattr(datamodule, "classes", None), describe_data(config))
    return datamodule


def check_label_names(model: torch.nn.Module, classes: Any, data: str) -> None:
    """Refuse data whose class names (label order) are not the model's ``pretrained_cfg["label_names"]``, where
    both are known: every accuracy on it would score one class as another."""
    names = (getattr(model, "pretrained_cfg", None) or {}).get("label_names")
    if names and classes is not None and tuple(map(str, names)) != tuple(map(str, classes)):
        theirs = ("the classes " if len(classes) <= 6 else "") + shown_classes(classes)  # not "the classes 10 classes"
        raise ValueError(
            f"{data} has {theirs}, but the model was trained on "
            f"{shown_classes(names)} ({class_difference(names, classes)}): its accuracy there would score one "
            "class as another. Give data with the model's classes (the same class folders; the root may differ), "
            "or fine-tune it on this data first"
        )


def shown_classes(names: Any) -> str:
    """Class names for a message: all of them up to six, else their count and the first three."""
    names = [str(name) for name in names]
    return str(names) if len(names) <= 6 else f"{len(names)} classes [{', '.join(names[:3])}, ...]"


def class_difference(expected: Any, given: Any) -> str:
    """Where two lists of class names differ, for a message that shows long lists only in part: the names
    only one side has, or, for the same names in another order, the first label they disagree on."""
    expected, given = [str(name) for name in expected], [str(name) for name in given]
    missing = [name for name in expected if name not in given]
    extra = [name for name in given if name not in expected]
    parts = [f"missing {shown_classes(missing)}"] if missing else []
    parts += [f"new {shown_classes(extra)}"] if extra else []
    if not parts:
        label = next((i for i, (a, b) in enumerate(zip(expected, given, strict=False)) if a != b), None)
        if label is None:
            return "the same names" if len(expected) == len(given) else "the same names, repeated"
        parts = [f"the same names in another order: label {label} is {given[label]!r}, not {expected[label]!r}"]
    return "; ".join(parts)


@torch.no_grad()
def held_out_topk(
    model: torch.nn.Module, dataset: Dataset, ks: tuple[int, ...] = (1,), batch_size: int = 256
) -> dict[int, float]:
    """Top-k accuracies of ``model`` (eval mode) on every image of ``dataset`` (image, label pairs): the
    share of images whose label is among the k highest logits (all of them where k exceeds the classes)."""
    model.eval()
    correct = dict.fromkeys(ks, 0)
    total = 0
    for images, labels in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        logits, labels = model(images), torch.as_tensor(labels)
        if labels.numel() and int(labels.max()) >= logits.shape[-1]:
            raise ValueError(
                f"the data has labels up to {int(labels.max())} but the model has {logits.shape[-1]} classes: it "
                "was trained on other classes; give data with its classes"
            )
        ranked = logits.topk(min(max(ks), logits.shape[-1]), dim=-1).indices
        for k in ks:
            correct[k] += int((ranked[:, :k] == labels[:, None]).any(dim=-1).sum())
        total += len(labels)
    if total == 0:
        raise ValueError("the validation split holds no images")
    return {k: correct[k] / total for k in ks}


def held_out_accuracy(model: torch.nn.Module, dataset: Dataset, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on every image of ``dataset`` (image, label pairs)."""
    return held_out_topk(model, dataset, (1,), batch_size)[1]


def digits_split(config: dict[str, Any], model: torch.nn.Module) -> tuple[Any, Any, str]:
    """(train, val, name) of a digits data config, at the model's size and channels."""
    from crate.data.digits import load_digits_tensors

    args = config.get("init_args") or {}
    unknown = sorted(set(args) - _DIGITS_SETTINGS)
    if unknown:
        raise ValueError(f"DigitsDataModule takes no settings {unknown}")
    split = {k: args[k] for k in ("val_fraction", "split_seed") if k in args}
    train, val = load_digits_tensors(
        img_size=model_input_size(model)[1],
        in_chans=model_in_chans(model),
        val_fraction=split.get("val_fraction", 0.2),
        seed=split.get("split_seed", 0),
    )
    name = "digits" if not split else "digits (" + ", ".join(f"{k}={v}" for k, v in split.items()) + ")"
    return train, val, name


def held_out_set(config: dict[str, Any], model: torch.nn.Module, overrides: dict[str, Any] | None = None) -> Dataset:
    """The whole validation split of a data config (image, label pairs), as ``model`` was evaluated in
    training; ``overrides`` as in :func:`resolve_data` (refused where they change the split)."""
    config = resolve_data(None, config, overrides)
    if is_digits(config):
        return digits_split(config, model)[1]
    return datamodule_from_config(config, model).val_set
