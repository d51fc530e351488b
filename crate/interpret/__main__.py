"""``python -m crate.interpret`` (also ``crate-interpret``): any checkpoint to numbers and pictures.

    python -m crate.interpret --model crate_nano_patch4_32 --checkpoint PATH --data digits --out DIR \\
        --compare vit_nano_patch4_32 PATH2 [--compare MODEL3 PATH3 ...] [--masks DIR]
    python -m crate.interpret --model crate_nano_patch4_32 --checkpoint PATH \
        --data configs/crate_nano_imagefolder.yaml --data.root DIR --out DIR

Without ``--data``, each checkpoint is evaluated on the data its run held out (the data config the file
records; ``--data.root DIR`` where that data has moved); a file that records none is evaluated on the
digits with their default split, and says so.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from timm.data import resolve_data_config

from crate.metrics.trace import transformer_blocks
from crate.models import CheckpointError, architecture_of, read_checkpoint
from crate.output_paths import OutputPathError, check_output_folder

from .controls import INIT_SEEDS
from .loading import EvalData, load_data, load_run, resolve_data
from .objective_table import SEEDS_TO_DECIDE
from .report import REPORT_FILES, write_report


def _data_overrides(parser: argparse.ArgumentParser, rest: list[str]) -> dict[str, object]:
    """``--data.KEY VALUE`` pairs (as train.py takes them) -> DataModule settings; anything else is refused."""
    overrides: dict[str, object] = {}
    items = iter(rest)
    for flag in items:
        key, _, value = flag.partition("=")
        if not key.startswith("--data.") or len(key) <= len("--data."):
            parser.error(f"unrecognized argument {flag!r} (DataModule settings are given as --data.KEY VALUE)")
        if not value:
            value = next(items, None)
            if value is None:
                parser.error(f"{key} needs a value")
        overrides[key[len("--data.") :]] = yaml.safe_load(value)
    return overrides


def _checked(
    convert: Callable[[str], float], kind: str, fits: Callable[[float], bool], wanted: str
) -> Callable[[str], float]:
    """An argparse type: ``convert`` the text (refused as not a ``kind``), then refuse a value ``fits`` rejects
    with ``wanted``, what to give instead."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{text} is not {wanted}")
        return value

    return parse


# a count (of images, of seeds): a whole number of at least 1
positive_count = _checked(int, "whole number", lambda n: n >= 1, "a count: give 1 or more")
# a coding-rate precision: a finite number above 0 (eps enters squared, so a negative one would pass for its size)
positive_eps = _checked(
    float, "number", lambda eps: math.isfinite(eps) and eps > 0, "a precision: give a finite number above 0"
)


def say(message: str) -> None:
    """What the evaluation is doing, on stdout (it runs for minutes to tens of minutes on a CPU); errors alone go to
    stderr, as one line."""
    print(f"crate-interpret: {message}", flush=True)


def check_same_input(first_name: str, first: torch.nn.Module, name: str, model: torch.nn.Module) -> None:
    """A comparison sets models of one input side by side (their figures read the same photographs; each model is
    evaluated on its own run's data unless ``--data`` names one): refuse a model of another input (channels, size)."""
    want, got = (resolve_data_config({}, model=m)["input_size"] for m in (first, model))
    if tuple(want) != tuple(got):
        raise ValueError(
            f"--compare {name} takes inputs of {tuple(got)} (channels, height, width) and {first_name} takes "
            f"{tuple(want)}: compare models of one input (channels and size), whose figures read the same photographs"
        )


def check_data_fits(label: str, model: torch.nn.Module, evaluation: EvalData) -> None:
    """Refuse data whose images have another shape than a model of patch tokens takes (a ``--data.img_size`` or
    ``--data.in_chans`` other than its run's), in one line before minutes of evaluation."""
    want, got = tuple(resolve_data_config({}, model=model)["input_size"]), tuple(evaluation.val_images.shape[1:])
    if hasattr(model, "patch_embed") and want != got:
        raise ValueError(
            f"{label} takes images of {want} (channels, height, width), and {evaluation.name} gives {got}: leave "
            "--data.img_size and --data.in_chans out to read the data as the model's run did"
        )


def _file_as_model(path: str, first: bool) -> str:
    """What to say of a checkpoint file given where a model name belongs: the flags that evaluate it, with the
    architecture the file records (or a placeholder where it records none)."""
    try:
        arch = architecture_of(read_checkpoint(path).model_name or "ARCHITECTURE")
    except CheckpointError as err:
        return f"{path} is given as a model name, but it is a file, and not a readable checkpoint: {err}"
    flags = f"--model {arch} --checkpoint {path}" if first else f"--compare {arch} {path}"
    return f"{path} is a checkpoint file, not a model name: pass the architecture it holds and the file ({flags})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="crate-interpret",
        description="Interpretability evaluation of a checkpoint.",
        epilog="DataModule settings, as train.py takes them: --data.KEY VALUE (e.g. --data.root DIR where the run's "
        "images moved, --data.batch_size 64); they change the data each model is evaluated on. Settings that choose "
        "the held-out images (--data.split_seed) must be the run's.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="timm model name, a pretrained tag (NAME.digits), or a hub folder or repository "
        "(local-dir:DIR, hf-hub:ORG/NAME) with its weights",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        type=os.path.expanduser,
        help="checkpoint file (official, Lightning, timm, safetensors)",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="'digits' or a train.py YAML config (its data section); default: the data the checkpoint's run held out",
    )
    parser.add_argument(
        "--out", required=True, type=os.path.expanduser, help="output folder for metrics.json, PNGs and report.md"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier report in --out")
    parser.add_argument(
        "--compare",
        nargs=2,
        action="append",
        metavar=("MODEL", "CHECKPOINT"),
        help="another model to compare (CHECKPOINT '-' for a pretrained tag); repeat for more",
    )
    parser.add_argument(
        "--masks",
        default=None,
        type=os.path.expanduser,
        help="folder of foreground masks mirroring the data's val/ folder",
    )
    parser.add_argument("--eps-official", type=positive_eps, default=0.01, help="eps of the official convention")
    parser.add_argument("--eps-paper", type=positive_eps, default=0.5, help="eps of the paper convention")
    parser.add_argument(
        "--probe-images", type=positive_count, default=128, help="validation images for rates and lenses"
    )
    parser.add_argument(
        "--images", type=positive_count, default=4, help="dataset images in the attention and PCA figures"
    )
    parser.add_argument(
        "--sample-images",
        type=positive_count,
        default=2000,
        help="training and validation images the lenses and probes read, a seeded sample of each split "
        "(accuracy always reads the whole validation split)",
    )
    parser.add_argument(
        "--count-seeds",
        type=positive_count,
        default=SEEDS_TO_DECIDE,
        help="seeds of the untrained architecture each count of layers beating their nulls is read against, "
        f"never fewer than the random init's {len(INIT_SEEDS)} (default {SEEDS_TO_DECIDE}: fewer cannot make a "
        "count a finding, and the report says so)",
    )
    args, rest = parser.parse_known_args(argv)
    try:  # before minutes of evaluation
        check_output_folder(args.out, "--out", "the report", REPORT_FILES, overwrite=args.overwrite)
    except OutputPathError as err:
        parser.error(str(err))
    overrides = _data_overrides(parser, rest)
    pairs = [(args.model, args.checkpoint)] + [tuple(pair) for pair in args.compare or []]
    for index, (name, checkpoint) in enumerate(pairs):
        if checkpoint in (None, "-") and Path(name).is_file():  # a run's file where its architecture belongs
            parser.exit(2, f"crate-interpret: error: {_file_as_model(name, first=index == 0)}\n")
    try:
        models = {}
        for name, checkpoint in pairs:
            say(f"loading {name}" + (f" from {checkpoint}" if checkpoint not in (None, "-") else ""))
            model, recorded = load_run(name, None if checkpoint in (None, "-") else checkpoint)
            transformer_blocks(model)  # a network without them (a ResNet) has nothing to report: one line, now
            if models:
                check_same_input(next(iter(models)), next(iter(models.values()))[0], name, model)
            if args.data is None and recorded is None:
                say(f"{name}: its file records no data; evaluating on the digits (default split)")
            data = resolve_data(args.data, recorded, overrides)
            shown = name if checkpoint in (None, "-") else architecture_of(name)  # the file's weights, not the tag's
            label = shown if shown not in models else f"{shown} (2)"
            evaluation = load_data(data, model, limit=args.sample_images, masks=args.masks)
            check_data_fits(label, model, evaluation)
            if len(evaluation.train_labels.unique()) < 2:
                sampled = len(evaluation.train_labels)
                if args.sample_images is None or sampled < args.sample_images:  # the whole split: one class
                    raise ValueError(
                        f"{label}'s data, {evaluation.name}, holds one class only, and the probes need labelled "
                        "images of two or more: give data of several classes (--data, --data.root)"
                    )
                raise ValueError(
                    f"the training images sampled ({sampled}) hold one class only, and the probes need two or "
                    "more: give --sample-images a larger count"
                )
            models[label] = (model, evaluation)
        results = write_report(
            models,
            args.out,
            images=args.images,
            eps={"official": args.eps_official, "paper": args.eps_paper},
            probe_images=args.probe_images,
            count_seeds=args.count_seeds,
            progress=say,
        )
    except (FileNotFoundError, CheckpointError, ValueError, TypeError) as err:
        parser.exit(2, f"crate-interpret: error: {err}\n")
    for label, result in results.items():
        accuracy = result["val_accuracy"]
        scored = (
            "n/a (no head)"
            if accuracy is None
            else f"{accuracy:.4f} on {result['val_images']} images of {result['data']}"
        )
        print(f"{label}: val accuracy {scored}")
    print(f"wrote {args.out}/report.md, metrics.json and figures")


if __name__ == "__main__":
    main()
