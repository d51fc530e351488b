"""Export a Lightning checkpoint of the zoo as a timm-loadable safetensors file with a model card.

    python -m crate.export logs/crate_nano_digits/version_0/checkpoints/last.ckpt \\
        --out checkpoints/crate_nano_patch4_32.digits.safetensors

(also installed as ``crate-export``). Writes ``NAME.safetensors`` (its metadata records the architecture,
its settings and the run's data config), the card ``NAME.md`` and its data ``NAME.json`` (architecture,
data, recipe, epochs, validation accuracy measured on the exported file over the data the run held out,
the command that produced it, the line that loads it, sha256). Every classifier exports: the zoo's, and
timm's own models trained with ``train.py`` (a ResNet), whose file and hub folder timm builds alone. A
self-distillation run (``pretrain.py --objective simdino``) exports its teacher backbone as an encoder
(``num_classes=0``): its card scores the exported file's frozen features by weighted k-NN and a linear probe
on the run's val split, beside the same architecture at its random initialisation and any ``--control
LABEL=CHECKPOINT`` encoders (a CRATE-MAE run, say). A masked-pretraining checkpoint is refused: probe or
fine-tune it first.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import timm
import torch
from safetensors.torch import save_file
from timm.layers import to_2tuple
from timm.models import get_pretrained_cfg
from torch.utils.data import Dataset

from crate.errors import DataError, one_line
from crate.interpret import EvalData, load_data
from crate.interpret.controls import initialised, remember_build
from crate.interpret.frozen_features import frozen_feature_scores, same_inputs, unscorable
from crate.model_card import card_markdown, hub_card
from crate.models import (
    CheckpointError,
    checkpoint_filter_fn,
    create_classifier,
    file_sha256,
    in_zoo,
    read_checkpoint,
)
from crate.models.checkpoint import EVAL_TRANSFORM_KEY, LABEL_NAMES_KEY
from crate.output_paths import check_output_folder
from crate.run import NoDataFolder, Run, build_model, held_out_accuracy, held_out_set, validation_split_note
from crate.run.held_out import model_input_size
from crate.run.record import DATA_CONFIG_KEY

__all__ = ["export_checkpoint", "load_call", "load_line", "main"]


# what timm reads from a pretrained cfg to build one of its own models from a file as it was trained (the zoo's
# models read these from the file's metadata)
TIMM_CFG_KEYS = ("input_size", "num_classes", "mean", "std", "interpolation", "crop_pct", "crop_mode", "label_names")


def load_call(
    model_name: str, out: Path, model_config: dict[str, Any], timm_model: torch.nn.Module | None = None
) -> tuple[str, dict[str, Any]]:
    """(name, keyword arguments) of the ``timm.create_model`` call that builds the exported model from its
    file: the pretrained tag where one names this file, else the architecture with the file and every
    setting it was trained with. ``timm_model``: the exported model, where it is one of timm's own, which
    timm builds from the call alone: the call carries the pretrained cfg entries its run gave it (input,
    classes, image statistics, class names), and an image size only where the model takes one."""
    tag = out.name[: -len(".safetensors")]
    if "." in tag:
        try:
            cfg_file = get_pretrained_cfg(tag).file
        except (RuntimeError, AttributeError, KeyError):  # not a registered tag
            cfg_file = None
        if cfg_file and Path(cfg_file).resolve() == out.resolve():
            return tag, {"pretrained": True}
    settings = {k: v for k, v in model_config.items() if k != "model_kwargs" and v is not None}
    overlay: dict[str, Any] = {"file": str(out)}
    if timm_model is not None:
        overlay.update({k: v for k, v in timm_model.pretrained_cfg.items() if k in TIMM_CFG_KEYS})
        if "img_size" not in inspect.signature(type(timm_model)).parameters:  # a CNN takes any size
            settings.pop("img_size", None)
    return model_name, {
        "pretrained": True,
        "pretrained_cfg_overlay": overlay,
        **settings,
        **model_config["model_kwargs"],
    }


def load_line(name: str, kwargs: dict[str, Any]) -> str:
    """``timm.create_model(...)`` written out as Python (the card's load line)."""
    return f"timm.create_model({name!r}, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def _card_files(out: Path) -> list[Path]:
    """The files an export to ``out`` writes: the weights and their card (JSON and markdown)."""
    return [out, out.with_suffix(".json"), out.with_suffix(".md")]


def _set_aside(paths: list[Path]) -> dict[Path, Path]:
    """Move each of ``paths`` that exists to ``<name>.previous`` beside it, so that an export that fails puts
    back the file it was replacing; return {path: where it went}. A ``.previous`` left by an export that was
    killed holds the only good copy, so it stops the export instead of being overwritten."""
    asides = {path: path.with_name(path.name + ".previous") for path in paths}
    for path, aside in asides.items():
        if aside.exists():
            raise FileExistsError(
                f"{aside} exists: an earlier export to {path} was interrupted, and it holds the file that was "
                f"there before. Move it back to {path.name} (or delete it) and export again"
            )
    moved = {path: aside for path, aside in asides.items() if path.exists()}
    for path, aside in moved.items():
        path.replace(aside)
    return moved


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _write_hub_folder(
    model: torch.nn.Module, run: Run, folder: Path, label_names: list[str] | None, model_config: dict[str, Any]
) -> None:
    """timm's hub layout: ``config.json`` (architecture, num_classes, num_features, global_pool, model_args,
    pretrained_cfg, label_names), written by timm's own ``save_for_hf``, and ``model.safetensors``, whose
    metadata records the run as an exported file's does (the data it held out, its class names), so the folder's
    weights read alone say what they are."""
    from timm.models import save_for_hf

    input_size = tuple(model.pretrained_cfg["input_size"])
    labels = {"label_names": label_names} if label_names else None
    save_for_hf(
        model, str(folder), model_config=labels, safe_serialization=True, data_config={"input_size": input_size}
    )
    # the same tensors again, now with the run in the metadata: timm writes the file without any
    _write_weights(model, run, folder / "model.safetensors", "float32", model_config, label_names)
    for path in folder.iterdir():
        _usual_mode(path)


def _usual_mode(path: Path) -> None:
    """safetensors writes through a private temporary file (mode 0600): give it the mode other new files get."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _control_model_name(label: str, path: Path) -> str:
    """The model a ``--control`` file records; refused in one line when it is missing, unreadable or nameless."""
    if not path.is_file():
        raise FileNotFoundError(f"--control {label}={path}: no such file")
    try:
        name = read_checkpoint(path).model_name
    except CheckpointError as err:
        raise CheckpointError(f"--control {label}={path}: {err}") from err
    if name is None:
        raise CheckpointError(f"--control {label}={path}: the file records no model name; give a run's .ckpt")
    return name


def _score_encoder(
    reloaded: torch.nn.Module, build: tuple[str, dict[str, Any]], data: EvalData, controls: dict[str, Path]
) -> dict[str, dict[str, Any]]:
    """Frozen-feature scores of the exported encoder (as its load line builds it), of the same build at its
    seed-0 initialisation (where the zoo's recipes start training) and of each control encoder."""
    remember_build(reloaded, *build)
    scored = {"this file": frozen_feature_scores(reloaded, data)}
    scored["random init (seed 0)"] = frozen_feature_scores(initialised(reloaded, 0), data)
    for label, path in controls.items():
        name = _control_model_name(label, path)
        control = build_model(name, path)[0]
        if not same_inputs(reloaded, control):
            raise CheckpointError(
                f"--control {label}={path}: {name} takes other inputs (mean, std or size) than the "
                "exported encoder, so one data set cannot score both; score it apart"
            )
        scored[label] = frozen_feature_scores(control, data)
    return scored


def _check_targets(out: Path | None, hub: Path | None, dtype: str, overwrite: bool) -> None:
    """Refuse what the export cannot write, before anything is read or written."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if out is None and hub is None:
        raise ValueError("give --out FILE.safetensors, --hub-dir DIR, or both")
    if out is not None and out.suffix != ".safetensors":
        raise ValueError(f"--out must end in .safetensors, got {out}")
    if out is not None and not overwrite and (existing := [p for p in _card_files(out) if p.exists()]):
        raise FileExistsError(
            f"--out {existing[0]} exists and was left as it is; pass --overwrite to replace it, or give another --out"
        )
    if hub is not None and hub.exists() and (not hub.is_dir() or any(hub.iterdir())):
        raise ValueError(f"--hub-dir {hub} exists and is not an empty folder; give a new one")
    if out is not None:
        check_output_folder(out.parent, "--out", f"{out.name} and its card")
    if hub is not None:
        check_output_folder(hub.parent, "--hub-dir", "the hub folder")


def _probe_command(run: Run, ckpt: Path) -> str:
    """A linear probe of a masked-pretraining run's encoder on the data it pretrained on: the digits' probe config,
    or for an image folder the folder config with the probe's settings (the encoder alone, frozen)."""
    root = ((run.data_config or {}).get("init_args") or {}).get("root")
    if root is None:
        return f"train.py fit --config configs/crate_mae_nano_digits_probe.yaml --model.pretrained_file {ckpt}"
    return (
        f"train.py fit --config configs/crate_nano_imagefolder.yaml --data.root {root} --model.model_name "
        f"{run.model_name} --model.model_kwargs '{{decoder_depth: 0, global_pool: avg}}' --model.freeze_backbone true "
        f"--model.pretrained_file {ckpt}"
    )


def _open_exportable(ckpt: Path, controls: dict[str, Path]) -> Run:
    """The run, refused where it yields nothing to export (masked pretraining) or where ``--control`` does not
    apply (a classifier) or names a missing, corrupt or nameless file."""
    run = Run.open(ckpt)
    if not run.is_encoder and not run.has_classifier:
        raise CheckpointError(
            f"{run.checkpoint.describe()}: a masked-pretraining run (pretrain.py), with no classifier to export. "
            f"Probe or fine-tune it first on its data ({_probe_command(run, ckpt)}) and export that run."
        )
    if controls and not run.is_encoder:
        raise ValueError("--control scores encoders beside an exported encoder; this checkpoint is a classifier")
    for label, path in controls.items():  # a missing, corrupt or nameless control stops export before any work
        _control_model_name(label, path)
    return run


def _input_size(model: torch.nn.Module, in_chans: int, img_size: int | list[int] | None) -> tuple[int, ...]:
    """(channels, height, width) of the images the model was trained on: a transformer's from its patch
    embedding, a convolutional network's (which takes any size) from the run's image size."""
    if getattr(model, "patch_embed", None) is not None:
        return model_input_size(model)
    if img_size is None:
        return (in_chans, *model.pretrained_cfg["input_size"][1:])
    return (in_chans, *to_2tuple(img_size))


def _load_weights(model: torch.nn.Module, run: Run) -> None:
    """The run's weights into the model: a zoo model's through the zoo's filter, one of timm's own as they lie
    (every tensor named as the model names it)."""
    if in_zoo(run.model_name):
        model.load_state_dict(checkpoint_filter_fn(run.checkpoint.state_dict, model))
        return
    try:
        model.load_state_dict(run.checkpoint.state_dict)
    except RuntimeError as err:
        detail = " ".join(str(err).split())
        raise CheckpointError(
            f"{run.checkpoint.describe()}: its weights do not fit {run.model_name} as its run records it "
            f"({detail if len(detail) <= 200 else detail[:200] + ' ...'})"
        ) from err


def _exported_model(run: Run, dtype: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """(the model as its stored weights give it, in eval mode; the build settings its file records). Its
    pretrained cfg says what the run made of its images (input size, statistics, interpolation) and its classes:
    the hub folder's ``config.json`` carries it, and timm builds one of its own models from it."""
    hp = run.hparams
    model_kwargs = run.checkpoint.architecture_kwargs
    in_chans, img_size = hp.get("in_chans", 3), hp.get("img_size")
    model = create_classifier(run.model_name, run.num_classes, in_chans, img_size, **model_kwargs)
    _load_weights(model, run)
    # one of timm's own models keeps of its cfg what describes the architecture, not timm's pretrained weights
    # (their tag, license, test crop; their pooled size, at their image size)
    own = model.pretrained_cfg if in_zoo(run.model_name) else {}
    shape = {
        k: v
        for k, v in model.pretrained_cfg.items()
        if k in ("architecture", "fixed_input_size", "first_conv", "classifier")
    }
    model.pretrained_cfg = model.default_cfg = {
        **own,
        **shape,
        **run.checkpoint.eval_transform,
        "input_size": _input_size(model, in_chans, img_size),
        "num_classes": run.num_classes,
    }
    model = model.to(DTYPES[dtype]).float() if dtype != "float32" else model  # what the stored weights give
    model_config = {
        "num_classes": run.num_classes,
        "in_chans": in_chans,
        "img_size": img_size,
        "model_kwargs": model_kwargs,
    }
    return model.eval(), model_config


def _write_weights(
    model: torch.nn.Module,
    run: Run,
    out: Path,
    dtype: str,
    model_config: dict[str, Any],
    label_names: list[str] | None,
) -> None:
    """The safetensors file: the weights as ``dtype``, and in its metadata the architecture, the run's data and
    the class names in label order."""
    metadata = {"model_name": run.model_name, "format": "pt", "model_config": json.dumps(model_config)}
    if run.data_config is not None:
        metadata[DATA_CONFIG_KEY] = json.dumps(run.data_config)
    if label_names:
        metadata[LABEL_NAMES_KEY] = json.dumps(label_names)
    if run.checkpoint.eval_transform:
        metadata[EVAL_TRANSFORM_KEY] = json.dumps(run.checkpoint.eval_transform)
    state = {
        k: (v.to(DTYPES[dtype]) if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out), metadata=metadata)
    _usual_mode(out)


def _check_split_sizes(run: Run, read: dict[str, int]) -> None:
    """Refuse data whose splits hold other numbers of images than the run's record (an image folder's
    ``split_sizes``): a folder given as the run's data that is other data (the full CIFAR-10 for a run on a
    subset of it) would put its accuracy on the card as the run's held-out figure."""
    recorded = (run.record.data_identity or {}).get("split_sizes") or {}
    changed = [
        f"{split} {recorded[split]:,} -> {count:,}"
        for split, count in read.items()
        if split in recorded and recorded[split] != count
    ]
    if changed:
        raise DataError(
            f"the data read holds other images than the run trained and held out (images of {'; '.join(changed)}): "
            "it is not the run's data; give --data-root the folder the run trained on, or --no-accuracy"
        )


def _read_held_out(
    run: Run, model: torch.nn.Module, overrides: dict[str, Any] | None
) -> tuple[Dataset | None, EvalData | None]:
    """(the validation split, for a classifier) or (None, both splits whole, for an encoder: the k-NN bank and
    probe data, and what is scored)."""
    try:
        if run.is_encoder:
            held_out, eval_data = None, load_data(run.data_config, model, limit=None, overrides=overrides)
        else:
            held_out, eval_data = held_out_set(run.data_config, model, overrides), None
    except NoDataFolder as err:
        raise DataError(str(err)) from err
    except (FileNotFoundError, DataError, ValueError) as err:
        raise DataError(
            f"{one_line(err)} (the run's data must be readable to measure the file's accuracy: "
            "--data-root DIR where it lies now, or --no-accuracy)"
        ) from err
    if eval_data is not None:
        _check_split_sizes(run, {"train": len(eval_data.train_images), "val": len(eval_data.val_images)})
    else:
        _check_split_sizes(run, {"val": len(held_out)})
    return held_out, eval_data


@dataclass
class _Measured:
    """What the card reports of the exported file's quality (or why it reports none)."""

    accuracy: float | None = None
    images: int | None = None
    note: str = ""
    frozen: dict[str, dict[str, Any]] | None = None
    bank_images: int | None = None


def _measure(
    load: tuple[str, dict[str, Any]],
    held_out: Dataset | None,
    eval_data: EvalData | None,
    controls: dict[str, Path],
    hub: Path | None,
    out: Path | None,
) -> _Measured:
    """Rebuild the file through its load line and score it on the run's held-out data: a classifier's accuracy, an
    encoder's frozen features beside its random init and the controls; a hub folder written beside the file must
    give the same scores."""
    reloaded = timm.create_model(load[0], **load[1])  # the card's load line
    folder = timm.create_model(f"local-dir:{hub}", pretrained=True) if hub is not None and out is not None else None
    if eval_data is not None:
        if why := unscorable(eval_data):
            return _Measured(note=f"its frozen features are not scored: {why}")
        frozen = _score_encoder(reloaded, load, eval_data, controls)
        if folder is not None and frozen_feature_scores(folder, eval_data) != frozen["this file"]:
            raise CheckpointError(f"the hub folder {hub} does not reproduce {out}'s k-NN and probe scores")
        return _Measured(None, len(eval_data.val_images), "", frozen, len(eval_data.train_images))
    accuracy = held_out_accuracy(reloaded, held_out)
    if folder is not None and held_out_accuracy(folder, held_out) != accuracy:
        raise CheckpointError(f"the hub folder {hub} does not reproduce {out}'s accuracy")
    return _Measured(accuracy, len(held_out))


def _card(
    name: str,
    run: Run,
    model: torch.nn.Module,
    measured: _Measured,
    weights: Path,
    dtype: str,
    load: tuple[str, dict[str, Any]],
    train_command: str,
    label_names: list[str] | None,
    model_settings: dict[str, Any],
) -> dict[str, Any]:
    """The card's data: the model and the build settings its file records beside its name (``model_settings``:
    the run's ``model_kwargs`` that shape the model, such as the ISTA step's ``lambd``), the run's data and
    recipe, what was measured, the file and how to load it."""
    return {
        "name": name,
        "timm_name": name if "." in name else run.model_name,
        "model_name": run.model_name,
        "model_settings": model_settings,
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_classes": run.num_classes,
        "label_names": label_names,
        "num_features": model.num_features,
        "input_size": list(model.pretrained_cfg["input_size"]),
        "data": run.data_description,
        "data_config": run.data_config or None,
        "epochs": run.epochs,
        "batches_into_epoch": run.batches_into_epoch,
        "global_step": run.record.global_step,
        "planned_steps": run.record.planned_steps,
        **({"best_by": run.record.best_by} if run.record.best_by else {}),
        "val_accuracy": measured.accuracy,
        "val_images": measured.images,
        **({"val_split_note": note} if (note := validation_split_note(run.data_config or {})) else {}),
        **({"frozen_features": measured.frozen, "bank_images": measured.bank_images} if measured.frozen else {}),
        **({"classical_baseline": run.classical_baseline} if run.classical_baseline else {}),
        "accuracy_note": measured.note,
        "recipe": run.recipe(),
        "file": weights.name,
        "dtype": dtype,
        "sha256": file_sha256(weights),
        "load": load_line(*load),
        "train_command": train_command or _config_line(run),
        "export_command": shlex.join(["python", "-m", "crate.export", *sys.argv[1:]]) if sys.argv[1:] else "",
    }


def _config_line(run: Run) -> str:
    """The card's training command where none is given: the run's config, or that no readable config lies beside
    it (a run of a Python script, a checkpoint moved away from its run folder, a config that no longer parses)."""
    if run.config:
        return f"# trained with the LightningCLI config {run.config_file}"
    where = f"beside its checkpoints/ folder ({run.config_file})"
    return f"# training command unknown: no readable config.yaml of the run {where}"


def export_checkpoint(
    ckpt: str | Path,
    out: str | Path | None = None,
    train_command: str = "",
    dtype: str = "float32",
    data_overrides: dict[str, Any] | None = None,
    measure: bool = True,
    hub_dir: str | Path | None = None,
    controls: dict[str, str | Path] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``out`` (safetensors, floating tensors stored as ``dtype``) with its card, and/or ``hub_dir`` (a
    hub folder: ``config.json``, ``model.safetensors`` and the card as ``README.md``, loadable with
    ``timm.create_model("local-dir:DIR", pretrained=True)`` and ready for ``push_to_hf_hub``), from a
    Lightning checkpoint; return the card's data. The card's accuracy is measured on what was written
    (reloaded through timm), over the validation split of the data config the checkpoint records
    (``data_overrides`` of its settings, such as ``{"root": DIR}`` for data that moved; ``measure=False``
    leaves it unmeasured). A checkpoint that records no data is exported without an accuracy, and its card
    says so. A self-distillation run is written as an encoder (no classifier) whose card scores its frozen
    features, its random initialisation's and those of ``controls`` ({label: checkpoint}) on the same split.
    An existing ``out`` (or its card) is replaced only with ``overwrite``; otherwise nothing is written."""
    out = Path(out) if out is not None else None
    hub = Path(hub_dir) if hub_dir is not None else None
    _check_targets(out, hub, dtype, overwrite)
    controls = {label: Path(path) for label, path in (controls or {}).items()}
    run = _open_exportable(Path(ckpt), controls)
    model, model_config = _exported_model(run, dtype)
    previous = _set_aside(_card_files(out)) if out is not None else {}
    written: list[Path] = []
    try:
        measuring = run.data_config is not None and measure
        held_out, eval_data = _read_held_out(run, model, data_overrides) if measuring else (None, None)
        # the class names every written file records: the run's, or those of the data it held out; an encoder
        # (no classifier) names none, whatever classes scored its features
        named = run.checkpoint.label_names or getattr(held_out, "classes", None)
        labels = list(named) if named and getattr(model, "num_classes", None) != 0 else None
        if labels:
            model.pretrained_cfg = model.default_cfg = {**model.pretrained_cfg, "label_names": tuple(labels)}
        if out is not None:
            written.append(out)
            _write_weights(model, run, out, dtype, model_config, labels)
            load = load_call(run.model_name, out, model_config, None if in_zoo(run.model_name) else model)
        if hub is not None:
            hub.mkdir(parents=True, exist_ok=True)
            written.append(hub)
            _write_hub_folder(model, run, hub, labels, model_config)
            if out is None:
                load = (f"local-dir:{hub}", {"pretrained": True})
        if run.data_config is None:
            measured = _Measured(note="the checkpoint records no data config, and no config.yaml lies beside its run")
        elif not measure:
            measured = _Measured(note="export was asked not to measure it")
        else:
            measured = _measure(load, held_out, eval_data, controls, hub, out)
        weights = out if out is not None else hub / "model.safetensors"
        name = out.name[: -len(".safetensors")] if out is not None else hub.name
        file_dtype = dtype if out is not None else "float32"
        settings = model_config["model_kwargs"]
        card = _card(name, run, model, measured, weights, file_dtype, load, train_command, labels, settings)
        if out is not None:
            written += [out.with_suffix(".json"), out.with_suffix(".md")]
            out.with_suffix(".json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
            out.with_suffix(".md").write_text(card_markdown(card), encoding="utf-8")
        if hub is not None:
            _write_hub_card(card, hub)
    except BaseException:
        for path in written:  # nothing half-written is left behind
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        for path, aside in previous.items():  # and what was there before comes back
            aside.replace(path)
        raise
    for aside in previous.values():
        aside.unlink()
    return card


def _write_hub_card(card: dict[str, Any], hub: Path) -> None:
    """The hub folder's README.md: the card, with the folder's own load line, file, dtype and checksum."""
    weights = hub / "model.safetensors"
    folder_card = dict(
        card,
        load=f'timm.create_model("local-dir:{hub}", pretrained=True)',
        file=weights.name,
        dtype="float32",
        sha256=file_sha256(weights),
    )
    (hub / "README.md").write_text(hub_card(folder_card), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="crate-export", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=os.path.expanduser, help="a .ckpt written by train.py")
    parser.add_argument(
        "--out", default=None, type=os.path.expanduser, help="the .safetensors file to write (card written next to it)"
    )
    parser.add_argument(
        "--hub-dir",
        default=None,
        type=os.path.expanduser,
        help="a new folder to write as a hub repository (config.json, weights, README.md)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file and its card")
    parser.add_argument("--train-command", default="", help="the command that trained the checkpoint, for the card")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="storage type of the weights")
    parser.add_argument(
        "--data-root", default=None, type=os.path.expanduser, help="where the run's data lies now, if it moved"
    )
    parser.add_argument(
        "--no-accuracy", action="store_true", help="do not measure the accuracy (the card then states none)"
    )
    parser.add_argument(
        "--control",
        action="append",
        default=[],
        metavar="LABEL=CHECKPOINT",
        help="an encoder export (self-distillation run): another encoder to score beside it, e.g. "
        "'CRATE-MAE=logs/.../last.ckpt' (repeatable)",
    )
    args = parser.parse_args(argv)
    overrides = {"root": args.data_root} if args.data_root else None
    controls = {}
    for entry in args.control:
        label, sep, path = entry.partition("=")
        if not sep or not label.strip() or not path:
            parser.error(f"--control takes LABEL=CHECKPOINT, got {entry!r}")
        controls[label.strip()] = path
    try:
        card = export_checkpoint(
            args.checkpoint,
            args.out,
            args.train_command,
            args.dtype,
            overrides,
            not args.no_accuracy,
            args.hub_dir,
            controls,
            args.overwrite,
        )
    except (FileNotFoundError, FileExistsError, CheckpointError, DataError, ValueError) as err:
        parser.exit(2, f"crate-export: error: {one_line(err)}\n")
    accuracy, frozen = card["val_accuracy"], card.get("frozen_features")
    measured = ")"
    if accuracy is not None:
        measured = f", val accuracy {accuracy:.4f} on {card['val_images']} held-out images)"
    elif frozen:
        measured = ", encoder; " + "; ".join(
            f"{label}: k-NN {entry['knn_top1']:.4f}, probe {entry['linear_probe_top1']:.4f}"
            for label, entry in frozen.items()
        )
        measured += f" on {card['val_images']} held-out images)"
    written = [f"{args.out} (with its card {Path(args.out).with_suffix('.md').name} and .json)"] if args.out else []
    if args.hub_dir:
        written.append(f"{args.hub_dir}/ ({', '.join(sorted(p.name for p in Path(args.hub_dir).iterdir()))})")
    print(f"wrote {' and '.join(written)}; {card['parameters']:,} parameters{measured.rstrip(')')}")


if __name__ == "__main__":
    main()
