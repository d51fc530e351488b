"""Load a model and its checkpoint for evaluation, and the images to evaluate it on."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import timm
import torch
import torch.nn.functional as F
import yaml
from jsonargparse import ArgumentError, ArgumentParser
from sklearn.datasets import load_sample_images
from torch.utils.data import DataLoader, Dataset, TensorDataset

import crate.models  # noqa: F401  (registers the zoo)
from crate.data.sampling import sample_order
from crate.errors import innermost_refusal
from crate.layers import patch_embed_in_chans
from crate.models import CheckpointError, check_model_name, read_checkpoint

from .controls import remember_build
from .segmentation import load_mask_folder, stroke_pixels

__all__ = [
    "EvalData",
    "datamodule_from_config",
    "describe_data",
    "held_out_accuracy",
    "held_out_set",
    "held_out_topk",
    "load_data",
    "load_model",
    "load_run",
    "model_in_chans",
    "resolve_data",
    "sample_photographs",
]

DIGITS = "crate.lit.DigitsDataModule"
# settings that change how the data is read or augmented, not which images are held out
_NOT_THE_SPLIT = {"batch_size", "num_workers", "augmentation", "seed", "predict_split", "root", "download"}
# DigitsDataModule's settings (the digits are read here without it: their foreground masks come along)
_DIGITS_SETTINGS = {"img_size", "in_chans", "batch_size", "num_workers", "val_fraction", "split_seed"}
_DIGITS_SETTINGS |= {"augmentation", "seed", "predict_split"}


def load_model(name: str, checkpoint: str | Path | None) -> torch.nn.Module:
    """``name`` built with the classes, channels, image size and model settings of ``checkpoint`` and its
    weights, in eval mode (see :func:`load_run`)."""
    return load_run(name, checkpoint)[0]


def load_run(name: str, checkpoint: str | Path | None) -> tuple[torch.nn.Module, dict[str, Any] | None]:
    """(the model in eval mode, the data config its file records or None).

    ``checkpoint`` is any file ``crate.models.read_checkpoint`` reads (official CRATE, CRATE-alpha, a
    Lightning .ckpt, timm state dict or safetensors); the model is built with what the file records of the
    run (classes, channels, image size, ``model_kwargs`` such as ``decoder_depth``). Without a file,
    ``name`` must be a pretrained tag such as ``crate_nano_patch4_32.digits``.
    """
    check_model_name(name, pretrained=checkpoint is None)
    if checkpoint is None:
        model = timm.create_model(name, pretrained=True).eval()
        remember_build(model, name, {})
        cfg = model.pretrained_cfg.get("file")
        return model, (read_checkpoint(cfg).data_config if cfg else None)
    held = read_checkpoint(checkpoint)
    kwargs: dict[str, Any] = dict(held.architecture_kwargs)
    kwargs["num_classes"] = held.num_classes or 0  # a file without a head (masked pretraining)
    decoder = {key.split(".")[1] for key in held.zoo_state_dict if key.startswith("decoder_blocks.")}
    if decoder and "decoder_depth" not in kwargs:  # a masked-pretraining file: its decoder too (CRATE-MAE)
        kwargs["decoder_depth"] = len(decoder)
    with torch.device("meta"):  # only to learn the patch size (flat patch embeddings) and the first layer
        bare = timm.create_model(name)
    patch = getattr(getattr(bare, "patch_embed", None), "patch_size", None)
    first_conv = bare.pretrained_cfg.get("first_conv") or "patch_embed.proj"
    in_chans = held.in_chans(tuple(patch) if patch is not None else None, first_conv)
    if in_chans is not None:
        kwargs["in_chans"] = in_chans
    if held.hparams.get("img_size"):
        kwargs["img_size"] = held.hparams["img_size"]
    overlay = dict(file=str(checkpoint), num_classes=kwargs["num_classes"])
    try:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)
    except RuntimeError as err:  # timm's own models: shapes or keys that do not match
        raise CheckpointError(
            f"{held.describe()}: it does not fit {name} ({str(err).splitlines()[0]}). "
            "Was it trained for another architecture? Pick the matching --model."
        ) from err
    remember_build(model, name, kwargs)
    return model.eval(), held.data_config


def _instantiate_datamodule(class_path: str, init_args: dict[str, Any], channels: int) -> Any:
    """The DataModule a train.py config describes, parsed and type-checked as train.py does (jsonargparse),
    reading images with the model's channel count where the DataModule lets it be chosen."""
    module_name, _, class_name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"data.class_path {class_path} cannot be imported: {err}") from err
    if "in_chans" in inspect.signature(cls).parameters:
        init_args = dict(init_args, in_chans=channels)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data")
    try:
        config = parser.parse_object({"data": {"class_path": class_path, "init_args": init_args}})
    except ArgumentError as err:
        raise ValueError(f"{class_name} does not take these settings: {err}") from err
    try:
        return parser.instantiate_classes(config).data
    except ValueError as err:  # the DataModule's own refusal, not jsonargparse's wrapping of it
        raise innermost_refusal(err, final=(CheckpointError,)) from err


def model_in_chans(model: torch.nn.Module) -> int:
    """Channels the model's patch embedding takes (zoo PatchEmbed or timm's conv PatchEmbed)."""
    return patch_embed_in_chans(model.patch_embed)


class EvalData:
    """Images (normalised as in training) and labels of a train and a validation split, for the lenses and
    probes (at most ``limit`` each, in the seeded random order of :func:`crate.data.sampling.sample_order`); the
    whole validation split as a dataset (for accuracy); and where known the foreground of each sampled
    validation image as a pixel mask (B, H, W)."""

    def __init__(
        self,
        name: str,
        train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor],
        val_masks: torch.Tensor | None = None,
        val_set: Dataset | None = None,
    ):
        self.name = name
        self.train_images, self.train_labels = train
        self.val_images, self.val_labels = val
        self.val_masks = val_masks
        self.val_set = val_set if val_set is not None else TensorDataset(self.val_images, self.val_labels)


def _stack(dataset: Any, order: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dataset[i] for i in order]
    return torch.stack([torch.as_tensor(x) for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


def describe_data(config: dict[str, Any]) -> str:
    """One line for cards and reports: the DataModule and the settings that choose its images."""
    args = config.get("init_args") or {}
    shown = [f"{k}={args[k]}" for k in sorted(args) if k not in _NOT_THE_SPLIT | {"img_size", "in_chans"}]
    shown += [f"root={args['root']}"] if "root" in args else []
    return f"{config['class_path'].rpartition('.')[2]}({', '.join(shown)})"


def _split_args(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (config.get("init_args") or {}).items() if k not in _NOT_THE_SPLIT}


def _is_digits(config: dict[str, Any]) -> bool:
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
        if recorded is not None and spec == "digits" and not _is_digits(recorded):
            raise ValueError(
                f"the checkpoint was trained on {describe_data(recorded)}, not the digits: leave --data out to "
                "evaluate on the data its run held out, or give a train.py YAML config of other data"
            )
        config = recorded if recorded is not None else {"class_path": DIGITS, "init_args": {}}
    else:
        path = Path(spec)
        if not path.is_file():
            raise FileNotFoundError(f"--data must be 'digits' or a train.py YAML config; {spec} is neither")
        data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
        if "class_path" not in data:
            raise ValueError(f"{spec} has no data.class_path section (see configs/*.yaml)")
        config = {"class_path": data["class_path"], "init_args": dict(data.get("init_args") or {})}
    config = {
        "class_path": config["class_path"],
        "init_args": _with_overrides(config.get("init_args") or {}, overrides),
    }
    same_class = recorded is not None and _class_name(config) == _class_name(recorded)
    if same_class:
        # what the config leaves out is taken as the run had it
        config["init_args"] = {**_split_args(recorded), **config["init_args"]}
        theirs, ours = _split_args(recorded), _split_args(config)
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
    init_args = config.get("init_args") or {}
    datamodule = _instantiate_datamodule(config["class_path"], init_args, channels=model_in_chans(model))
    if hasattr(datamodule, "transforms_from"):
        datamodule.transforms_from(model)  # the evaluation transforms training used for this model
    datamodule.prepare_data()  # torchvision's CIFAR download where the config asks for it; nothing for folders
    datamodule.setup("fit")
    return datamodule


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


def _digits(config: dict[str, Any], model: torch.nn.Module) -> tuple[Any, Any, str]:
    """(train, val, name) of a digits data config, at the model's size and channels."""
    from crate.data.digits import load_digits_tensors

    args = config.get("init_args") or {}
    unknown = sorted(set(args) - _DIGITS_SETTINGS)
    if unknown:
        raise ValueError(f"DigitsDataModule takes no settings {unknown}")
    split = {k: args[k] for k in ("val_fraction", "split_seed") if k in args}
    train, val = load_digits_tensors(
        img_size=model.patch_embed.img_size[0],
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
    if _is_digits(config):
        return _digits(config, model)[1]
    return datamodule_from_config(config, model).val_set


def load_data(
    spec: str | dict[str, Any],
    model: torch.nn.Module,
    limit: int | None = 2000,
    masks: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> EvalData:
    """``digits`` (the embedded data with the default split; its foreground is the digit's strokes), a data
    config (``class_path``, ``init_args``: what :func:`resolve_data` returns), or a train.py YAML config
    whose ``data`` section is used; ``overrides`` of its ``init_args`` (``--data.root DIR``). The images
    get the evaluation transforms training used for ``model``. ``masks`` is a folder of foreground masks
    mirroring the ``val/`` folder (``masks/<class>/<image stem>.png``, non-zero = foreground)."""
    from crate.data.digits import DIGITS_MEAN, DIGITS_STD

    config = resolve_data(spec, None, overrides) if isinstance(spec, str) else resolve_data(None, spec, overrides)
    if _is_digits(config):
        if masks is not None:
            raise ValueError("digits brings its own foreground (the strokes); --masks is for image-folder data")
        train, val, name = _digits(config, model)
        strokes = stroke_pixels(val.images, DIGITS_MEAN, DIGITS_STD)
        return EvalData(name, (train.images, train.labels), (val.images, val.labels), strokes)
    datamodule = datamodule_from_config(config, model)
    val_order = sample_order(len(datamodule.val_set), limit)
    val = _stack(datamodule.val_set, val_order)
    val_masks = None
    if masks is not None:
        samples = getattr(datamodule.val_set, "samples", None)
        if samples is None:
            raise ValueError(f"--masks needs an image-folder dataset; {describe_data(config)} has no image files")
        paths = [samples[i][0] for i in val_order]
        val_masks = load_mask_folder(masks, paths, datamodule.val_set.root, datamodule.val_set.transform)
    train = _stack(datamodule.train_set, sample_order(len(datamodule.train_set), limit))
    return EvalData(describe_data(config), train, val, val_masks, datamodule.val_set)


def sample_photographs(model: torch.nn.Module, mean: float = 0.5, std: float = 0.5) -> tuple[torch.Tensor, np.ndarray]:
    """scikit-learn's bundled photographs resized to the model's input, and as RGB arrays for display."""
    images = np.stack(load_sample_images().images).astype(np.float32) / 255.0  # (2, H, W, 3)
    size = model.patch_embed.img_size
    rgb = F.interpolate(torch.from_numpy(images).permute(0, 3, 1, 2), size=size, mode="bilinear", antialias=True)
    in_chans = model_in_chans(model)
    cfg = getattr(model, "pretrained_cfg", {})
    mean_t = torch.tensor(cfg.get("mean", (mean,) * in_chans)).view(1, -1, 1, 1)
    std_t = torch.tensor(cfg.get("std", (std,) * in_chans)).view(1, -1, 1, 1)
    pixels = rgb.mean(dim=1, keepdim=True) if in_chans == 1 else rgb
    normalised = (pixels - mean_t[:, :in_chans]) / std_t[:, :in_chans]
    return normalised, rgb.permute(0, 2, 3, 1).clamp(0, 1).numpy()
