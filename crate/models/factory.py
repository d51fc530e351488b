"""The one way the package builds a model: any timm model (zoo or timm's own) for classification, with a clear
error for unknown names; from settings (training) or from a file (``pretrained`` with timm's overlay)."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from .names import check_model_name

__all__ = ["create_classifier"]


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
    kwargs = dict(model_kwargs, num_classes=num_classes)
    if in_chans is not None:
        kwargs["in_chans"] = in_chans
    if img_size is not None and "img_size" not in model_kwargs:
        try:
            return timm.create_model(model_name, img_size=img_size, **kwargs)
        except TypeError as err:
            if "img_size" not in str(err):
                raise
    return timm.create_model(model_name, **kwargs)
