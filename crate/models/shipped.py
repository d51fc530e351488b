"""Where the checkpoints that ship with the package lie, and the pretrained tags that point at them."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

__all__ = ["digits_cfg", "shipped_checkpoint"]


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
    """The pretrained cfg of ``<variant>.digits``: trained on the embedded digits (1 channel, 10 classes)."""
    return dict(
        base,
        file=shipped_checkpoint(f"{variant}.digits.safetensors"),
        num_classes=10,
        input_size=(1, 32, 32),
        mean=(0.5,),
        std=(0.5,),
        license="mit",
    )
