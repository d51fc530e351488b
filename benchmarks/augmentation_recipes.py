"""Augmentation settings of the ImageFolder recipe, compared on digits written out as an image folder.

The digits' fixed split (the DigitsDataModule's 1,437 training and 360 validation images) is saved as PNG
files at a given side and channel count (8x8 upsampled bilinearly; gray, or gray replicated to RGB), and
``configs/crate_nano_imagefolder.yaml`` is trained on the folder once per augmentation setting (``chosen``: the one
the folder recipe picks, with nothing given):

    cd benchmarks && ../.venv/bin/python augmentation_recipes.py --sizes 32 --chans 1 \\
        --settings imagenet,small,small_noflip,digits,digits_affine,none --epochs 30

Prints one line per (size, channels, setting): the seconds in ``trainer.fit`` and the final validation
accuracy. Extra train.py arguments follow ``--``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timing import REPO, fit_seconds

from crate.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_tensors

FOLDER_CONFIG = str(REPO / "configs" / "crate_nano_imagefolder.yaml")

# name -> augmentation settings given to train.py (--data.augmentation.KEY VALUE)
SETTINGS: dict[str, dict[str, str]] = {
    # timm's ImageNet training defaults, as the recipe had them before the small-image defaults
    "imagenet": {"scale": "[0.08,1.0]", "hflip": "0.5", "color_jitter": "0.4"},
    # what the folder recipe chooses from the folder (crate.lit.data.folder_recipe): nothing given
    "chosen": {},
    # the photo recipe below 128 pixels: the crop keeps 60-100%, flips, no colour jitter
    "small": {"scale": "[0.6,1.0]", "hflip": "0.5"},
    "small_noflip": {"scale": "[0.6,1.0]", "hflip": "0"},
    # the digits recipe: a gentler crop, no flips
    "digits": {"scale": "[0.7,1.0]", "ratio": "[0.8,1.25]", "hflip": "0"},
    # with small rotations, shifts and rescalings on top
    "digits_affine": {
        "scale": "[0.7,1.0]",
        "ratio": "[0.8,1.25]",
        "hflip": "0",
        "rotate": "10",
        "translate": "0.1",
        "zoom": "[0.9,1.1]",
    },
    "none": {"scale": "[1.0,1.0]", "ratio": "[1.0,1.0]", "hflip": "0"},
}


def write_digits_folder(root: Path, size: int, chans: int) -> None:
    """The digits' train/val split as ``root/{train,val}/<digit>/<index>.png`` at ``size`` pixels."""
    for split, dataset in zip(("train", "val"), load_digits_tensors(img_size=size, in_chans=1), strict=True):
        pixels = (dataset.images[:, 0] * DIGITS_STD + DIGITS_MEAN).clamp(0, 1).mul(255).round()
        pixels = pixels.to(torch.uint8).numpy()
        for index, (image, label) in enumerate(zip(pixels, dataset.labels.tolist(), strict=True)):
            folder = root / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            picture = Image.fromarray(np.ascontiguousarray(image), mode="L")
            (picture.convert("RGB") if chans == 3 else picture).save(folder / f"{index}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="32", help="comma-separated sides of the written images")
    parser.add_argument("--chans", default="1", help="comma-separated channel counts of the written images")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {sorted(SETTINGS)}")
    parser.add_argument("--epochs", type=int, default=30, help="0: the epochs the folder recipe chooses")
    parser.add_argument("extra", nargs="*", help="train.py arguments, after --")
    args = parser.parse_args()
    for size in map(int, args.sizes.split(",")):
        for chans in map(int, args.chans.split(",")):
            with tempfile.TemporaryDirectory() as root:
                write_digits_folder(Path(root), size, chans)
                for name in args.settings.split(","):
                    overrides = [f"--data.augmentation.{key}={value}" for key, value in SETTINGS[name].items()]
                    run = ["--config", FOLDER_CONFIG, "--data.root", root]
                    run += ["--trainer.max_epochs", str(args.epochs)] if args.epochs else []
                    seconds, metrics = fit_seconds([*run, *overrides, *args.extra])
                    print(
                        f"{size:>3} px, {chans} channel(s) on disk, {name:>13}: val/acc {metrics['val/acc']:.4f} "
                        f"({seconds:.0f} s in trainer.fit)",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
