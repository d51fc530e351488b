"""``model.load_state_dict`` of the zoo's models: the layouts the zoo's files come in, and one clear error.

timm's ``create_model(NAME, checkpoint_path=PATH)`` and a user's ``model.load_state_dict(torch.load(PATH))`` hand
the model a file's dictionary as it is. A zoo model takes the layouts its ``checkpoint_filter_fn`` reads (a
Lightning checkpoint of ``train.py``, whose moving average of the weights is taken where the run kept one;
``module.`` prefixes; the official CRATE, CRATE-alpha and CBT names) and, in a strict load, refuses weights that
do not fit the model as built, in one line that names what differs and how to build the model as the file
records. Unlike ``pretrained_cfg_overlay=dict(file=PATH)``, this path never resamples a position embedding or
folds input channels: the dictionary carries no record of the size it was trained at, so a model built at
another size is refused instead of being fitted to it without a word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .convert import CheckpointError, differences, settings_that_differ, to_zoo_layout

__all__ = ["LoadsZooLayouts", "StateDictMismatch", "check_state_dict_fits"]


class StateDictMismatch(CheckpointError, RuntimeError):
    """Weights that do not fit the model as built; a ``RuntimeError`` too, as torch's strict load raises."""


def check_state_dict_fits(state_dict: Mapping[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Raise :class:`StateDictMismatch` where ``state_dict`` (the zoo's layout) is not, key for key and shape for
    shape, the state of ``model``."""
    own = model.state_dict()
    detail = differences(state_dict, own)
    if not detail:
        return
    settings = settings_that_differ(state_dict, own)
    head, built = state_dict.get("head.weight"), own.get("head.weight")
    if torch.is_tensor(head) and built is not None and head.shape[0] != built.shape[0]:
        settings.insert(0, f"num_classes={head.shape[0]}")
    if (chans := _trained_in_chans(state_dict, model)) is not None:
        settings.append(f"in_chans={chans}")
    if (side := _trained_side(state_dict, model)) is not None:
        settings.append(f"img_size={side}")
    name = (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__
    build = f"build it with the weights' {', '.join(settings)}, or " if settings else ""
    raise StateDictMismatch(
        f"the weights do not fit {name} as built ({detail}): {build}load the file with "
        f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict(file=PATH)), which builds the "
        "model as the file records"
    )


def _trained_in_chans(state_dict: Mapping[str, torch.Tensor], model: torch.nn.Module) -> int | None:
    """The input channels the weights' first layer (the cfg's ``first_conv``: a conv, or a flat (p1 p2 c) patch
    projection) takes where the model's takes another number, or None."""
    key = f"{(getattr(model, 'pretrained_cfg', None) or {}).get('first_conv') or 'patch_embed.proj'}.weight"
    theirs, ours = state_dict.get(key), model.state_dict().get(key)
    if not torch.is_tensor(theirs) or ours is None or theirs.shape == ours.shape or theirs.ndim != ours.ndim:
        return None
    if theirs.ndim == 4:
        return int(theirs.shape[1])
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    area = patch[0] * patch[1] if patch is not None else 0
    if theirs.ndim == 2 and area and theirs.shape[1] % area == 0 and ours.shape[1] % area == 0:
        return int(theirs.shape[1]) // area
    return None


def _trained_side(state_dict: Mapping[str, torch.Tensor], model: torch.nn.Module) -> int | None:
    """The square image side a position embedding of another length than the model's was trained at (its tokens
    a square grid of the model's patches), or None."""
    theirs, ours = state_dict.get("pos_embed"), model.state_dict().get("pos_embed")
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    if not torch.is_tensor(theirs) or ours is None or theirs.shape == ours.shape or patch is None:
        return None
    prefix = 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 0)
    grid = round((theirs.shape[-2] - prefix) ** 0.5)
    if grid * grid != theirs.shape[-2] - prefix or patch[0] != patch[1]:
        return None
    return grid * patch[0]


class LoadsZooLayouts:
    """Mixin for a zoo model (before ``nn.Module`` in its bases): ``load_state_dict`` reads the zoo's layouts and
    refuses, in a strict load, weights that do not fit (:func:`check_state_dict_fits`)."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        state_dict = to_zoo_layout(state_dict)
        if strict:
            check_state_dict_fits(state_dict, self)  # type: ignore[arg-type]
        return super().load_state_dict(state_dict, strict=strict, assign=assign)  # type: ignore[misc]
