"""A run's model rebuilt from its file: the architecture with the classes, channels, image size and settings the
file records, then its weights, through timm (what a user's ``timm.create_model`` does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import timm
import torch

import crate.models  # noqa: F401  (registers the zoo)
from crate.models import CheckpointError, check_model_name, create_classifier, read_checkpoint

from .record import read_record

__all__ = ["build_model"]


def build_model(
    name: str, checkpoint: str | Path | None
) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any] | None]:
    """(the model in eval mode, the keyword arguments it was built with, the data config its file records or None).

    ``checkpoint`` is any file ``crate.models.read_checkpoint`` reads (official CRATE, CRATE-alpha, a
    Lightning .ckpt, timm state dict or safetensors); the model is built with what the file records of the
    run (classes, channels, image size, ``model_kwargs`` such as ``decoder_depth``); the class names a run
    recorded become its ``pretrained_cfg["label_names"]``, as a shipped tag's are. Without a file, ``name`` must be
    a pretrained tag such as ``crate_nano_patch4_32.digits``.
    """
    check_model_name(name, pretrained=checkpoint is None)
    if checkpoint is None:
        model = timm.create_model(name, pretrained=True).eval()
        cfg = model.pretrained_cfg.get("file")
        return model, {"pretrained": True}, (read_record(read_checkpoint(cfg)).data_config if cfg else None)
    held = read_checkpoint(checkpoint)
    kwargs: dict[str, Any] = dict(held.architecture_kwargs)
    decoder = {key.split(".")[1] for key in held.zoo_state_dict if key.startswith("decoder_blocks.")}
    if decoder and "decoder_depth" not in kwargs:  # a masked-pretraining file: its decoder too (CRATE-MAE)
        kwargs["decoder_depth"] = len(decoder)
    kwargs["num_classes"] = held.classes_for(name) or 0  # a file without a head (masked pretraining)
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
    settings = {key: value for key, value in kwargs.items() if key not in ("num_classes", "in_chans", "img_size")}
    try:
        model = create_classifier(
            name, kwargs["num_classes"], kwargs.get("in_chans"), kwargs.get("img_size"),
            pretrained=True, pretrained_cfg_overlay=overlay, **settings,
        )  # fmt: skip
    except RuntimeError as err:  # timm's own models: shapes or keys that do not match
        raise CheckpointError(
            f"{held.describe()}: it does not fit {name} ({str(err).splitlines()[0]}). "
            "Was it trained for another architecture? Pick the matching --model."
        ) from err
    classes = held.label_names
    if classes and not model.pretrained_cfg.get("label_names"):  # timm's field for the class names, as tags have
        model.pretrained_cfg = {**model.pretrained_cfg, "label_names": classes}
    return model.eval(), kwargs, read_record(held).data_config
