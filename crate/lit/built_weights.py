"""What a run built from weights (a pretrained tag, or ``--model.pretrained_file``) holds, checked against its data
before anything runs: whether its classifier is the weights' own or a new one the data's classes asked for, and
whether the weights' own classifier names the data's classes in the data's label order. Without these checks an
evaluation would score an untrained head, or one class as another, under the weights' name."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from crate.models import CheckpointError, names_weights_tag, read_checkpoint
from crate.run.held_out import check_label_names, class_difference, shown_classes
from crate.run.resume_check import split_changes

__all__ = ["check_built_head", "head_from_weights", "warn_of_seen_images", "warn_of_unloaded_tag"]

EVALUATIONS = ("validate", "test", "predict")


def _held_head(model: nn.Module) -> str:
    """What the weights' own head was: its classes, or none (an encoder's weights)."""
    held = model.pretrained_cfg.get("num_classes")
    return f"the weights' head has {held} classes" if held else "the weights are an encoder, without a classifier"


def head_from_weights(module: L.LightningModule) -> bool | None:
    """Whether the model's classifier is the one of the weights it was built from: True where it was kept, False
    where the data's classes asked for a new, untrained one (timm's rule for a ``num_classes`` other than the
    weights'), None where the model was built without weights."""
    hparams = getattr(module, "hparams", None) or {}
    if not (hparams.get("pretrained_file") or (hparams.get("model_kwargs") or {}).get("pretrained")):
        return None
    model = getattr(module, "model", None)
    held = (getattr(model, "pretrained_cfg", None) or {}).get("num_classes")
    return held is None or held == getattr(model, "num_classes", held)


def _weights_name(module: L.LightningModule) -> str:
    hparams = getattr(module, "hparams", None) or {}
    if hparams.get("pretrained_file"):
        return f"--model.pretrained_file {hparams['pretrained_file']}"
    return f"the pretrained weights of {hparams.get('model_name')}"


def check_built_head(module: L.LightningModule, classes: Any, data: str, subcommand: str) -> None:
    """Refuse ``validate``, ``test`` and ``predict`` of weights built in whose own head names other classes, or the
    same ones in another order, than the data (``classes``, in label order; ``data`` says which data): each label
    would be scored, or named, as another class. A fit from them is warned (it retrains what the head's outputs
    mean). Where the data's classes asked for a new head, an evaluation is warned that it scores an untrained
    classifier, and a fit says that it trains one. A fit that names a tag and loads no weights is warned
    (:func:`warn_of_unloaded_tag`)."""
    kept = head_from_weights(module)
    if kept is None:
        if subcommand == "fit":
            warn_of_unloaded_tag(module)
        return
    model = module.model
    if not kept:
        if subcommand in EVALUATIONS:
            rank_zero_warn(
                f"{subcommand} uses {_weights_name(module)} under a new, untrained head: {_held_head(model)} and "
                f"the data {model.num_classes} classes, so its figures are those of a random "
                "classifier on their features; fine-tune it on this data first (fit), or give it data of the "
                "weights' classes"
            )
        elif subcommand == "fit":
            rank_zero_info(
                f"{_weights_name(module)}: a new head for the data's {model.num_classes} classes "
                f"({_held_head(model)}), trained from random initialization"
            )
        return
    if subcommand in EVALUATIONS:
        try:
            check_label_names(model, classes, data)
        except ValueError as err:
            raise CheckpointError(f"{_weights_name(module)}: {err}; nothing was written") from err
        return
    names = model.pretrained_cfg.get("label_names")
    if names and classes is not None and tuple(map(str, names)) != tuple(map(str, classes)):
        rank_zero_warn(
            f"{_weights_name(module)}: the head is kept, and its outputs, trained as {shown_classes(names)}, stand "
            f"for {shown_classes(classes)} in {data} ({class_difference(names, classes)}): the fit retrains what "
            "each of them means"
        )


def warn_of_unloaded_tag(module: L.LightningModule) -> None:
    """One warning where a new fit names a weights tag (``--model.model_name crate_cct4_3x2_32.cifar10``) and loads
    no weights: timm's ``create_model`` builds a tag's architecture without its weights unless ``pretrained`` is
    set, so the run starts from random initialization under a name that reads as those weights."""
    name = str((getattr(module, "hparams", None) or {}).get("model_name") or "")
    if names_weights_tag(name):
        rank_zero_warn(
            f"--model.model_name {name} names the weights of a tag, which timm does not load without pretrained: "
            "this run starts from random initialization; --model.model_kwargs '{pretrained: true}' starts it from "
            "them"
        )


def warn_of_seen_images(pretrained_file: str, identity: dict[str, Any]) -> None:
    """One warning where a run starts from weights trained on its data split otherwise (the digits with another
    ``split_seed`` or ``val_fraction``): some of its validation images trained those weights, so its val
    accuracy is not that of held-out images. Only the digits are split by settings, so the file (which may be
    large) is read again only for them."""
    if identity.get("source") != "digits":
        return
    if changes := split_changes(read_checkpoint(pretrained_file), identity):
        rank_zero_warn(
            f"--model.pretrained_file {pretrained_file} was trained on this data split otherwise "
            f"({'; '.join(changes)}): some of this run's validation images trained those weights, so its val "
            "accuracy is not that of held-out images; split the data as that run did for a held-out figure"
        )
