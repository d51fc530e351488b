"""Load a model and its checkpoint for evaluation, and the images to evaluate it on."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
import torch.nn.functional as F
import yaml
from sklearn.datasets import load_sample_images
from timm.models import load_state_dict

import crate.models  # noqa: F401  (registers the zoo)
from crate.models import CheckpointError
from crate.models.convert import detect_layout

from .segmentation import load_mask_folder, stroke_pixels

__all__ = ["EvalData", "load_data", "load_model", "model_in_chans", "sample_photographs"]

_HEAD_KEYS = ("head.weight", "mlp_head.1.weight", "model.head.weight")


def _peek(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = load_state_dict(str(path))
    except FileNotFoundError as err:
        raise FileNotFoundError(f"checkpoint {path} does not exist") from err
    except Exception as err:
        raise CheckpointError(f"cannot read checkpoint {path}: corrupt, truncated or not a checkpoint ({err})") from err
    if any(k.startswith("model.") for k in state):
        state = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}
    return state


def _in_chans(state: dict[str, torch.Tensor]) -> int | None:
    for key in ("patch_embed.proj.weight", "conv1.weight"):
        if key in state and state[key].ndim == 4:
            return int(state[key].shape[1])
    for key in ("patch_embed.norm_in.weight", "to_patch_embedding.1.weight"):
        if key in state:
            return None  # a flat patch: channels follow from the patch size, which the model knows
    return None


def load_model(name: str, checkpoint: str | Path | None) -> torch.nn.Module:
    """``name`` built with the classes and channels of ``checkpoint`` and its weights, in eval mode.

    ``checkpoint`` is any file the zoo's conversion reads (official CRATE, CRATE-alpha, a Lightning .ckpt,
    timm state dict or safetensors); without one, ``name`` must be a pretrained tag such as
    ``crate_nano_patch4_32.digits``.
    """
    if checkpoint is None:
        if not timm.is_model_pretrained(name) and "." not in name:
            raise ValueError(f"give --checkpoint for {name}, or a pretrained tag such as {name}.digits")
        return timm.create_model(name, pretrained=True).eval()
    path = Path(checkpoint)
    state = _peek(path)
    head = next((state[k] for k in _HEAD_KEYS if k in state), None)
    kwargs: dict[str, Any] = {}
    if head is not None:
        kwargs["num_classes"] = int(head.shape[0])
    in_chans = _in_chans(state)
    if in_chans is None and detect_layout(state) != "crate_alpha_official":
        # flat patch embeddings: in_chans = patch_dim / p^2, with p from the architecture
        probe = timm.create_model(name, num_classes=0)
        patch = probe.patch_embed.patch_size
        key = "patch_embed.norm_in.weight" if "patch_embed.norm_in.weight" in state else "to_patch_embedding.1.weight"
        if key in state:
            in_chans = int(state[key].shape[0]) // (patch[0] * patch[1])
    if in_chans is not None:
        kwargs["in_chans"] = in_chans
    overlay = dict(file=str(path), num_classes=kwargs.get("num_classes", 1000))
    try:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)
    except RuntimeError as err:  # timm's own loading (ViTs): shapes or keys that do not match
        raise CheckpointError(
            f"checkpoint {path} does not fit {name}: {str(err).splitlines()[0]} "
            "Was it trained for another architecture? Pick the matching --model."
        ) from err
    return model.eval()


def model_in_chans(model: torch.nn.Module) -> int:
    """Channels the model's patch embedding takes (zoo PatchEmbed or timm's conv PatchEmbed)."""
    embed = model.patch_embed
    return int(getattr(embed, "in_chans", None) or embed.proj.in_channels)


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


def load_data(spec: str, model: torch.nn.Module, limit: int | None = 2000, masks: str | None = None) -> EvalData:
    """``digits`` (the embedded data; its foreground is the digit's strokes), or a train.py YAML config
    whose ``data`` section is used; ``masks`` is a folder of foreground masks mirroring its ``val/`` folder
    (``masks/<class>/<image stem>.png``, non-zero = foreground)."""
    from crate.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_tensors

    in_chans = model_in_chans(model)
    size = model.patch_embed.img_size[0]
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
    module_name, _, class_name = data["class_path"].rpartition(".")
    datamodule = getattr(importlib.import_module(module_name), class_name)(**(data.get("init_args") or {}))
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
