"""The one door for checkpoint files: read any format the zoo meets, say what it holds, refuse clearly.

Every path that loads weights from a file goes through :func:`read_checkpoint`: timm's pretrained path
of every zoo family (``pretrained_cfg_overlay=dict(file=...)`` and the shipped ``.digits`` tags),
``train.py --ckpt_path``, ``crate.interpret`` and ``crate.export``. It reads

- Lightning ``.ckpt`` files written by ``train.py`` (weights under ``state_dict`` with ``model.`` prefixes,
  the run's hyper-parameters under ``hyper_parameters``);
- safetensors files, told by their bytes under any name (the zoo's exports carry ``model_name`` in their metadata);
- torch files (``.pth``/``.pt``/``.bin``, or no extension) holding a state dict, possibly under
  ``state_dict`` or ``model``, with ``module.`` prefixes: the official CRATE, CRATE-alpha and timm layouts;
  training checkpoints (ToST's: ``model``, ``model_ema``, ``optimizer``, and the run's ``args`` as an
  ``argparse.Namespace``) are read with ``weights_only=True``, the namespace allowed as the one
  non-tensor class, so nothing else is unpickled; ``ema=True`` takes ``model_ema`` instead of ``model``;

What a file records beside its weights travels with it, as written, in ``Checkpoint.record`` (a Lightning
checkpoint's other entries, a safetensors file's metadata); ``crate.run.read_record`` reads what it says of the
run. Read here are only what the weights are: the architecture's settings and the class names in label order.

It raises :class:`CheckpointError` (a missing file: ``FileNotFoundError``) with what the file holds and
what to do. One rule for ``num_classes`` with a file, for every family: ``num_classes=N`` means the file
has N classes (a mismatch is an error); to fine-tune a file with M classes on N, pass
``pretrained_cfg_overlay=dict(file=..., num_classes=M)`` with ``num_classes=N`` and the head is reset.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from timm.models import get_pretrained_cfg, get_pretrained_cfg_value

from .convert import CheckpointError, detect_layout, to_zoo_layout, unwrap_state_dict
from .hub import folder_weights, hub_file, hub_weights, hub_weights_file, is_hub_name
from .names import architecture_of, check_model_name, in_zoo
from .registry import settings_given

__all__ = [
    "EVAL_TRANSFORM_KEY",
    "EVAL_TRANSFORM_SETTINGS",
    "LABEL_NAMES_KEY",
    "Checkpoint",
    "CheckpointError",
    "file_sha256",
    "pretrained_kwargs",
    "read_checkpoint",
    "recorded_settings",
    "settings_built_from_file",
    "weights_file",
]

_LIGHTNING_HPARAMS = ("model_name", "num_classes", "in_chans", "img_size", "model_kwargs")
# the class names in label order (a Lightning checkpoint's entry, an export's safetensors metadata)
LABEL_NAMES_KEY = "label_names"
# the timm data config whose evaluation transform gives, from the data's images, the tensors the run evaluated on
# (a Lightning checkpoint's entry, an export's safetensors metadata): these settings of it
EVAL_TRANSFORM_KEY = "eval_transform"
EVAL_TRANSFORM_SETTINGS = ("mean", "std", "interpolation", "crop_pct", "crop_mode")
# constructor settings a run may pass that say how it started, not what the architecture is
_NOT_ARCHITECTURE = {"pretrained", "pretrained_cfg", "pretrained_cfg_overlay"}
_NOT_ARCHITECTURE |= {"drop_path_rate", "drop_rate", "patch_drop_rate"}  # regularisers: off at evaluation
# settings a file's model is not rebuilt with unless asked: a part its weights fill when it is built and that is
# left out otherwise (a masked-pretraining run's decoder), and the pooling, which a file may be read under otherwise
# (the family's filter says where that changes its predictions)
_CALLERS_CHOICE = {"decoder_depth"}
_READ_OTHERWISE = {"global_pool"}


@dataclass
class Checkpoint:
    """What a checkpoint file holds: its weights in their own layout, and what is known of the model."""

    path: str
    state_dict: dict[str, torch.Tensor]
    layout: str  # crate_official | crate_alpha_official | timm
    source: str  # lightning | safetensors | torch
    # model_name, num_classes, in_chans, img_size, model_kwargs, label_names, eval_transform
    hparams: dict[str, Any] = field(default_factory=dict)
    # what the file holds beside its weights, as written: a Lightning checkpoint's other entries, a safetensors
    # file's metadata (strings); empty for plain torch files. crate.run.read_record reads what it says of the run
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def model_name(self) -> str | None:
        return self.hparams.get("model_name")

    @property
    def label_names(self) -> tuple[str, ...] | None:
        """The class names in label order, where the file records them (an export's metadata, a Lightning
        checkpoint's entry); None for files that do not."""
        classes = self.hparams.get("label_names")
        return tuple(str(name) for name in classes) if classes else None

    @property
    def eval_transform(self) -> dict[str, Any]:
        """The settings of timm's data config (mean, std, interpolation, crop) that turn the data's images into
        the tensors the run evaluated on, where the file records them; empty for files that do not."""
        recorded = self.hparams.get(EVAL_TRANSFORM_KEY)
        if not isinstance(recorded, Mapping):
            return {}
        return {k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items() if k in EVAL_TRANSFORM_SETTINGS}

    def img_size(self, patch_size: tuple[int, int] | None = None) -> int | tuple[int, int] | None:
        """Input size the weights were trained at: recorded by the run, or read off a square position
        embedding (one class token) given the patch size; None where neither tells."""
        recorded = self.hparams.get("img_size")
        if recorded:
            return tuple(recorded) if isinstance(recorded, (list, tuple)) else int(recorded)
        pos = self.zoo_state_dict.get("pos_embed")
        if pos is None or patch_size is None or pos.ndim != 3:
            return None
        side = int(round((pos.shape[1] - 1) ** 0.5))
        if side * side != pos.shape[1] - 1 or patch_size[0] != patch_size[1]:
            return None
        return side * patch_size[0]

    @property
    def architecture_kwargs(self) -> dict[str, Any]:
        """The run's ``model_kwargs`` that shape the architecture (``decoder_depth``, ``global_pool``, ...),
        without those that only said how it started (``pretrained``, ``drop_path_rate``, ...)."""
        return {k: v for k, v in (self.hparams.get("model_kwargs") or {}).items() if k not in _NOT_ARCHITECTURE}

    @cached_property
    def zoo_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights renamed to the zoo's timm layout (official layouts converted), computed once."""
        return to_zoo_layout(self.state_dict)

    @property
    def num_classes(self) -> int | None:
        """Rows of the classifier (None: no classifier in the file)."""
        head = self.zoo_state_dict.get("head.weight")
        return int(head.shape[0]) if head is not None and head.ndim == 2 else self.hparams.get("num_classes")

    def classes_for(self, model_name: str) -> int | None:
        """Rows of the classifier ``model_name``'s architecture names (timm's cfg ``classifier``: a ResNet's ``fc``,
        a ConvNeXt's ``head.fc``), else :attr:`num_classes`: a file of one of timm's own models has no ``head``."""
        try:
            names = get_pretrained_cfg_value(architecture_of(model_name), "classifier") or "head"
        except (RuntimeError, KeyError, ValueError):  # a name timm resolves otherwise (a hub folder): the zoo's head
            names = "head"
        for name in (names,) if isinstance(names, str) else names:
            weight = self.zoo_state_dict.get(f"{name}.weight")
            if weight is not None and weight.ndim == 2:
                return int(weight.shape[0])
        return self.num_classes

    def in_chans(self, patch_size: tuple[int, int] | None = None, first_conv: str = "patch_embed.proj") -> int | None:
        """Input channels: from the first layer (``first_conv`` of the model's cfg), a conv patch embedding
        or stem, or a flat patch embedding given the patch size."""
        state = self.zoo_state_dict
        weight = state.get(f"{first_conv}.weight")
        if weight is not None and weight.ndim == 4:
            return int(weight.shape[1])
        if weight is not None and weight.ndim == 2 and patch_size is not None:
            return int(weight.shape[1]) // (patch_size[0] * patch_size[1])
        return self.hparams.get("in_chans")

    @property
    def width_and_depth(self) -> tuple[int | None, int]:
        state = self.zoo_state_dict
        pos = state.get("pos_embed")
        depth = len({key.split(".")[1] for key in state if key.startswith("blocks.")})
        return (int(pos.shape[-1]) if pos is not None else None), depth

    def describe(self) -> str:
        """One line for error messages: what the file holds."""
        width, depth = self.width_and_depth
        parts = [f"{self.model_name}" if self.model_name else f"a {self.layout}-layout model"]
        if width is not None:
            parts.append(f"width {width}, {depth} layers")
        if self.num_classes is not None:
            parts.append(f"{self.num_classes} classes")
        if (channels := self.hparams.get("in_chans")) is not None:
            parts.append(f"{channels} input channel{'' if channels == 1 else 's'}")
        if self.hparams.get("img_size") is not None:
            parts.append(f"{self.hparams['img_size']}px images")
        return f"{self.path} holds {', '.join(parts)} ({self.source} file)"


def _is_safetensors(path: Path) -> bool:
    """A ``.safetensors`` name, or the format's own start under any name: an 8-byte little-endian header length
    that fits the file, then the header's JSON object (a torch zip starts ``PK``, a legacy pickle with 0x80)."""
    if path.suffix == ".safetensors":
        return True
    try:
        with path.open("rb") as handle:
            head = handle.read(9)
    except OSError:
        return False
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return int.from_bytes(head[:8], "little") <= path.stat().st_size - 8


def _lightning_hparams(loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture a Lightning checkpoint's module was built with, its class names and evaluation transform."""
    hyper = loaded["hyper_parameters"]
    hparams = {k: hyper[k] for k in _LIGHTNING_HPARAMS if k in hyper}
    if isinstance(loaded.get(EVAL_TRANSFORM_KEY), Mapping):
        hparams[EVAL_TRANSFORM_KEY] = dict(loaded[EVAL_TRANSFORM_KEY])
    names = loaded.get(LABEL_NAMES_KEY)
    identity = loaded.get("data_identity")  # files written before the names had their own entry kept them here
    if not names and isinstance(identity, Mapping):
        names = identity.get("classes")
    return {**hparams, "label_names": list(names)} if names else hparams


def _load_failure(err: Exception) -> str:
    """What torch.load found wrong, in one line. The weights-only unpickler wraps its finding in advice to
    load with ``weights_only=False``, which would run whatever code a bad file holds: keep only the finding."""
    text = str(err)
    finding = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
    if finding:
        return finding.group(1).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _load(path: Path) -> tuple[Mapping[str, Any], str, dict[str, Any], dict[str, Any]]:
    """(what the file holds, its source, the model's hparams it records, what it records beside its weights)."""
    if _is_safetensors(path):
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
                state = {key: handle.get_tensor(key) for key in handle.keys()}
        except Exception as err:  # safetensors raises its own error types
            raise CheckpointError(
                f"checkpoint {path} is corrupt or truncated: not a readable safetensors file ({err}); "
                "re-export or re-download it, or pick another file"
            ) from err
        hparams = {"model_name": metadata["model_name"]} if "model_name" in metadata else {}
        try:
            # an export's model_config: num_classes, in_chans, img_size, model_kwargs
            hparams.update(json.loads(metadata["model_config"]) if metadata.get("model_config") else {})
            for key in (LABEL_NAMES_KEY, EVAL_TRANSFORM_KEY):
                if metadata.get(key):
                    hparams[key] = json.loads(metadata[key])
        except json.JSONDecodeError as err:
            raise CheckpointError(
                f"checkpoint {path} has unreadable metadata ({err}): its weights cannot be told apart from another "
                "model's; re-export it (python -m crate.export) or pick another file"
            ) from err
        return state, "safetensors", hparams, dict(metadata)
    try:
        # training checkpoints carry their run's argparse.Namespace: a bag of attributes, safe to rebuild
        with torch.serialization.safe_globals([argparse.Namespace]):
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # the unpickler raises many types (KeyError, UnpicklingError, ...) on bad bytes
        first = _load_failure(err)
        refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if refused:
            raise CheckpointError(
                f"checkpoint {path} holds a Python object other than tensors ({refused.group(1)}), which is not "
                "unpickled here since that could run code; load it where you trust it and save its state dict "
                "(torch.save(checkpoint['model'], 'weights.pth'))"
            ) from err
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated, or not a torch checkpoint ({first}); "
            "re-export or re-download it, or pick another file"
        ) from err
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"checkpoint {path} holds a {type(loaded).__name__}, not a state dict")
    if isinstance(loaded.get("hyper_parameters"), Mapping) and "state_dict" in loaded:
        record = {key: value for key, value in loaded.items() if key != "state_dict"}
        return loaded, "lightning", _lightning_hparams(loaded), record
    return loaded, "torch", {}, {}


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes as hex, read in chunks: the checksum a card gives for its weights file and a
    run records for the file its weights started from."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _hub_weights_hint(name: str) -> str:
    """Where a hub name's weights file lies: a folder's own file, else where a folder or repository keeps it."""
    prefix, _, rest = name.partition(":")
    if prefix == "local-dir":
        try:
            return folder_weights(Path(rest))
        except CheckpointError:
            pass
    return "model.safetensors in the folder or repository"


def read_checkpoint(path: str | Path, ema: bool = False) -> Checkpoint:
    """Read a checkpoint file of any supported format (see the module docstring); ``ema``: the moving
    average of the weights (``model_ema``) of a training checkpoint that holds one."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():  # a hub folder: its weights, or the whole folder by its timm name
            raise CheckpointError(
                f"checkpoint {path} is a hub folder, not a checkpoint file; pass its weights file "
                f"({path / 'model.safetensors'}); crate.interpret also takes the folder as --model local-dir:{path}"
            )
        raise CheckpointError(
            f"checkpoint {path} is a folder, not a checkpoint file; pass a file inside it "
            "(a run's checkpoints are <run>/version_N/checkpoints/*.ckpt)"
        )
    if not path.is_file():
        if is_hub_name(str(path)):  # a model name of timm's where a file belongs
            raise CheckpointError(
                f"{path} names a hub folder or repository, not a checkpoint file: pass its weights file "
                f"({_hub_weights_hint(str(path))}), or load it by that name with "
                f"timm.create_model('{path}', pretrained=True)"
            )
        raise FileNotFoundError(f"checkpoint file {path} does not exist; check the path")
    loaded, source, hparams, record = _load(path)
    if ema and source == "torch":
        if not isinstance(loaded.get("model_ema"), Mapping):
            raise CheckpointError(f"checkpoint {path} holds no model_ema (keys: {sorted(loaded)[:8]}); leave ema out")
        loaded = loaded["model_ema"]
    state = unwrap_state_dict(loaded)
    tensors = {k: v for k, v in state.items() if torch.is_tensor(v)}
    if not tensors:
        raise CheckpointError(f"checkpoint {path} holds no weights (keys: {sorted(state)[:8]})")
    return Checkpoint(str(path), tensors, detect_layout(tensors), source, hparams, record)


def _tag_cfg(kwargs: Mapping[str, Any], variant: str) -> Any:
    """The pretrained cfg of the call: timm passes a tag (``crate_nano_patch4_32.digits``) by its name."""
    cfg = kwargs.get("pretrained_cfg")
    if isinstance(cfg, str):
        return get_pretrained_cfg(f"{variant}.{cfg}")
    return cfg if cfg is not None else get_pretrained_cfg(variant)


def _cfg_value(cfg: Any, key: str) -> Any:
    return getattr(cfg, key, None) if not isinstance(cfg, Mapping) else cfg.get(key)


def weights_file(variant: str, kwargs: Mapping[str, Any]) -> str | None:
    """The weights file ``timm.create_model(variant, pretrained=True, **kwargs)`` reads: the overlay's file, a hub
    folder's weights (``local-dir:DIR``), a hub repository's file (``hf-hub:org/name``, or a tag with
    ``hf_hub_id``), or a tag's own file. ``variant`` may name its tag (``crate_nano_patch4_32.digits``)."""
    variant, _, tag = variant.partition(".")
    if tag and "pretrained_cfg" not in kwargs:
        kwargs = {**kwargs, "pretrained_cfg": tag}
    overlay = kwargs.get("pretrained_cfg_overlay") or {}
    if isinstance(overlay, Mapping) and overlay.get("file"):
        return overlay["file"]
    cfg = _tag_cfg(kwargs, variant)
    source, file = _cfg_value(cfg, "source"), _cfg_value(cfg, "file")
    if source == "local-dir" and file:
        return folder_weights(Path(file))
    hub_id = _cfg_value(cfg, "hf_hub_id")
    if hub_id and (source == "hf-hub" or not file):
        repo, _, revision = hub_id.partition("@")
        named = _cfg_value(cfg, "hf_hub_filename")
        return hub_file(repo, named, revision or None) if named else hub_weights_file(repo, revision or None)
    return file


def _cfg_input_size(kwargs: Mapping[str, Any], variant: str) -> tuple[int, ...]:
    cfg = _tag_cfg(kwargs, variant)
    size = getattr(cfg, "input_size", None) or (cfg.get("input_size") if isinstance(cfg, Mapping) else None)
    return tuple(size or (3, 224, 224))


def _pair(size: Any) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, (int, float)) else (int(size[0]), int(size[1]))


def _same(a: Any, b: Any) -> bool:
    """Equal settings, a JSON record's lists read as the tuples a caller passes."""
    return (tuple(a) if isinstance(a, list) else a) == (tuple(b) if isinstance(b, list) else b)


def _settings_from_file(checkpoint: Checkpoint, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The build settings a zoo run's file records (its ``model_kwargs``) that a model built from it with
    ``kwargs`` takes from the file: those the caller did not give (:func:`settings_given`; a value the model name
    gives of its own is not the caller's). Input size and channels, the classes and a decoder are left to their
    own rules."""
    given = settings_given(kwargs)
    return {
        key: value
        for key, value in checkpoint.architecture_kwargs.items()
        if key not in ("in_chans", "img_size", "num_classes", *_CALLERS_CHOICE) and key not in given
    }


def _file_read(variant: str, kwargs: Mapping[str, Any]) -> Checkpoint | None:
    """The file ``timm.create_model(variant, **kwargs)`` reads into a zoo model, or None (no file, or no zoo
    model). A hub name (``local-dir:DIR``) reads the weights its folder or repository holds."""
    if not kwargs.get("pretrained"):
        return None
    if is_hub_name(variant):
        architecture, path = hub_weights(variant)
        overlay = kwargs.get("pretrained_cfg_overlay") or {}
        path = overlay.get("file") or path if isinstance(overlay, Mapping) else path
    else:
        architecture, path = variant.partition(".")[0], weights_file(variant, kwargs)
    if not in_zoo(architecture):
        return None
    return read_checkpoint(path) if path else None


def recorded_settings(variant: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every build setting the file ``timm.create_model(variant, **kwargs)`` reads records (a zoo run's
    ``model_kwargs``), a masked-pretraining run's ``decoder_depth`` included; none where it reads no file."""
    checkpoint = _file_read(variant, kwargs)
    return checkpoint.architecture_kwargs if checkpoint is not None else {}


def settings_built_from_file(variant: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded settings (:func:`_settings_from_file`) that ``timm.create_model(variant, **kwargs)`` builds a
    zoo model with from the file it reads: none where it reads no file or names no zoo model. A run that starts
    from a file records them beside its own ``model_kwargs``, so that its checkpoints and exports build the model
    it trained."""
    checkpoint = _file_read(variant, kwargs)
    return _settings_from_file(checkpoint, kwargs) if checkpoint is not None else {}


def _built_as_recorded(checkpoint: Checkpoint, variant: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the input channels, image size and other build settings the file records where the caller
    gave none, so a file is built as it was trained, as its ``num_classes`` is. The settings that leave every
    weight's shape as it is (the ISTA step's ``lambd`` and ``step_size``, ``num_heads`` at a fixed width) would
    otherwise give a model that loads without an error and computes another function. Where the caller asks for
    another input size or channels, the weights are adapted (input channels folded, position embedding
    resampled); where it asks for another setting, the model is built as asked. Either way one warning line
    names both values: the model then is not the one the weights were trained in."""
    patch = kwargs.get("patch_size")
    patch = _pair(patch) if patch is not None else None
    first_conv = _cfg_value(_tag_cfg(kwargs, variant), "first_conv") or "patch_embed.proj"
    recorded = {"in_chans": checkpoint.in_chans(patch, first_conv), "img_size": checkpoint.img_size(patch)}
    built = dict(kwargs)
    given = settings_given(kwargs)
    for key, value in recorded.items():
        if value is None:
            continue
        if key not in given:
            built[key] = value
            continue
        asked = kwargs[key]
        same = asked == value if key == "in_chans" else _pair(asked) == _pair(value)
        if not same:
            adapted = "input channels folded" if key == "in_chans" else "position embedding resampled"
            warnings.warn(
                f"{checkpoint.path} was trained with {key}={value}; building {variant} with {key}={asked} as asked "
                f"({adapted}); leave {key} out to build it as trained",
                UserWarning,
                stacklevel=4,
            )
    taken = _settings_from_file(checkpoint, kwargs)
    built.update(taken)
    for key, value in checkpoint.architecture_kwargs.items():
        if key in taken or key in recorded or key in ("num_classes", *_CALLERS_CHOICE, *_READ_OTHERWISE):
            continue
        if not _same(kwargs[key], value):
            warnings.warn(
                f"{checkpoint.path} was trained with {key}={value!r}; building {variant} with {key}={kwargs[key]!r} "
                f"as asked, which is not the model its weights were trained in; leave {key} out to build it as "
                "trained",
                UserWarning,
                stacklevel=4,
            )
    return built


def check_file_architecture(checkpoint: Checkpoint, variant: str) -> None:
    """Refuse a file that records another architecture than ``variant``, naming the model to create for it."""
    if checkpoint.model_name and architecture_of(checkpoint.model_name) != variant:
        raise CheckpointError(
            f"{checkpoint.describe()}: it does not fit {variant}; create {checkpoint.model_name!r} to load it"
        )


def per_channel(values: Sequence[float], chans: int) -> tuple[float, ...]:
    """A statistic (mean, std) of other channels for a model of ``chans`` input channels: their mean on every
    channel, as timm averages them (with a warning)."""
    return (sum(values) / len(values),) * chans


def pretrained_kwargs(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor kwargs of a zoo family with the pretrained file read through :func:`read_checkpoint`.

    The file (from ``pretrained_cfg_overlay``, a hub folder or repository, or a pretrained tag's cfg) is read
    here and handed to timm as an in-memory state dict (``pretrained_cfg_overlay=dict(file=..., ema=True)``:
    a training checkpoint's ``model_ema``); a Lightning file of another architecture is refused;
    ``num_classes=N`` with a file and no ``num_classes`` in the overlay means the file has N classes (the
    family's filter then refuses a mismatch instead of silently resetting the head). The model is built with
    the input channels and image size the file records unless the call gives others (then with a warning),
    and its ``pretrained_cfg`` carries them (so ``resolve_data_config`` does), the class names the file
    records (``label_names``) and the evaluation transform its run used (mean, std, interpolation, crop), so that
    timm's transform of the run's images gives the tensors its accuracy was measured on. A tag built without its
    weights and with another ``num_classes`` gets no ``label_names``: the tag's names do not name its outputs.
    """
    path = weights_file(variant, kwargs) if pretrained else None
    if path is None:
        overlay = kwargs.get("pretrained_cfg_overlay") or {}
        if pretrained and not (isinstance(overlay, Mapping) and overlay.get("state_dict") is not None):
            # timm would say "No pretrained weights exist" of an architecture whose weights are under its tags
            tag = kwargs.get("pretrained_cfg")
            check_model_name(f"{variant}.{tag}" if isinstance(tag, str) and tag else variant, pretrained=True)
        cfg = _tag_cfg(kwargs, variant)
        held = _cfg_value(cfg, "num_classes")
        given = kwargs.get("num_classes")
        if _cfg_value(cfg, "label_names") and given is not None and given != held and "label_names" not in overlay:
            # a tag's architecture built with another head: the tag's class names do not name its outputs
            kwargs = {**kwargs, "pretrained_cfg_overlay": {**overlay, "label_names": None}}
        return kwargs
    overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
    checkpoint = read_checkpoint(path, ema=bool(overlay.pop("ema", False)))
    check_file_architecture(checkpoint, variant)
    kwargs = _built_as_recorded(checkpoint, variant, kwargs)
    from_overlay = overlay.pop("file", None) is not None
    overlay["state_dict"] = checkpoint.state_dict
    overlay["source"] = None  # the weights are in hand: timm takes them from state_dict, not from a hub
    for key, value in checkpoint.eval_transform.items():  # how the run made tensors of its images, unless asked
        overlay.setdefault(key, value)
    # the weights are adapted to the channels and size the model is built with, so the cfg declares those
    base = _cfg_input_size(kwargs, variant)
    size = _pair(kwargs["img_size"]) if kwargs.get("img_size") is not None else tuple(base[1:])
    overlay.setdefault("input_size", (kwargs.get("in_chans", base[0]), *size))
    chans = overlay["input_size"][0]
    for key in ("mean", "std"):  # per channel of the built model, as timm would average them (with a warning)
        values = overlay.get(key) or _cfg_value(_tag_cfg(kwargs, variant), key)
        if values and len(values) != chans:
            overlay[key] = per_channel(values, chans)
    labels = checkpoint.label_names
    if kwargs.get("num_classes", checkpoint.num_classes) != checkpoint.num_classes:
        overlay["label_names"] = None  # a new head: the tag's class names no longer name its outputs
    elif labels and len(labels) == checkpoint.num_classes:
        overlay.setdefault("label_names", checkpoint.label_names)
    if from_overlay and "num_classes" not in overlay:
        # a file given with num_classes is taken to hold that many classes: a mismatch is then an error
        # that says how to reset the head, instead of a head silently dropped (timm's rule); an encoder's file
        # (no classifier) has none to mismatch, so num_classes gives it a new head
        held = checkpoint.num_classes
        overlay["num_classes"] = 0 if held == 0 else kwargs.get("num_classes", 1000 if held is None else held)
    return dict(kwargs, pretrained_cfg_overlay=overlay)
