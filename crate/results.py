"""Accuracy of every shipped pretrained tag on its dataset's evaluation split, in timm's results format.

    python -m crate.results                 # writes results/results-<dataset>.csv (the val split)
    python -m crate.results --split test    # results/results-<dataset>-test.csv, and the test figure on each card

(also ``make results``). A shipped tag is a zoo tag whose weights lie in the installed package
(``checkpoints/``); each is evaluated on the validation split of the data config its file records, with the
model built by ``timm.create_model(tag, pretrained=True)``. Encoders (tags with no classifier, such as
``crate_nano_patch4_32.cifar10_simdino``) have no top-1 to report; their cards hold their k-NN and probe scores.
Columns as timm's ``validate.py`` writes them:
model, img_size, top1, top1_err, top5, top5_err (percent), param_count (millions), crop_pct, interpolation;
rows by top-1, best first. Tags whose weights live on a hub are not evaluated here (no network).

``--split test`` scores each tag on the ``test/`` folder beside its recorded data (CIFAR-10's official test
split: ``make cifar10-data`` extracts it) exactly as a user of timm would: ``torchvision``'s ``ImageFolder``
with ``timm.data.create_transform(**resolve_data_config({}, model=model))``. Tags are chosen on val; the test
figure is measured once, after the choice, and written beside the val figure on each card (``--no-cards``:
only the CSV).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import timm
import timm.data
import torch
from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder

import crate.models  # noqa: F401  (registers the zoo)
from crate.lit.data.folder import DataRootError
from crate.model_card import card_markdown
from crate.models import check_model_name, in_zoo, read_checkpoint
from crate.output_paths import OutputPathError, check_output_folder
from crate.run import held_out_set, held_out_topk, read_record
from crate.run.held_out import check_label_names

__all__ = [
    "COLUMNS",
    "NoTestSplit",
    "OtherData",
    "dataset_name",
    "evaluate_tag",
    "main",
    "record_on_card",
    "shipped_tags",
    "timm_test_set",
]

COLUMNS = ("model", "img_size", "top1", "top1_err", "top5", "top5_err", "param_count", "crop_pct", "interpolation")


def shipped_tags(classifiers: bool = True) -> list[str]:
    """The zoo's pretrained tags whose weights file lies on this machine (the package's ``checkpoints/``): the
    classifiers, or with ``classifiers=False`` the encoders (no classifier)."""
    return sorted(tag for tag in timm.list_pretrained() if _is_shipped(tag) and _is_encoder(tag) != classifiers)


def _is_shipped(tag: str) -> bool:
    """A tag of the zoo whose weights file lies on this machine (and records the data its run held out)."""
    cfg = timm.models.get_pretrained_cfg(tag)
    return in_zoo(tag) and cfg is not None and bool(cfg.file) and Path(cfg.file).is_file()


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


def timm_test_set(root: Path, model: torch.nn.Module) -> Dataset:
    """``root/test`` as ``ImageFolder`` with the model's own timm evaluation transform; refused where the folder
    is missing or its classes are not the model's."""
    folder = Path(root) / "test"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no test split at {folder}: put the test images in {folder}/<class>/ (for CIFAR-10: make cifar10-data)"
        )
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    dataset = ImageFolder(str(folder), transform=transform)
    check_label_names(model, dataset.classes, str(folder))
    return dataset


class NoTestSplit(ValueError):
    """A tag whose data has no test split (scikit-learn's digits: train and validation only)."""


class OtherData(ValueError):
    """``--data-root`` names other data than a tag's run held out (another number of validation images)."""


def _card_val_images(tag: str) -> int | None:
    """The number of validation images the tag's run held out, as its card records it (None: no card)."""
    card = _card_folder(tag) / f"{tag}.json"
    return json.loads(card.read_text()).get("val_images") if card.is_file() else None


def evaluate_tag(tag: str, split: str = "val", data_root: str | None = None) -> tuple[str, dict[str, Any]]:
    """(dataset name, the tag's row) on the validation split its file records, or with ``split="test"`` on the
    ``test/`` folder beside that data (``data_root``: where its image folder lies now; the digits lie in none and
    ignore it). On val, a ``data_root`` whose split holds another number of images than the tag's card says its
    run held out raises :class:`OtherData`: it is other data (CIFAR-10's folder for a tag trained on a subset of
    it). A name timm does not know raises a ValueError that names the close matches or the architecture's tags."""
    check_model_name(tag, pretrained=True, files_too=False)
    model = timm.create_model(tag, pretrained=True).eval()
    data_config = read_record(read_checkpoint(model.pretrained_cfg["file"])).data_config
    if data_config is None:
        raise ValueError("its file records no data config; re-export it with crate.export")
    recorded_root = (data_config.get("init_args") or {}).get("root")
    if recorded_root is None:  # data that lies in no folder (the digits ship with scikit-learn): nothing moved
        if data_root:
            print(f"crate-results: {tag}: its data lies in no folder; --data-root left aside for it", file=sys.stderr)
        data_root = None
    if split == "test":
        root = data_root or recorded_root
        if root is None:
            raise NoTestSplit(f"its data ({data_config['class_path']}) has no test split: score it with --split val")
        dataset = timm_test_set(Path(root), model)
    else:
        dataset = held_out_set(data_config, model, {"root": data_root} if data_root else None)
        held_out = _card_val_images(tag)
        if data_root and held_out is not None and len(dataset) != held_out:
            raise OtherData(
                f"{Path(data_root) / 'val'} holds {len(dataset):,} validation images, but its run held out "
                f"{held_out:,} (its card; trained on {recorded_root}): --data-root names other data than its run's"
            )
    accuracy = held_out_topk(model, dataset, (1, 5))
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
        "images": len(dataset),
    }
    return dataset_name(data_config), row


def _card_folder(tag: str) -> Path:
    """Where a shipped tag's card lies: beside its weights."""
    return Path(timm.models.get_pretrained_cfg(tag).file).parent


def record_on_card(tag: str, row: dict[str, Any], cards: Path) -> Path | None:
    """Write the tag's test top-1 into its card (``<cards>/<tag>.json`` and ``.md``); None where it has none."""
    card_path = cards / f"{tag}.json"
    if not card_path.is_file():
        return None
    card = json.loads(card_path.read_text())
    names = timm.models.get_pretrained_cfg(tag).label_names
    if not card.get("label_names") and names:  # files exported before the cards named their classes
        card["label_names"] = list(names)
    card["test_accuracy"] = round(row["top1"] / 100, 5)  # the row's 3 decimals of a percent, without float noise
    card["test_images"] = row["images"]
    card_path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    card_path.with_suffix(".md").write_text(card_markdown(card), encoding="utf-8")
    return card_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="crate-results", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out-dir", default="results", type=os.path.expanduser, help="where results-<dataset>.csv are written"
    )
    parser.add_argument(
        "--tags", nargs="*", help="tags to evaluate (default: every shipped tag); their rows replace theirs in the CSV"
    )
    parser.add_argument("--split", choices=("val", "test"), default="val", help="the split scored (default val)")
    parser.add_argument(
        "--data-root",
        default=None,
        type=os.path.expanduser,
        help="where the tags' image folder lies now, if it moved (a tag trained on other data is skipped; the "
        "digits lie in no folder and are scored as they are)",
    )
    parser.add_argument("--no-cards", action="store_true", help="with --split test: leave the cards as they are")
    args = parser.parse_args(argv)
    try:  # before any tag is scored or card written
        check_output_folder(args.out_dir, "--out-dir", "the results")
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    except OutputPathError as err:
        parser.error(str(err))
    except OSError as err:  # a folder that cannot be made there: said before minutes of scoring, not after
        parser.error(f"--out-dir {args.out_dir}: cannot create it ({err.strerror}); give a folder you can write")
    tags = args.tags or shipped_tags()
    for tag in tags:  # a mistyped tag is refused before minutes of scoring the others (and writing their cards)
        try:
            check_model_name(tag, pretrained=True, files_too=False)
        except ValueError as err:
            parser.exit(2, f"crate-results: error: {tag}: {str(err).splitlines()[0]}\n")
    others = [tag for tag in tags if not _is_shipped(tag)]
    if others:  # timm's own tags and the hub's CRATE-alpha files record no run whose held-out images score them
        parser.exit(
            2,
            f"crate-results: error: {', '.join(others)}: not one of the zoo's shipped tags (crate.results scores a tag "
            "on the held-out data its file records); score other weights with train.py validate or crate.interpret\n",
        )
    encoders = [tag for tag in tags if _is_encoder(tag)]
    if encoders:
        parser.exit(
            2,
            f"crate-results: error: {', '.join(encoders)}: an encoder (no classifier) has no top-1; "
            "its card (checkpoints/<tag>.md) holds its k-NN and linear-probe scores\n",
        )
    tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
    scored: list[tuple[str, dict[str, Any]]] = []
    for tag in tags:
        try:
            dataset, row = evaluate_tag(tag, args.split, args.data_root)
        except FileNotFoundError as err:
            if args.tags:  # asked for by name: its data must be here
                flag = "; --data-root DIR: where it lies now" if isinstance(err, DataRootError) else ""
                parser.exit(2, f"crate-results: error: {tag}: {str(err).splitlines()[0]}{flag}\n")
            # every shipped tag by default: one whose data is not on this machine (CIFAR-10 before
            # `make cifar10-data`) is left out, said so, and the others are written
            print(f"crate-results: skipped {tag}: its data is not here ({str(err).splitlines()[0]})", file=sys.stderr)
            continue
        except (NoTestSplit, OtherData) as err:
            if args.tags:
                parser.exit(2, f"crate-results: error: {tag}: {err}\n")
            print(f"crate-results: skipped {tag}: {err}", file=sys.stderr)  # every shipped tag: digits among them
            continue
        except (RuntimeError, ValueError) as err:
            parser.exit(2, f"crate-results: error: {tag}: {str(err).splitlines()[0]}\n")
        tables[dataset].append(row)
        scored.append((tag, row))
        print(f"{dataset} {args.split}: {tag} top1 {row['top1']:.3f} on {row['images']:,} images")
    if not tables:  # every tag skipped: a run that scored nothing must not read as a success
        parser.exit(
            2,
            f"crate-results: error: no tag could be scored on {args.split}: none has its data here; for CIFAR-10 run "
            "make cifar10-data, or give --data-root the folder that holds its train/, val/ and test/\n",
        )
    if args.split == "test" and not args.no_cards:  # once every tag asked for is scored: a refusal changes no card
        for tag, row in scored:
            record_on_card(tag, row, _card_folder(tag))
    suffix = "" if args.split == "val" else f"-{args.split}"
    for dataset, rows in tables.items():
        path = Path(args.out_dir) / f"results-{dataset}{suffix}.csv"
        if args.tags and path.is_file():  # tags asked for by name: their rows replace theirs, the others stay
            scored = {row["model"] for row in rows}
            with path.open(newline="") as handle:
                rows = rows + [row for row in csv.DictReader(handle) if row["model"] not in scored]
            for row in rows:
                row["top1"] = float(row["top1"])
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(sorted(rows, key=lambda r: (-r["top1"], r["model"])))
        print(f"wrote {path} ({len(rows)} models)")


if __name__ == "__main__":
    main()
