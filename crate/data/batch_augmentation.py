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
``const`` mode). The operations are torchvision's (``transforms.v2.functional``, which works on batched
tensors on any device): the shears, shifts and rotations of a batch go through one grid sample (the grids
computed per image with torchvision's own helpers), the four colour operations (brightness, saturation,
contrast, sharpness) through one call each with a factor per image (torchvision's arithmetic, its fused
multiply-add included, with a tensor of factors), and the other operations one call per (operation,
magnitude). So each image is exactly what torchvision gives it alone; the helpers and the arithmetic are
torchvision's internals, and the tests compare every operation with torchvision's ``TrivialAugmentWide``
on each image, so a change in them fails a test. kornia would draw per-image
parameters as well, but from the global random state and not from a seed per image, and would add a
dependency for what torchvision already ships.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode
from torchvision.transforms.functional import _get_inverse_affine_matrix
from torchvision.transforms.v2.functional._geometry import _apply_grid_transform

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


_GEOMETRIC = ("shear_x", "shear_y", "translate_x", "translate_y", "rotate")


def _inverse_affine(op: str, magnitude: float, height: int, width: int) -> list[float] | None:
    """The inverse affine matrix torchvision's ``affine``/``rotate`` compute for this geometric operation (the
    arguments :func:`_apply_op` passes), or None for a rotation torchvision does without a grid (multiples of
    90 degrees)."""
    if op in ("shear_x", "shear_y"):
        angle = math.degrees(math.atan(magnitude))
        shear = [angle, 0.0] if op == "shear_x" else [0.0, angle]
        return _get_inverse_affine_matrix([-0.5 * width, -0.5 * height], 0.0, [0.0, 0.0], 1.0, shear)
    if op in ("translate_x", "translate_y"):
        shift = [float(int(magnitude)), 0.0] if op == "translate_x" else [0.0, float(int(magnitude))]
        return _get_inverse_affine_matrix([0.0, 0.0], 0.0, shift, 1.0, [0.0, 0.0])
    if magnitude % 90 == 0:
        return None
    return _get_inverse_affine_matrix([0.0, 0.0], -(magnitude % 360), [0.0, 0.0], 1.0, [0.0, 0.0])


def _apply_geometric(images: torch.Tensor, choices: list[tuple[str, float]], fill: list[float]) -> torch.Tensor | None:
    """Each image moved by its own geometric operation in one grid sample: the grids of torchvision's
    ``affine``/``rotate`` (its own helpers, so that every image equals torchvision's result on it alone),
    stacked; None when an operation needs torchvision's own path."""
    height, width = images.shape[-2:]
    matrices = [_inverse_affine(op, magnitude, height, width) for op, magnitude in choices]
    if any(matrix is None for matrix in matrices):
        return None
    theta = torch.tensor(matrices, dtype=torch.float32, device=images.device).reshape(-1, 2, 3)
    return _apply_grid_transform(images, _affine_grids(theta, height, width), "nearest", fill=fill)


def _affine_grids(theta: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """torchvision's sampling grid of an affine map (its ``_affine_grid``: pixel centres, the map applied,
    then normalised to [-1, 1]) for a batch of matrices (B, 2, 3) at once -> (B, H, W, 2)."""
    base = torch.ones(1, height, width, 3, dtype=theta.dtype, device=theta.device)
    base[..., 0] = torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=theta.device)
    base[..., 1] = torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height, device=theta.device)[
        :, None
    ]
    scale = torch.tensor([0.5 * width, 0.5 * height], dtype=theta.dtype, device=theta.device)
    rescaled = theta.transpose(1, 2) / scale
    return base.view(1, height * width, 3).expand(len(theta), -1, -1).bmm(rescaled).view(-1, height, width, 2)


_FACTOR_OPS = ("brightness", "color", "contrast", "sharpness")  # a blend with a factor 1 + magnitude


def _fused_blend(images: torch.Tensor, other: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_blend`` with one factor per image: ``image * f + other * (1 - f)`` in float32, the
    product and the add fused into one rounding as its multiply-add kernel does (emulated exactly in float64:
    the float32 product plus an exact float64 product, rounded once)."""
    ratio = factors.to(torch.float32).view(-1, 1, 1, 1)
    alpha = (1.0 - factors).to(torch.float32).view(-1, 1, 1, 1)  # 1 - f in float64, then float32, as torchvision
    return (images.mul(ratio).double() + other.double() * alpha.double()).float()


def _grayscale(images: torch.Tensor) -> torch.Tensor:
    """torchvision's float grayscale of a uint8 RGB batch (ITU-R 601-2 luma, floored) -> (B, 1, H, W)."""
    red, green, blue = images.unbind(dim=-3)
    return red.mul(0.2989).add_(green, alpha=0.587).add_(blue, alpha=0.114).unsqueeze(-3).floor_()


def _apply_factor_op(images: torch.Tensor, op: str, magnitudes: torch.Tensor) -> torch.Tensor:
    """A colour operation of torchvision (``adjust_brightness``, ``_saturation``, ``_contrast``, ``_sharpness``)
    on a uint8 batch, each image with its own factor ``1 + magnitude`` (float64 magnitudes), in one call: equal
    to torchvision's call on each image alone, bit for bit (the policy tests check it)."""
    factors = 1.0 + magnitudes.to(torch.float64).to(images.device)
    channels = images.shape[-3]
    if op == "brightness":
        out = images.mul(factors.to(torch.float32).view(-1, 1, 1, 1))
    elif op == "color":
        if channels != 3:
            return images
        out = _fused_blend(images, _grayscale(images), factors)
    elif op == "contrast":
        gray = _grayscale(images) if channels == 3 else images.to(torch.float32)
        out = _fused_blend(images, gray.mean(dim=(-3, -2, -1), keepdim=True), factors)
    elif op == "sharpness":
        height, width = images.shape[-2:]
        if height <= 2 or width <= 2:
            return images
        a, b = 1.0 / 13.0, 5.0 / 13.0  # torchvision's smoothing kernel: 1s around a 5
        kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], device=images.device).expand(channels, 1, 3, 3)
        out = images.to(torch.float32, copy=True)
        blurred = torch.nn.functional.conv2d(out, kernel, groups=channels).round_()
        inner = out[..., 1:-1, 1:-1]  # the border keeps its pixels; the inside moves towards the blur
        alpha = (1.0 - factors).to(torch.float32).view(-1, 1, 1, 1)
        inner.copy_((inner.double() + (blurred - inner).double() * alpha.double()).float())
    else:
        raise ValueError(f"{op!r} is not a colour operation with a factor")
    return out.clamp_(0, 255).to(images.dtype)


def _apply_op(images: torch.Tensor, op: str, magnitude: float, fill: list[float]) -> torch.Tensor:
    """One policy operation other than the colour ones with one signed magnitude on a uint8 batch
    (torchvision's calls)."""
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
        policy_epochs: the policy is applied in the first ``policy_epochs`` epochs of a run and not after,
            so that a run can end on images closer to the evaluated ones (crop, flip and erasing stay on);
            ``None``: in every epoch.
        policy_prob: the probability that an image goes through the policy at all (a milder policy: the
            others keep crop, flip and erasing only). The draw reuses the operation's uniform ``u``: an
            image with ``u >= policy_prob`` is left alone, the others draw operation ``u / policy_prob`` of
            the 14, so 1.0 gives the full policy with exactly the same operations as before.
    """

    padding: int = 4
    hflip: float = 0.5
    policy: str | None = None
    magnitude_bins: int = 31
    re_prob: float = 0.0
    policy_epochs: int | None = None
    policy_prob: float = 1.0

    def __post_init__(self) -> None:
        if self.padding < 0:
            raise ValueError(f"padding must be >= 0, got {self.padding}")
        for name in ("hflip", "re_prob", "policy_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.policy in ("", "none", "None", "null"):
            object.__setattr__(self, "policy", None)
        if self.policy not in (None, "trivial"):
            raise ValueError(f"policy must be 'trivial' or None, got {self.policy!r}")
        if self.magnitude_bins < 2:
            raise ValueError(f"magnitude_bins must be >= 2, got {self.magnitude_bins}")
        if self.policy_epochs is not None and self.policy_epochs < 0:
            raise ValueError(f"policy_epochs must be >= 0 or None (every epoch), got {self.policy_epochs}")

    def policy_on(self, epoch: int) -> bool:
        """Whether the policy is applied to the batches of this epoch (0-based)."""
        return self.policy is not None and (self.policy_epochs is None or epoch < self.policy_epochs)

    # --- the steps, each on a uint8 batch (B, C, H, W) and the batch's uniforms (B, DRAWS) ---

    def crop(
        self, images: torch.Tensor, uniforms: torch.Tensor, fill: torch.Tensor, flip: bool = False
    ) -> torch.Tensor:
        """Shift each image by (dy, dx) in [-padding, padding], the uncovered border set to ``fill``; with
        ``flip``, the images :meth:`flip` would mirror come out mirrored (one gather does both)."""
        pad, device = self.padding, images.device
        batch, channels, height, width = images.shape
        padded_width = width + 2 * pad
        canvas = fill.view(1, channels, 1, 1).expand(batch, channels, height + 2 * pad, padded_width).clone()
        canvas[:, :, pad : pad + height, pad : pad + width] = images
        top = (uniforms[:, _CROP_Y] * (2 * pad + 1)).long().to(device)
        left = (uniforms[:, _CROP_X] * (2 * pad + 1)).long().to(device)
        rows = top[:, None] + torch.arange(height, device=device)
        columns = torch.arange(width, device=device).expand(batch, width)
        if flip:
            columns = torch.where(self.flipped(uniforms).to(device)[:, None], columns.flip(-1), columns)
        # one gather over each flattened padded image: pixel (i, j) of the crop is canvas[top + i, left + j]
        index = rows[:, :, None] * padded_width + (left[:, None] + columns)[:, None, :]
        index = index.view(batch, 1, height * width).expand(batch, channels, height * width)
        return canvas.view(batch, channels, -1).gather(2, index).view(batch, channels, height, width)

    def flipped(self, uniforms: torch.Tensor) -> torch.Tensor:
        """Which images of the batch are mirrored."""
        return uniforms[:, _FLIP] < self.hflip

    def flip(self, images: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        flipped = self.flipped(uniforms).to(images.device)
        return torch.where(flipped[:, None, None, None], images.flip(-1), images)

    def policy_choices(self, uniforms: torch.Tensor) -> list[tuple[str, float]]:
        """Each image's (operation, signed magnitude)."""
        names = list(POLICY_OPS)
        choices = []
        for row in uniforms.tolist():
            if row[_OP] >= self.policy_prob:
                choices.append(("identity", 0.0))
                continue
            op = names[min(int(row[_OP] / self.policy_prob * len(names)), len(names) - 1)]
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
        """Every image through its drawn operation: the shears, shifts and rotations together in one grid
        sample, each colour operation in one call with a factor per image, the rest in one call per
        (operation, magnitude)."""
        out = images.clone()
        choices = self.policy_choices(uniforms)
        fill_values = [float(v) for v in fill.tolist()]
        moved = [i for i, (op, magnitude) in enumerate(choices) if op in _GEOMETRIC and magnitude % 90 != 0]
        if moved:
            index = torch.tensor(moved, device=images.device)
            out[index] = _apply_geometric(images[index], [choices[i] for i in moved], fill_values)
        done = set(moved)
        for op in _FACTOR_OPS:
            members = [i for i, choice in enumerate(choices) if choice[0] == op]
            if members:
                index = torch.tensor(members, device=images.device)
                magnitudes = torch.tensor([choices[i][1] for i in members], dtype=torch.float64)
                out[index] = _apply_factor_op(images[index], op, magnitudes)
                done.update(members)
        groups: dict[tuple[str, float], list[int]] = {}
        for i, choice in enumerate(choices):
            if choice[0] != "identity" and i not in done:
                groups.setdefault(choice, []).append(i)
        for (op, magnitude), members in groups.items():
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
        epoch: int = 0,
    ) -> torch.Tensor:
        """The augmented, normalised float32 batch of a uint8 batch, each image by its own seed, in the given
        epoch of the run (0-based; it decides only whether the policy is on, see ``policy_epochs``)."""
        uniforms = sample_uniforms(seeds.tolist() if isinstance(seeds, torch.Tensor) else seeds)
        fill = torch.tensor([round(255 * m) for m in mean], dtype=torch.uint8, device=images.device)
        if size is not None and tuple(images.shape[-2:]) != (size, size):
            images = TF.resize(images, [size, size], antialias=True)
        if self.padding:
            images = self.crop(images, uniforms, fill, flip=bool(self.hflip))
        elif self.hflip:
            images = self.flip(images, uniforms)
        if self.policy_on(epoch):
            images = self.apply_policy(images, uniforms, fill)
        images = normalize(images, mean, std)
        if self.re_prob:
            images = self.erase(images, uniforms)
        return images


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (B, C, H, W) to float32 ``(x / 255 - mean) / std``, as ToTensor + Normalize compute it."""
    mean_t = torch.tensor(mean, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    return images.float().div_(255.0).sub_(mean_t).div_(std_t)  # in place: the same numbers, fewer copies
