"""Build any timm model (zoo or timm's own) for classification, with a clear error for unknown names."""

from __future__ import annotations

import difflib
from typing import Any

import timm
from torch import nn

import crate.models  # noqa: F401  (registers the zoo with timm)

__all__ = ["create_classifier", "check_model_name"]


def check_model_name(model_name: str) -> None:
    """Raise a ValueError naming close matches when timm knows no model called ``model_name``."""
    if timm.is_model(model_name):
        return
    arch = model_name.split(".")[0]
    close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise ValueError(
        f"Unknown model {model_name!r}.{hint} The zoo lists its models with "
        "`import crate, timm; timm.list_models('crate*')`, timm's own with `timm.list_models()`."
    )


def create_classifier(
    model_name: str,
    num_classes: int,
    in_chans: int = 3,
    img_size: int | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """``timm.create_model`` with the data's classes, channels and (where the model takes one) image size.

    Models without an ``img_size`` argument (most CNNs) are built without it: they take any size.
    """
    check_model_name(model_name)
    kwargs = dict(model_kwargs, num_classes=num_classes, in_chans=in_chans)
    if img_size is not None and "img_size" not in model_kwargs:
        try:
            return timm.create_model(model_name, img_size=img_size, **kwargs)
        except TypeError as err:
            if "img_size" not in str(err):
                raise
    return timm.create_model(model_name, **kwargs)
