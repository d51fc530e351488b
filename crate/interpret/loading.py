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

import crate.models  # noqa: F401  (registers the zoo)
from crate.errors import innermost_refusal
from crate.layers import patch_embed_in_chans
from crate.models import CheckpointError, read_checkpoint

from .segmentation import load_mask_folder, stroke_pixels

__all__ = ["EvalData", "load_data", "load_model", "model_in_chans", "sample_photographs"]


def load_model(name: str, checkpoint: str | Path | None) -> torch.nn.Module:
    """``name`` built with the classes and channels of ``checkpoint`` and its weights, in eval mode.

    ``checkpoint`` is any file ``crate.models.read_checkpoint`` reads (official CRATE, CRATE-alpha, a
    Lightning .ckpt, timm state dict or safetensors); without one, ``name`` must be a pretrained tag such
    as ``crate_nano_patch4_32.digits``.
    """
    if checkpoint is None:
        if not timm.is_model_pretrained(name) and "." not in name:
            raise ValueError(f"give --checkpoint for {name}, or a pretrained tag such as {name}.digits")
        return timm.create_model(name, pretrained=True).eval()
    held = read_checkpoint(checkpoint)
    kwargs: dict[str, Any] = {"num_classes": held.num_classes or 0}  # a file without a head (masked pretraining)
    with torch.device("meta"):  # only to learn the patch size, which flat patch embeddings need
        patch = getattr(getattr(timm.create_model(name), "patch_embed", None), "patch_size", None)
    in_chans = held.in_chans(tuple(patch) if patch is not None else None)
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
    return model.eval()


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
    """Images (normalised as in training) and labels of a train and a validation split, and where known
    the foreground of each validation image as a pixel mask (B, H, W)."""

    def __init__(
        self,
        name: str,
        train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor],
        val_masks: torch.Tensor | None = None,
    ):
        self.name = name
        self.train_images, self.train_labels = train
        self.val_images, self.val_labels = val
        self.val_masks = val_masks


def _stack(dataset: Any, limit: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    count = len(dataset) if limit is None else min(limit, len(dataset))
    items = [dataset[i] for i in range(count)]
    return torch.stack([torch.as_tensor(x) for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


def load_data(
    spec: str,
    model: torch.nn.Module,
    limit: int | None = 2000,
    masks: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> EvalData:
    """``digits`` (the embedded data; its foreground is the digit's strokes), or a train.py YAML config
    whose ``data`` section is used, with ``overrides`` of its ``init_args`` (``--data.root DIR``); the
    images get the evaluation transforms training used for ``model`` (its pretrained cfg: mean, std,
    interpolation, crop). ``masks`` is a folder of foreground masks mirroring the ``val/`` folder
    (``masks/<class>/<image stem>.png``, non-zero = foreground)."""
    from crate.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_tensors

    in_chans = model_in_chans(model)
    size = model.patch_embed.img_size[0]
    if spec == "digits" and overrides:
        raise ValueError(f"--data.* settings {sorted(overrides)} need a train.py YAML config as --data")
    if spec == "digits":
        if masks is not None:
            raise ValueError("digits brings its own foreground (the strokes); --masks is for image-folder data")
        train, val = load_digits_tensors(img_size=size, in_chans=in_chans)
        strokes = stroke_pixels(val.images, DIGITS_MEAN, DIGITS_STD)
        return EvalData("digits", (train.images, train.labels), (val.images, val.labels), strokes)
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"--data must be 'digits' or a train.py YAML config; {spec} is neither")
    data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
    if "class_path" not in data:
        raise ValueError(f"{spec} has no data.class_path section (see configs/*.yaml)")
    class_name = data["class_path"].rpartition(".")[2]
    init_args = dict(data.get("init_args") or {})
    for key, value in (overrides or {}).items():  # "augmentation.scale" -> init_args["augmentation"]["scale"]
        *parents, leaf = key.split(".")
        target = init_args
        for parent in parents:
            if not isinstance(target.get(parent), dict):
                target[parent] = {}
            target = target[parent]
        target[leaf] = value
    datamodule = _instantiate_datamodule(data["class_path"], init_args, channels=in_chans)
    if hasattr(datamodule, "transforms_from"):
        datamodule.transforms_from(model)  # the evaluation transforms training used for this model
    datamodule.setup("fit")
    val = _stack(datamodule.val_set, limit)
    val_masks = None
    if masks is not None:
        samples = getattr(datamodule.val_set, "samples", None)
        if samples is None:
            raise ValueError(f"--masks needs an image-folder dataset; {class_name} has no image files")
        paths = [path for path, _ in samples[: len(val[1])]]
        val_masks = load_mask_folder(masks, paths, datamodule.val_set.root, datamodule.val_set.transform)
    return EvalData(path.stem, _stack(datamodule.train_set, limit), val, val_masks)


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
