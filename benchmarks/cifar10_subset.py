"""A reduced CIFAR-10 image folder for recipe trials: N training and M validation images a class, a fixed draw
from data/cifar10's train and val splits, as symbolic links (nothing copied), and the whole official test split
beside them (``test``, a link to the source's, where it has one: a tag trained on the subset is scored on the
same 10,000 test images as any other).

    python benchmarks/cifar10_subset.py data/cifar10 data/cifar10_10k --train 1000 --val 200

The draw: for each class, its sorted file names shuffled by ``random.Random(seed)`` (seed 0), the first N (M).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path


def write_subset(source: Path, target: Path, per_class: dict[str, int], seed: int = 0) -> dict[str, int]:
    """Link ``per_class[split]`` files of each class of ``source/split`` into ``target/split``; return the counts."""
    counts = {}
    for split, count in per_class.items():
        classes = sorted(p for p in (source / split).iterdir() if p.is_dir())
        if not classes:
            raise FileNotFoundError(f"{source / split} holds no class folders; run make cifar10-data first")
        total = 0
        for folder in classes:
            files = sorted(p for p in folder.iterdir() if p.is_file())
            random.Random(seed).shuffle(files)
            out = target / split / folder.name
            out.mkdir(parents=True, exist_ok=True)
            for file in files[:count]:
                link = out / file.name
                if not link.exists():
                    link.symlink_to(file.resolve())
                total += 1
        counts[split] = total
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--train", type=int, default=1000, help="training images a class")
    parser.add_argument("--val", type=int, default=200, help="validation images a class")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = write_subset(args.source, args.target, {"train": args.train, "val": args.val}, args.seed)
    test = args.target / "test"
    if (args.source / "test").is_dir() and not test.exists():
        test.symlink_to((args.source / "test").resolve(), target_is_directory=True)
    print(f"wrote {args.target}: " + ", ".join(f"{split} {n:,}" for split, n in counts.items()))


if __name__ == "__main__":
    main()
