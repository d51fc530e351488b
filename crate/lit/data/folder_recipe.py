"""A training recipe chosen from what an image folder holds, for ``train.py fit`` on a user's own images.

The folder is surveyed first (the number of images and classes, each class's count, the channels, the image sides
from a sample of file headers), then what depends on it is chosen:

- **input size**: small images (a side of at most 64 pixels) are seen at their own side, rounded down to a
  multiple of 4 (the 4x4 patches of the CPU-scale models); larger ones at 32 pixels, the CPU recipe's size;
- **augmentation**: small grayscale images (digits, characters, glyphs: neither mirror-symmetric nor cropped
  photos) get a padded random crop of 2 pixels either way and no flip; colour images the photo recipe,
  :class:`Augmentation`'s defaults (random-resized crops of 60-100% of the area below 128 pixels, flips);
- **batch size and epochs** by the number of training images: batch 64 below 20,000 images and 128 from there,
  and about 800,000 image passes (rounded to 5 epochs, 15 to 100 epochs): 8,000 images train 100 epochs (on
  8,000 Fashion-MNIST images 60 epochs ended 1.5 points below an RBF SVM on the pixels and 100 epochs above it);
- **class weights**: where the largest class holds more than 3 times the images of the smallest, the loss weighs
  each class by the inverse of its share (mean weight 1), and the run says so.

Every choice is only a default: a value given in the config or on the command line is kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from crate.wording import counted

from .augmentation import SMALL_IMAGE, Augmentation
from .base import DataError

__all__ = ["FolderRecipe", "FolderSurvey", "choose_recipe", "survey_folder"]

SMALL_SIDE = 64  # images with a side up to this are seen at their own size
PHOTO_SIZE = 32  # the input side for larger images: the CPU-scale models' size
IMBALANCE = 3.0  # largest over smallest class count above which the loss is weighted
IMAGE_PASSES = 800_000  # the epochs are chosen to train on about this many images
GLYPH_FLIP_HINT = "--data.augmentation.padding 2 --data.augmentation.hflip 0.5"
SAMPLED_HEADERS = 256  # training images whose size is read to find the folder's image side


@dataclass(frozen=True)
class FolderSurvey:
    """What a folder holds: training and validation images, each class's count of training images, the channels
    of its images (1: gray, whatever channels a run reads them in), and the median shorter side of a sample of its
    images (and whether the sample's sizes differ; where they do not, their size as width and height)."""

    train_images: int
    val_images: int
    class_counts: dict[str, int]
    channels: int
    side: int
    sizes_vary: bool
    size: tuple[int, int] | None = None

    @property
    def imbalance(self) -> float:
        counts = list(self.class_counts.values())
        return max(counts) / max(min(counts), 1)


def survey_folder(
    train: Sequence[tuple[Path, int]], classes: Sequence[str], val_images: int, channels: int
) -> FolderSurvey:
    """Count a folder's training images (path, label) per class and read the size of up to
    :data:`SAMPLED_HEADERS` of them (headers only)."""
    counts = Counter(classes[label] for _, label in train)
    step = max(len(train) // SAMPLED_HEADERS, 1)
    sides, sizes = [], set()
    for path, _ in train[::step][:SAMPLED_HEADERS]:
        try:
            with Image.open(path) as image:
                sides.append(min(image.size))
                sizes.add(image.size)
        except (OSError, ValueError, SyntaxError) as err:
            raise DataError(f"cannot read image {path} ({err}); replace or remove the file") from err
    sides.sort()
    return FolderSurvey(
        train_images=len(train),
        val_images=val_images,
        class_counts={name: counts.get(name, 0) for name in classes},
        channels=channels,
        side=sides[len(sides) // 2] if sides else PHOTO_SIZE,
        sizes_vary=len(sizes) > 1,
        size=next(iter(sizes)) if len(sizes) == 1 else None,
    )


@dataclass(frozen=True)
class FolderRecipe:
    """The settings chosen for a folder (see the module docstring), with what the survey found."""

    img_size: int
    batch_size: int
    max_epochs: int
    augmentation: Augmentation
    class_weights: list[float] | None
    survey: FolderSurvey

    def describe(
        self,
        img_size: int,
        batch_size: int,
        max_epochs: int | None,
        augmentation: Augmentation,
        class_weights: list[float] | None,
    ) -> str:
        """One block for the start of a run: what the folder holds and the settings the run uses (the chosen
        ones, or those set instead)."""
        survey = self.survey
        kind = "grayscale" if survey.channels == 1 else "colour"
        if survey.sizes_vary:
            sizes = f"sizes that vary (median shorter side {survey.side})"
        else:
            width, height = survey.size or (survey.side, survey.side)
            sizes = f"{width}x{height}"
        if augmentation.padding:
            augment = f"crops +-{augmentation.padding} px"
        else:
            low, high = augmentation.scale or ((0.6, 1.0) if img_size < SMALL_IMAGE else (0.08, 1.0))
            augment = f"random-resized crops of {low:.0%}-{high:.0%}"
        if augmentation.policy:
            augment += f", the {augmentation.policy} policy"
        if augmentation.hflip:
            augment += ", horizontal flips"
        elif augmentation.padding and survey.channels == 1 and self.augmentation.hflip == 0:  # the glyph choice
            augment += ", no flips (read as characters; objects: " + GLYPH_FLIP_HINT + ")"
        else:
            augment += ", no flips"
        epochs = counted(max_epochs, "epoch") if max_epochs is not None else "epochs as set"
        text = (
            f"{survey.train_images:,} {kind} images of {sizes} in {len(survey.class_counts)} classes "
            f"({survey.val_images:,} to validate): input {img_size}, {augment}, batch {batch_size}, {epochs}"
        )
        if survey.imbalance > IMBALANCE:
            weighted = "the loss weighs them by inverse frequency" if class_weights else "the loss is unweighted"
            text += f"; classes imbalanced {survey.imbalance:.1f}:1 ({weighted})"
        return text


def choose_recipe(survey: FolderSurvey) -> FolderRecipe:
    """The recipe for a surveyed folder (the rules: the module docstring)."""
    small = survey.side <= SMALL_SIDE
    img_size = max(8, survey.side // 4 * 4) if small else PHOTO_SIZE
    if small and survey.channels == 1:
        augmentation = Augmentation(padding=2, hflip=0.0, color_jitter=0.0)
    else:
        augmentation = Augmentation()  # the photo recipe: timm's, with the small-image crop and no jitter below 128
    batch_size = 64 if survey.train_images < 20_000 else 128
    epochs = int(min(max(round(IMAGE_PASSES / max(survey.train_images, 1) / 5) * 5, 15), 100))
    weights = None
    if survey.imbalance > IMBALANCE:
        total, classes = sum(survey.class_counts.values()), len(survey.class_counts)
        raw = [total / (classes * max(count, 1)) for count in survey.class_counts.values()]
        mean = sum(raw) / len(raw)
        weights = [round(w / mean, 6) for w in raw]
    return FolderRecipe(img_size, batch_size, epochs, augmentation, weights, survey)
