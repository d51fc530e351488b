"""Load a model and its checkpoint for evaluation, and the images to evaluate it on (the lenses' and probes'
samples, foreground masks). What data a run held out and its accuracy there are the run's: :mod:`crate.run`
(re-exported here for the interpretability package's own use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_sample_images
from torch.utils.data import Dataset, TensorDataset

from crate.data.sampling import sample_order
from crate.models import hub_weights, is_hub_name
from crate.run import build_model
from crate.run.held_out import (
    datamodule_from_config,
    describe_data,
    digits_split,
    held_out_accuracy,
    held_out_set,
    held_out_topk,
    is_digits,
    model_in_chans,
    resolve_data,
)

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


def load_model(name: str, checkpoint: str | Path | None) -> torch.nn.Module:
    """``name`` built with the classes, channels, image size and model settings of ``checkpoint`` and its
    weights, in eval mode (see :func:`load_run`)."""
    return load_run(name, checkpoint)[0]


def load_run(name: str, checkpoint: str | Path | None) -> tuple[torch.nn.Module, dict[str, Any] | None]:
    """(the model in eval mode, the data config its file records or None): :func:`crate.run.build_model`, with
    the build remembered so that the controls can initialise the same architecture afresh.

    ``checkpoint`` is any file ``crate.models.read_checkpoint`` reads (official CRATE, CRATE-alpha, a
    Lightning .ckpt, timm state dict or safetensors). Without a file, ``name`` must be a pretrained tag such as
    ``crate_nano_patch4_32.digits``, or a hub folder or repository by its timm name (``local-dir:DIR``,
    ``hf-hub:ORG/NAME``), read as the architecture its ``config.json`` names and the weights file beside it, so
    that what the file records of its run (the data it held out, its class names) is read as from any file.
    """
    if is_hub_name(name):
        if checkpoint is not None:
            raise ValueError(
                f"{name} brings its own weights: leave out its checkpoint, or name the architecture with the file"
            )
        name, checkpoint = hub_weights(name)
    model, kwargs, data_config = build_model(name, checkpoint)
    remember_build(model, name, kwargs)
    return model, data_config


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


def _digits_sample(size: int, limit: int | None) -> slice | list[int]:
    """All of a digits split in its order, or a seeded sample of ``limit`` of it where it is larger."""
    return slice(None) if limit is None or limit >= size else sample_order(size, limit)


def _stack(dataset: Any, order: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dataset[i] for i in order]
    return torch.stack([torch.as_tensor(x) for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


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
    if is_digits(config):
        if masks is not None:
            raise ValueError("digits brings its own foreground (the strokes); --masks is for image-folder data")
        train, val, name = digits_split(config, model)
        whole_val = TensorDataset(val.images, val.labels)  # accuracy reads the whole split, whatever the limit
        # the split is in a seeded random order already; a limit below its size takes a seeded sample of it
        train_order, val_order = (_digits_sample(len(split.labels), limit) for split in (train, val))
        val_images = val.images[val_order]
        strokes = stroke_pixels(val_images, DIGITS_MEAN, DIGITS_STD)
        train_part = (train.images[train_order], train.labels[train_order])
        return EvalData(name, train_part, (val_images, val.labels[val_order]), strokes, whole_val)
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
