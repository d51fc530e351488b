"""Training augmentation of whole uint8 batches, on whatever device the batch is on.

Every random choice of an image is a function of that image's own seed (the sampler's per-sample seed,
:mod:`crate.data.resumable`): a ``torch.Generator`` seeded with it draws the image's uniforms, and the
batch is transformed from those with tensor operations. So a resumed run, another batch size, or another
split among DDP processes gives each image the same augmentation, and a test can compare the batch with
the per-image definition.

Steps, in order (each optional): resize to the output side, a padded random crop (a shift of up to
``padding`` pixels, the border filled with the mean colour), a horizontal flip, a TrivialAugment-style
policy (one operation per image, drawn uniformly from the 14 of TrivialAugment's wide search space, with a
magnitude drawn uniformly from its bins and a random sign), normalisation, and random erasing (a rectangle
of 2-33% of the image, aspect ratio 0.3-3.3, set to the mean: timm's ``RandomErasing`` settings, its
``const`` mode). The operations themselves are torchvision's (``transforms.v2.functional``, which works on
batched tensors on any device); images of a batch that drew the same operation, magnitude and sign are
transformed in one call. kornia would draw per-image parameters as well, but from the global random state
and not from a seed per image, and would add a dependency for what torchvision already ships.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode

__all__ = ["POLICY_OPS", "BatchAugmentation", "normalize", "sample_uniforms"]

# TrivialAugment's wide search space (torchvision's TrivialAugmentWide): name -> largest magnitude (None: an
# operation without one); the bins run linearly from 0 to it (posterize and solarize: see _apply_op)
POLICY_OPS: dict[str, float | None] = {
    "identity": None,
    "shear_x": 0.99,
    "shear_y": 0.99,
    "translate_x": 32.0,
    "translate_y": 32.0,
    "rotate": 135.0,
    "brightness": 0.99,
    "color": 0.99,
    "contrast": 0.99,
    "sharpness": 0.99,
    "posterize": 6.0,
    "solarize": 255.0,
    "autocontrast": None,
    "equalize": None,
}
_SIGNED = {"shear_x", "shear_y", "translate_x", "translate_y", "rotate", "brightness", "color", "contrast", "sharpness"}

# columns of an image's uniforms
_CROP_Y, _CROP_X, _FLIP, _OP, _MAGNITUDE, _SIGN, _ERASE, _AREA, _RATIO, _TOP, _LEFT = range(11)
DRAWS = 11


def sample_uniforms(seeds: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """``(B, DRAWS)`` float64 uniforms in [0, 1), row i drawn by a generator seeded with ``seeds[i]``."""
    rows = [
        torch.rand(DRAWS, dtype=torch.float64, generator=torch.Generator().manual_seed(int(seed))) for seed in seeds
    ]
    return torch.stack(rows) if rows else torch.empty(0, DRAWS, dtype=torch.float64)


def _apply_op(images: torch.Tensor, op: str, magnitude: float, fill: list[float]) -> torch.Tensor:
    """One policy operation with one signed magnitude on a uint8 batch (torchvision's definitions)."""
    nearest = InterpolationMode.NEAREST
    if op == "identity":
        return images
    if op in ("shear_x", "shear_y"):
        angle = math.degrees(math.atan(magnitude))
        shear = [angle, 0.0] if op == "shear_x" else [0.0, angle]
        return TF.affine(
            images, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, interpolation=nearest, fill=fill, center=[0, 0]
        )
    if op in ("translate_x", "translate_y"):
        shift = [int(magnitude), 0] if op == "translate_x" else [0, int(magnitude)]
        return TF.affine(
            images, angle=0.0, translate=shift, scale=1.0, shear=[0.0, 0.0], interpolation=nearest, fill=fill
        )
    if op == "rotate":
        return TF.rotate(images, magnitude, interpolation=nearest, fill=fill)
    if op == "brightness":
        return TF.adjust_brightness(images, 1.0 + magnitude)
    if op == "color":
        return TF.adjust_saturation(images, 1.0 + magnitude) if images.shape[1] == 3 else images
    if op == "contrast":
        return TF.adjust_contrast(images, 1.0 + magnitude) if images.shape[1] in (1, 3) else images
    if op == "sharpness":
        return TF.adjust_sharpness(images, 1.0 + magnitude)
    if op == "posterize":
        return TF.posterize(images, int(magnitude))
    if op == "solarize":
        return TF.solarize(images, magnitude)
    if op == "autocontrast":
        return TF.autocontrast(images)
    if op == "equalize":
        return TF.equalize(images)
    raise ValueError(f"unknown policy operation {op!r}")


@dataclass(frozen=True)
class BatchAugmentation:
    """Settings of the batched training augmentation.

    Args:
        padding: the padded random crop's shift, in pixels of the output (0: no crop).
        hflip: probability of a horizontal flip (0 for data that is not mirror-symmetric).
        policy: ``"trivial"`` for the TrivialAugment-style policy, ``None`` for none.
        magnitude_bins: how many magnitudes the policy draws from (torchvision's TrivialAugmentWide: 31).
        re_prob: probability of random erasing.
    """

    padding: int = 4
    hflip: float = 0.5
    policy: str | None = None
    magnitude_bins: int = 31
    re_prob: float = 0.0

    def __post_init__(self) -> None:
        if self.padding < 0:
            raise ValueError(f"padding must be >= 0, got {self.padding}")
        for name in ("hflip", "re_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.policy in ("", "none", "None", "null"):
            object.__setattr__(self, "policy", None)
        if self.policy not in (None, "trivial"):
            raise ValueError(f"policy must be 'trivial' or None, got {self.policy!r}")
        if self.magnitude_bins < 2:
            raise ValueError(f"magnitude_bins must be >= 2, got {self.magnitude_bins}")

    # --- the steps, each on a uint8 batch (B, C, H, W) and the batch's uniforms (B, DRAWS) ---

    def crop(self, images: torch.Tensor, uniforms: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        """Shift each image by (dy, dx) in [-padding, padding], the uncovered border set to ``fill``."""
        pad = self.padding
        batch, channels, height, width = images.shape
        canvas = fill.view(1, channels, 1, 1).expand(batch, channels, height + 2 * pad, width + 2 * pad).clone()
        canvas[:, :, pad : pad + height, pad : pad + width] = images
        top = (uniforms[:, _CROP_Y] * (2 * pad + 1)).long().to(images.device)
        left = (uniforms[:, _CROP_X] * (2 * pad + 1)).long().to(images.device)
        rows = (top[:, None] + torch.arange(height, device=images.device))[:, None, :, None]
        cols = (left[:, None] + torch.arange(width, device=images.device))[:, None, None, :]
        index = torch.arange(batch, device=images.device)[:, None, None, None]
        channel = torch.arange(channels, device=images.device)[None, :, None, None]
        return canvas[index, channel, rows, cols]

    def flip(self, images: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        flipped = (uniforms[:, _FLIP] < self.hflip).to(images.device)
        return torch.where(flipped[:, None, None, None], images.flip(-1), images)

    def policy_choices(self, uniforms: torch.Tensor) -> list[tuple[str, float]]:
        """Each image's (operation, signed magnitude)."""
        names = list(POLICY_OPS)
        choices = []
        for row in uniforms.tolist():
            op = names[min(int(row[_OP] * len(names)), len(names) - 1)]
            level = min(int(row[_MAGNITUDE] * self.magnitude_bins), self.magnitude_bins - 1)
            top = POLICY_OPS[op]
            if top is None:
                magnitude = 0.0
            elif op == "posterize":  # bits kept: 8 down to 2
                magnitude = float(8 - round(level / ((self.magnitude_bins - 1) / 6)))
            elif op == "solarize":  # threshold: 255 down to 0
                magnitude = 255.0 * (1 - level / (self.magnitude_bins - 1))
            else:
                magnitude = top * level / (self.magnitude_bins - 1)
                if op in _SIGNED and row[_SIGN] < 0.5:
                    magnitude = -magnitude
            choices.append((op, magnitude))
        return choices

    def apply_policy(self, images: torch.Tensor, uniforms: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        out = images.clone()
        groups: dict[tuple[str, float], list[int]] = {}
        for i, choice in enumerate(self.policy_choices(uniforms)):
            groups.setdefault(choice, []).append(i)
        fill_values = [float(v) for v in fill.tolist()]
        for (op, magnitude), members in groups.items():
            if op != "identity":
                index = torch.tensor(members, device=images.device)
                out[index] = _apply_op(images[index], op, magnitude, fill_values)
        return out

    def erase(self, images: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """Set a rectangle of a normalised batch to 0 (the mean) in the images that drew erasing."""
        _, _, height, width = images.shape
        area = height * width * (0.02 + uniforms[:, _AREA] * (1 / 3 - 0.02))
        ratio = torch.exp(math.log(0.3) + uniforms[:, _RATIO] * (math.log(1 / 0.3) - math.log(0.3)))
        box_h = torch.sqrt(area * ratio).round().clamp(1, height).long()
        box_w = torch.sqrt(area / ratio).round().clamp(1, width).long()
        top = (uniforms[:, _TOP] * (height - box_h + 1)).long()
        left = (uniforms[:, _LEFT] * (width - box_w + 1)).long()
        on = uniforms[:, _ERASE] < self.re_prob
        device = images.device
        ys = torch.arange(height, device=device)[None, :]
        xs = torch.arange(width, device=device)[None, :]
        in_rows = (ys >= top.to(device)[:, None]) & (ys < (top + box_h).to(device)[:, None])
        in_cols = (xs >= left.to(device)[:, None]) & (xs < (left + box_w).to(device)[:, None])
        mask = in_rows[:, :, None] & in_cols[:, None, :] & on.to(device)[:, None, None]
        return images.masked_fill(mask[:, None], 0.0)

    def __call__(
        self,
        images: torch.Tensor,
        seeds: Sequence[int] | torch.Tensor,
        mean: Sequence[float],
        std: Sequence[float],
        size: int | None = None,
    ) -> torch.Tensor:
        """The augmented, normalised float32 batch of a uint8 batch, each image by its own seed."""
        uniforms = sample_uniforms(seeds.tolist() if isinstance(seeds, torch.Tensor) else seeds)
        fill = torch.tensor([round(255 * m) for m in mean], dtype=torch.uint8, device=images.device)
        if size is not None and tuple(images.shape[-2:]) != (size, size):
            images = TF.resize(images, [size, size], antialias=True)
        if self.padding:
            images = self.crop(images, uniforms, fill)
        if self.hflip:
            images = self.flip(images, uniforms)
        if self.policy is not None:
            images = self.apply_policy(images, uniforms, fill)
        images = normalize(images, mean, std)
        if self.re_prob:
            images = self.erase(images, uniforms)
        return images


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (B, C, H, W) to float32 ``(x / 255 - mean) / std``, as ToTensor + Normalize compute it."""
    mean_t = torch.tensor(mean, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255.0 - mean_t) / std_t
