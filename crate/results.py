"""Accuracy of every shipped pretrained tag on its dataset's evaluation split, in timm's results format.

    python -m crate.results            # writes results/results-<dataset>.csv

(also ``make results``). A shipped tag is a zoo tag whose weights lie in the installed package
(``checkpoints/``); each is evaluated on the validation split of the data config its file records, with the
model built by ``timm.create_model(tag, pretrained=True)``. Encoders (tags with no classifier, such as
``crate_nano_patch4_32.cifar10_simdino``) have no top-1 to report; their cards hold their k-NN and probe scores.
Columns as timm's ``validate.py`` writes them:
model, img_size, top1, top1_err, top5, top5_err (percent), param_count (millions), crop_pct, interpolation;
rows by top-1, best first. Tags whose weights live on a hub are not evaluated here (no network).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import timm

import crate.models  # noqa: F401  (registers the zoo)
from crate.models import read_checkpoint
from crate.run import held_out_set, held_out_topk

__all__ = ["COLUMNS", "dataset_name", "evaluate_tag", "main", "shipped_tags"]

COLUMNS = ("model", "img_size", "top1", "top1_err", "top5", "top5_err", "param_count", "crop_pct", "interpolation")


def shipped_tags(classifiers: bool = True) -> list[str]:
    """The zoo's pretrained tags whose weights file lies on this machine (the package's ``checkpoints/``): the
    classifiers, or with ``classifiers=False`` the encoders (no classifier)."""
    tags = []
    for tag in timm.list_pretrained():
        cfg = timm.models.get_pretrained_cfg(tag)
        in_zoo = timm.models.model_entrypoint(tag.split(".")[0]).__module__.startswith("crate.")
        if in_zoo and cfg.file and Path(cfg.file).is_file() and _is_encoder(tag) != classifiers:
            tags.append(tag)
    return sorted(tags)


def _is_encoder(tag: str) -> bool:
    """A registered pretrained tag without a classifier (``num_classes`` 0)."""
    try:
        cfg = timm.models.get_pretrained_cfg(tag)
    except (RuntimeError, KeyError):
        return False
    return cfg is not None and cfg.num_classes == 0


def dataset_name(data_config: dict[str, Any]) -> str:
    """``digits``, ``cifar10``/``cifar100``, an image folder's name, or the DataModule class."""
    kind = data_config["class_path"].rpartition(".")[2]
    args = data_config.get("init_args") or {}
    if kind == "DigitsDataModule":
        return "digits"
    if kind == "CIFARDataModule":
        return str(args.get("dataset", "cifar10"))
    if "root" in args:
        return Path(str(args["root"])).name
    return kind


def evaluate_tag(tag: str) -> tuple[str, dict[str, Any]]:
    """(dataset name, the tag's row) on the validation split its file records."""
    model = timm.create_model(tag, pretrained=True).eval()
    held = read_checkpoint(model.pretrained_cfg["file"])
    if held.data_config is None:
        raise ValueError(f"{tag}: its file records no data config; re-export it with crate.export")
    accuracy = held_out_topk(model, held_out_set(held.data_config, model), (1, 5))
    cfg = model.pretrained_cfg
    row = {
        "model": tag,
        "img_size": cfg["input_size"][-1],
        "top1": round(100 * accuracy[1], 3),
        "top1_err": round(100 * (1 - accuracy[1]), 3),
        "top5": round(100 * accuracy[5], 3),
        "top5_err": round(100 * (1 - accuracy[5]), 3),
        "param_count": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "crop_pct": cfg.get("crop_pct"),
        "interpolation": cfg.get("interpolation"),
    }
    return dataset_name(held.data_config), row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="crate-results", description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default="results", help="where results-<dataset>.csv are written")
    parser.add_argument("--tags", nargs="*", help="tags to evaluate (default: every shipped tag)")
    args = parser.parse_args(argv)
    tags = args.tags or shipped_tags()
    encoders = [tag for tag in tags if _is_encoder(tag)]
    if encoders:
        parser.exit(
            2,
            f"crate-results: error: {', '.join(encoders)}: an encoder (no classifier) has no top-1; "
            "its card (checkpoints/<tag>.md) holds its k-NN and linear-probe scores\n",
        )
    tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tag in tags:
        try:
            dataset, row = evaluate_tag(tag)
        except FileNotFoundError as err:
            if args.tags:  # asked for by name: its data must be here
                parser.exit(2, f"crate-results: error: {tag}: {str(err).splitlines()[0]}\n")
            # every shipped tag by default: one whose data is not on this machine (CIFAR-10 before
            # `make cifar10-data`) is left out, said so, and the others are written
            print(f"crate-results: skipped {tag}: its data is not here ({str(err).splitlines()[0]})", file=sys.stderr)
            continue
        except (RuntimeError, ValueError) as err:
            parser.exit(2, f"crate-results: error: {tag}: {str(err).splitlines()[0]}\n")
        tables[dataset].append(row)
        print(f"{dataset}: {tag} top1 {row['top1']:.3f}")
    for dataset, rows in tables.items():
        path = Path(args.out_dir) / f"results-{dataset}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(sorted(rows, key=lambda r: (-r["top1"], r["model"])))
        print(f"wrote {path} ({len(rows)} models)")


if __name__ == "__main__":
    main()
