"""Where the checkpoints that ship with the package lie, and the pretrained tags that point at them."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

__all__ = [
    "CIFAR10_CLASSES",
    "DIGITS_EVAL_TRANSFORM",
    "cifar10_cfg",
    "cifar10_simdino_cfg",
    "digits_cfg",
    "shipped_checkpoint",
]

# CIFAR-10's classes in label order (the sorted class folders, as torchvision numbers them too)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# the digits' classes in label order: the digit each label stands for
DIGITS_LABELS = tuple(str(digit) for digit in range(10))
# how the digits become a model's input (crate.data.digits): each 8x8 image resized whole and bilinearly, as timm's
# data-config settings (with mean and std 0.5 per channel)
DIGITS_EVAL_TRANSFORM = {"interpolation": "bilinear", "crop_pct": 1.0, "crop_mode": "center"}


def shipped_checkpoint(filename: str) -> str:
    """Path of a file of ``crate.checkpoints`` (the repository's ``checkpoints/`` folder)."""
    try:
        return str(importlib.resources.files("crate.checkpoints") / filename)
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return str(Path(__file__).resolve().parents[2] / "checkpoints" / filename)


# In a default_cfgs table, the key "<arch>.*" listed after "<arch>.digits" keeps the untagged, untrained
# cfg (3 channels, 1000 classes) as the architecture's default: timm would otherwise make the tag with
# weights the default. The weights are asked for by name: "<arch>.digits".


def digits_cfg(variant: str, base: dict[str, Any]) -> dict[str, Any]:
    """The pretrained cfg of ``<variant>.digits``: trained on the embedded digits (1 channel, 10 classes named
    "0".."9"), each 8x8 image resized whole and bilinearly to 32 pixels and normalised with mean and std 0.5, so
    timm's eval transform (``resolve_data_config`` + ``create_transform``) of a digit as an 8-bit gray image
    (value * 255 / 16) gives the tensor training validated on."""
    return dict(
        base,
        file=shipped_checkpoint(f"{variant}.digits.safetensors"),
        num_classes=10,
        input_size=(1, 32, 32),
        **DIGITS_EVAL_TRANSFORM,
        mean=(0.5,),
        std=(0.5,),
        label_names=DIGITS_LABELS,
        license="mit",
    )


def cifar10_cfg(variant: str, base: dict[str, Any]) -> dict[str, Any]:
    """The pretrained cfg of ``<variant>.cifar10``: trained on CIFAR-10's train images at 32 pixels (3 channels,
    10 classes), validated on the fixed 5,000-image val split. Mean, std, crop 1.0 and the 32-pixel input are
    what training normalised with, so timm's eval transform (``resolve_data_config`` + ``create_transform``) of
    a CIFAR-10 image gives the tensor training validated on."""
    return dict(
        base,
        file=shipped_checkpoint(f"{variant}.cifar10.safetensors"),
        num_classes=10,
        input_size=(3, 32, 32),
        crop_pct=1.0,
        label_names=CIFAR10_CLASSES,
        license="mit",
        notes=(
            "trained from scratch on CIFAR-10's train split (45,000 images); accuracy on its 5,000-image val split",
        ),
    )


def cifar10_simdino_cfg(variant: str, base: dict[str, Any]) -> dict[str, Any]:
    """The pretrained cfg of ``<variant>.cifar10_simdino``: an encoder (no classifier, ``num_classes=0``)
    pretrained by SimDINO self-distillation on CIFAR-10's train images without their labels, scored by weighted
    k-NN and a linear probe of its frozen features on the val split. Input and normalisation as
    :func:`cifar10_cfg`."""
    return dict(
        cifar10_cfg(variant, base),
        file=shipped_checkpoint(f"{variant}.cifar10_simdino.safetensors"),
        num_classes=0,
        label_names=None,
        notes=(
            "self-supervised (SimDINO) on CIFAR-10's train split (45,000 images, labels unused); an encoder: "
            "k-NN and linear-probe accuracy of its features on the 5,000-image val split are on its card",
        ),
    )
