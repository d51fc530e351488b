"""Model names and pretrained tags as timm knows them, with errors that name what exists."""

from __future__ import annotations

import difflib

import timm

from .convert import CheckpointError
from .hub import hub_weights, is_hub_name

__all__ = ["architecture_of", "check_model_name", "in_zoo", "names_weights_tag", "pretrained_tags"]


def architecture_of(name: str) -> str:
    """A model name without its weights tag (``crate_nano_patch4_32.digits`` -> ``crate_nano_patch4_32``); a hub
    name (``local-dir:DIR``, ``hf-hub:ORG/NAME``: a colon) as given. Where weights come from a file, the tag would name
    weights that are not the file's."""
    return name if ":" in name else name.partition(".")[0]


def in_zoo(name: str) -> bool:
    """Whether ``name`` (an architecture or one of its tags) is one of the zoo's models, which read any checkpoint
    layout and their files' records themselves, rather than one of timm's own (a hub name is neither)."""
    arch = architecture_of(name)
    return timm.models.is_model(arch) and timm.models.model_entrypoint(arch).__module__.startswith("crate.")


def names_weights_tag(name: str) -> bool:
    """Whether ``name`` is one of timm's pretrained tags (``crate_nano_patch4_32.digits``), not an architecture."""
    return architecture_of(name) != name and name in timm.list_pretrained(name)


def pretrained_tags(arch: str) -> list[str]:
    """The pretrained tags of an architecture (``crate_nano_patch4_32.digits``, ...), as timm lists them."""
    return timm.list_pretrained(f"{arch}.*")


def check_model_name(name: str, pretrained: bool = False, files_too: bool = True) -> None:
    """Raise a ValueError that names what exists when timm knows no model ``name`` (close matches among
    the models and tags), when ``name`` carries a tag its architecture does not have (its tags), or, with
    ``pretrained``, when it names an architecture without weights of its own (its tags, or none).
    ``files_too``: the caller also takes a checkpoint file, and the message offers one."""
    if is_hub_name(name):  # timm's own create_model reads these; the zoo's tools take model and file apart
        named = "the architecture its config.json names as the model, and its weights file (model.safetensors)"
        if name.startswith("local-dir:"):  # a folder here: read what it holds (a repository would need the network)
            try:
                architecture, weights = hub_weights(name)
                named = f"its architecture, {architecture}, as the model, and its weights, {weights},"
            except (OSError, CheckpointError):
                pass
        raise ValueError(
            f"{name} names a hub folder or repository, not an architecture: give {named} as the file to load"
        )
    arch, _, tag = name.partition(".")
    if not timm.is_model(arch):
        known = timm.list_models() + timm.list_pretrained()
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
        hint = f" Close matches: {', '.join(close)}." if close else ""
        raise ValueError(
            f"Unknown model {name!r}.{hint} The zoo lists its models with "
            "`import crate, timm; timm.list_models('crate*')` and its weights with `timm.list_pretrained('crate*')`."
        )
    tags = pretrained_tags(arch)
    if tag and name in tags or not tag and (not pretrained or timm.is_model_pretrained(arch)):
        return
    if not tags:
        raise ValueError(f"{arch} has no pretrained weights" + (": give a checkpoint file for it" if files_too else ""))
    what = f"has no pretrained tag {tag!r}" if tag else "names no weights by itself"
    file_hint = " or give a checkpoint file" if files_too else ""
    raise ValueError(f"{arch} {what}: pick one of its tags ({', '.join(tags)}){file_hint}")
