"""The one way the package builds a model: any timm model (zoo or timm's own) for classification, with a clear
error for unknown names; from settings (training) or from a file (``pretrained`` with timm's overlay)."""

from __future__ import annotations

from typing import Any

import timm
import torch
from huggingface_hub.errors import LocalEntryNotFoundError
from timm.layers import to_2tuple
from timm.models import get_pretrained_cfg_value
from torch import nn

from .checkpoint import check_file_architecture, per_channel, read_checkpoint
from .convert import CheckpointError
from .names import architecture_of, check_model_name, in_zoo

__all__ = ["check_model_kwargs", "create_classifier"]

# what create_classifier builds a model with from its own arguments (a run takes them from its data)
_BUILT_FROM_DATA = ("num_classes", "in_chans", "img_size")


def check_model_kwargs(model_kwargs: dict[str, Any] | None) -> None:
    """Refuse ``model_kwargs`` that set what :func:`create_classifier` takes as its own arguments: Python would
    refuse the call with "got multiple values for argument", without saying where the value comes from."""
    if doubled := [key for key in _BUILT_FROM_DATA if key in (model_kwargs or {})]:
        raise ValueError(
            f"model_kwargs sets {', '.join(doubled)}, which the model is built with from the run's own settings "
            "(train.py and pretrain.py take them from the data: --data.img_size, --data.in_chans, its classes): "
            "leave them out of model_kwargs"
        )


def create_classifier(
    model_name: str,
    num_classes: int,
    in_chans: int | None = 3,
    img_size: int | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """``timm.create_model`` with the data's classes, channels and (where the model takes one) image size.

    Models without an ``img_size`` argument (most CNNs) are built without it: they take any size. ``in_chans``
    None leaves the channels to the model (or to the file it loads, which records what it was trained with);
    ``model_kwargs`` go to timm as they are (``pretrained``, ``pretrained_cfg_overlay``, the model's settings).
    """
    check_model_name(model_name)
    kwargs, declared, weights = _weights_for_timm(model_name, model_kwargs, in_chans, img_size, num_classes)
    kwargs = dict(kwargs, num_classes=num_classes)
    if in_chans is not None:
        kwargs["in_chans"] = in_chans
    try:
        model = _create(model_name, img_size if "img_size" not in model_kwargs else None, kwargs)
        if weights is not None:
            _check_every_weight_read(model, weights, architecture_of(model_name))
        if declared:  # the file's class names; the input it was built for, where the weights were fitted to another
            model.pretrained_cfg = {**model.pretrained_cfg, **declared}
        return model
    except LocalEntryNotFoundError as err:  # timm's own pretrained weights, offline and not in the cache
        raise CheckpointError(
            f"the pretrained weights of {model_name} are not in the local hub cache and cannot be downloaded; "
            "download them on a machine with network access, or build it without pretrained weights"
        ) from err
    except RuntimeError as err:  # timm's own loader: a file whose weights do not fit (the zoo's models say why)
        file = (model_kwargs.get("pretrained_cfg_overlay") or {}).get("file")
        if file is None or isinstance(err, CheckpointError):
            raise
        held, detail = read_checkpoint(file), " ".join(str(err).split())
        recorded = held.architecture_kwargs
        other = {key: value for key, value in recorded.items() if model_kwargs.get(key) != value}
        hint = f"; its run built it with model_kwargs {recorded}: build it with the same" if other else ""
        raise CheckpointError(
            f"{held.describe()}: its weights do not fit {model_name} as built "
            f"({detail if len(detail) <= 200 else detail[:200] + ' ...'}){hint}"
        ) from err


def _create(model_name: str, img_size: int | None, kwargs: dict[str, Any]) -> nn.Module:
    if img_size is None:
        return timm.create_model(model_name, **kwargs)
    try:
        model = timm.create_model(model_name, img_size=img_size, **kwargs)
    except TypeError as err:  # a network without an image size (most CNNs)
        if "img_size" not in str(err):
            raise
        model = timm.create_model(model_name, **kwargs)
    if not in_zoo(architecture_of(model_name)):  # timm's own may not take the size, even one it was built for
        _check_takes_size(model, model_name, kwargs.get("in_chans"), img_size)
    return model


def _check_takes_size(model: nn.Module, model_name: str, in_chans: int | None, img_size: int | tuple[int, int]) -> None:
    """A network built without an image size (a CNN takes any) may still not take images of this size (its
    downsampling leaves nothing of them), which the first training step would meet as a traceback: one blank
    image through it says so before anything runs."""
    side = tuple(to_2tuple(img_size))
    channels = in_chans or model.pretrained_cfg.get("input_size", (3,))[0]
    training = model.training
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, channels, *side))
    except RuntimeError as err:
        raise ValueError(
            f"{model_name} cannot take {side[0]}x{side[1]} images ({' '.join(str(err).split())}): give images of "
            "a size it takes (a CNN's downsampling needs larger ones), or another network"
        ) from err
    finally:
        model.train(training)


def _weights_for_timm(
    model_name: str, model_kwargs: dict[str, Any], in_chans: int | None, img_size: int | None, num_classes: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """``model_kwargs`` whose ``pretrained_cfg_overlay`` names a ``file``, for one of timm's own models (a ResNet, a
    stock ViT trained with train.py): the zoo's models read any checkpoint the zoo reads through their own filter,
    timm's read a file as it lies, and a Lightning run's holds ``model.``-prefixed keys (and a moving average). The
    overlay is given the file's weights as the zoo reads them, which timm's loader then fits as any pretrained
    weights (a classifier of other classes dropped, other input channels folded, the position embedding
    resampled), and, as a zoo model's file gives them, the run's image statistics. Returned beside: what the built
    model declares once timm has fitted the weights: the class names of a classifier it keeps (so that an
    evaluation on data of other classes is refused, as for the zoo's models), and the input it was built for (its
    channels and size, statistics per channel), where timm needed the file's own channels to fold them."""
    overlay = model_kwargs.get("pretrained_cfg_overlay") or {}
    if not model_kwargs.get("pretrained") or "file" not in overlay or "state_dict" in overlay:
        return model_kwargs, {}, None
    arch = architecture_of(model_name)
    if not timm.models.is_model(arch) or in_zoo(arch):
        return model_kwargs, {}, None  # a hub name reads its own folder; the zoo's models read any file themselves
    held = read_checkpoint(overlay["file"])
    check_file_architecture(held, arch)
    overlay = {**held.eval_transform, **overlay, "state_dict": held.state_dict}
    declared: dict[str, Any] = {}
    if held.label_names and held.classes_for(model_name) == num_classes:  # the classifier kept: its classes
        declared["label_names"] = tuple(held.label_names)
    if in_chans is None or img_size is None:
        return dict(model_kwargs, pretrained_cfg_overlay=overlay), declared, held.state_dict
    side = tuple(to_2tuple(img_size))
    source = held.in_chans(None, get_pretrained_cfg_value(arch, "first_conv") or "patch_embed.proj") or in_chans
    overlay.setdefault("input_size", (source, *side))  # timm folds the file's channels into the model's
    declared["input_size"] = (in_chans, *side)
    for key in ("mean", "std"):  # per channel of the built model (one gray statistic, or three)
        values = overlay.get(key) or get_pretrained_cfg_value(arch, key)
        if values and len(values) != in_chans:
            declared[key] = per_channel(values, in_chans)
    return dict(model_kwargs, pretrained_cfg_overlay=overlay), declared, held.state_dict


def _check_every_weight_read(model: nn.Module, weights: dict[str, Any], arch: str) -> None:
    """Raise where the file's weights and the model's do not name the same tensors, its classifier aside: timm
    loads pretrained weights non-strictly once it drops a classifier of other classes, so a file of another
    architecture would leave the model at its random initialisation without a word."""
    names = get_pretrained_cfg_value(arch, "classifier") or "head"
    heads = tuple(f"{name}." for name in ((names,) if isinstance(names, str) else names))
    own = {key for key in model.state_dict() if not key.startswith(heads)}
    given = {key for key in weights if not key.startswith(heads)}
    if own != given:
        missing, unexpected = sorted(own - given), sorted(given - own)
        raise RuntimeError(
            f"{len(missing)} of the model's tensors are not in the file (the first: {missing[:3]}) and "
            f"{len(unexpected)} of the file's are not in the model (the first: {unexpected[:3]})"
        )
