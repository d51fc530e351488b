"""Emergent segmentation, measured: does a head's class-token attention outline the object?

For each image and head, the class token's attention over the patches is thresholded the way DINO and
the CRATE segmentation paper do it: keep the fewest patches that together hold a share ``mass`` (0.6)
of the attention. The kept patches are compared with the image's foreground patches by IoU. A patch is
foreground when at least half of its pixels are. The chance level is the IoU of a random patch set of the
same size as the kept one (:func:`random_mask_iou`).

Foreground pixels come from the image itself for digits (strokes: intensity above a threshold) or from a
folder of mask images beside a user's dataset (:func:`load_mask_folder`: any non-zero pixel is foreground).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

__all__ = [
    "attention_masks",
    "foreground_patches",
    "load_mask_folder",
    "mask_iou",
    "random_mask_iou",
    "stroke_pixels",
]

MASK_SUFFIXES = (".png", ".bmp", ".gif", ".tif", ".tiff", ".jpg", ".jpeg", ".webp")
LOSSY_SUFFIXES = (".jpg", ".jpeg")  # whose compression leaves values between a mask's two levels


def attention_masks(attention: torch.Tensor, mass: float = 0.6) -> torch.Tensor:
    """Boolean masks of the fewest entries holding ``mass`` of each map; attention (..., P) -> (..., P)."""
    if not 0 < mass <= 1:
        raise ValueError(f"mass must be in (0, 1], got {mass}")
    attention = attention.to(torch.float64)
    share = attention / attention.sum(-1, keepdim=True)
    ordered, order = share.sort(dim=-1, descending=True)
    before = ordered.cumsum(-1) - ordered  # mass of the entries ranked above each one
    keep_sorted = before < mass
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def foreground_patches(pixels: torch.Tensor, patch: tuple[int, int]) -> torch.Tensor:
    """Pixel masks (B, H, W) -> patch masks (B, H/ph * W/pw), a patch foreground when >= half its pixels are."""
    fraction = F.avg_pool2d(pixels.to(torch.float64).unsqueeze(1), kernel_size=patch, stride=patch)
    return (fraction >= 0.5).flatten(1)


def stroke_pixels(images: torch.Tensor, mean: float, std: float, threshold: float = 0.25) -> torch.Tensor:
    """Foreground of single-object grayscale images (digits): pixels brighter than ``threshold`` after
    undoing the normalisation; images (B, C, H, W) -> (B, H, W)."""
    return (images.to(torch.float64).mean(dim=1) * std + mean) > threshold


def mask_iou(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """IoU of boolean masks; predicted (B, K, P), target (B, P) -> (B, K) (an empty union counts as 0)."""
    target = target.unsqueeze(1)
    intersection = (predicted & target).sum(-1).to(torch.float64)
    union = (predicted | target).sum(-1).to(torch.float64)
    return torch.where(union > 0, intersection / union.clamp_min(1), torch.zeros_like(union))


def random_mask_iou(predicted: torch.Tensor, target: torch.Tensor, draws: int = 8, seed: int = 0) -> torch.Tensor:
    """Mean IoU of random masks with as many patches as each predicted one: the chance level, (B, K)."""
    generator = torch.Generator().manual_seed(seed)
    sizes = predicted.sum(-1, keepdim=True)
    results = []
    for _ in range(draws):
        ranks = torch.rand(predicted.shape, generator=generator).argsort(-1).argsort(-1)
        results.append(mask_iou(ranks < sizes, target))
    return torch.stack(results).mean(0)


def _mask_geometry(transform: object) -> list[object]:
    """The geometric steps of an evaluation transform (resize, centre crop), redone with nearest
    interpolation for masks; any other geometric step is refused rather than guessed."""
    steps = []
    for step in getattr(transform, "transforms", [transform]):
        if isinstance(step, transforms.Resize):
            steps.append(transforms.Resize(step.size, transforms.InterpolationMode.NEAREST, max_size=step.max_size))
        elif isinstance(step, transforms.CenterCrop):
            steps.append(step)
        elif isinstance(step, (transforms.ToTensor, transforms.Normalize)) or type(step).__name__ == "MaybeToTensor":
            continue
        else:
            raise ValueError(f"cannot carry the evaluation transform step {step!r} over to masks")
    return steps


def load_mask_folder(
    mask_root: str | Path, image_paths: list[str], image_root: str | Path, transform: object
) -> torch.Tensor:
    """Masks for images ``image_root/<rel>/<stem>.<ext>``, read from ``mask_root/<rel>/<stem>.<any image ext>``,
    each of its image's size, put through the geometric part of the images' evaluation ``transform``;
    -> (B, H, W) boolean."""
    mask_root, image_root = Path(mask_root), Path(image_root)
    if not mask_root.is_dir():
        raise FileNotFoundError(f"mask folder {mask_root} does not exist")
    geometry = transforms.Compose(_mask_geometry(transform))
    masks, noisy = [], []
    for path in image_paths:
        relative = Path(path).relative_to(image_root)
        stem = mask_root / relative.parent / relative.stem  # a name with dots keeps them: "cat.1.png" -> "cat.1"
        found = [candidate for suffix in MASK_SUFFIXES if (candidate := Path(f"{stem}{suffix}")).is_file()]
        if not found:
            raise FileNotFoundError(f"no mask for {path}: expected {stem}.png (or another image type)")
        try:
            with Image.open(path) as image:
                size = image.size
            with Image.open(found[0]) as image:
                if image.size != size:  # resized and cropped as its image, it would cover other pixels
                    raise ValueError(
                        f"mask {found[0]} is {image.size[0]}x{image.size[1]} pixels and its image {path} "
                        f"{size[0]}x{size[1]}: save each mask at its image's size"
                    )
                gray = image.convert("L")
                mask = geometry(gray)
        except OSError as err:
            raise ValueError(f"cannot read mask {found[0]}: {err}") from err
        if found[0].suffix.lower() in LOSSY_SUFFIXES:
            values = np.asarray(gray)
            if np.any((values > 0) & (values < values.max())):
                noisy.append(found[0])
        masks.append(torch.from_numpy(np.asarray(mask) > 0))
    if noisy:
        warnings.warn(
            f"JPEG masks ({len(noisy)}; the first {noisy[0]}) hold values between 0 and their maximum, the "
            "compression's noise along the edges: every non-zero pixel counts as foreground; save masks as PNG",
            stacklevel=2,
        )
    return torch.stack(masks)
