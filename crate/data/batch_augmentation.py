"""Training augmentation of whole uint8 batches, on whatever device the batch is on, in a fixed number of
tensor operations and without reading anything back to the host.

**Draws.** Every random choice of an image is a function of that image's own seed (the sampler's per-sample
seed, :mod:`crate.data.resumable`), so a resumed run, another batch size, or another split among DDP
processes gives each image the same augmentation. The draws are counter-based: draw ``j`` of the image with
seed ``s`` is the 32-bit integer ``mix32(key(s) XOR k_j)``, where ``key(s) = (s XOR (s >> 32)) mod 2^32``,
``k_j = (j + 1) * 0x9E3779B9 mod 2^32`` and ``mix32`` is a xorshift-multiply hash (``x ^= x >> 16;
x *= 0x21F0AAAD; x ^= x >> 15; x *= 0x735A2D97; x ^= x >> 15``, all mod 2^32; both multipliers are below 2^31,
so every product of a 32-bit value stays inside int64 and the arithmetic is exact on every device). The
whole batch's draws are one set of integer tensor operations (:func:`sample_bits`); ``u_j = bits_j / 2^32``
are its uniforms.

**Steps**, in order (each optional), with ``b_j`` the image's draws:

- resize to the output side (antialiased bilinear, when the stored side differs);
- a padded random crop: a shift by ``(floor(b_0 (2p+1) / 2^32) - p, floor(b_1 (2p+1) / 2^32) - p)`` for
  padding ``p``, the uncovered border set to the fill colour (the data's mean colour);
- a horizontal flip when ``b_2 < round(hflip * 2^32)``;
- a TrivialAugment-style policy: operation ``floor(14 b_3 / round(policy_prob * 2^32))`` of the 14 of
  TrivialAugment's wide search space (:data:`POLICY_OPS`, in that order; 14 or more: no operation, so
  ``policy_prob`` is the share of images that get one), magnitude bin ``floor(b_4 * bins / 2^32)``, made
  negative for the signed operations when ``b_5 < 2^31``;
- normalisation, ``(x / 255 - mean) / std`` in float32;
- random erasing (timm's ``RandomErasing`` settings in its ``const`` mode): when ``u_6 < re_prob``, a
  rectangle of ``0.02 + u_7 (1/3 - 0.02)`` of the image with aspect ratio ``exp(log 0.3 + u_8 log(1/0.09))``,
  at ``(u_9, u_10)`` of the free range, set to 0 (the mean).

**How a batch is computed.** Each policy operation is torchvision's (``transforms.v2.functional``) on each
image, bit for bit (the tests compare every operation and magnitude with torchvision's
``TrivialAugmentWide`` on each image alone), but no operation is applied per image or per magnitude:

- the crop, the flip and the geometric operations (shears, shifts, rotations: nearest-neighbour, so each is
  a fixed map from output pixels to source pixels or the fill) are tables of source-pixel indices, made
  once per image size by running torchvision's own ``affine``/``rotate`` on an image of pixel indices; an
  image's map is its crop map composed with its operation's map, and one gather moves every image;
- brightness, saturation (``color``), contrast and sharpness are one blend ``x * r + other * (1 - f)`` with a
  factor and an ``other`` (0, the grey image, its mean, or the sharpness blur) per image, in torchvision's
  arithmetic (its fused multiply-add emulated exactly in float64); images of other operations get ``r = 1``
  and a zero weight, which leaves them exactly as they are; autocontrast is a per-channel rescaling that is
  exactly the identity for the other images;
- posterize, solarize, equalize and the normalisation are lookup tables over the 256 pixel values: each
  image's table is its operation's (posterize and solarize tabulated per magnitude, equalize computed from
  the image's histogram as torchvision does), composed with the normalisation, and one gather applies
  them.

So a batch costs the same few dozen tensor operations whatever its size and draws (as counted per
step in docs/gpu.md), and nothing in it waits for the device. The index and lookup
tables are built on the first batch of each image size and device and kept. kornia would draw per-image
parameters as well, but from the global random state and not from a seed per image, and would add a
dependency for what torchvision already ships. float64 is used for the blend, so a device without float64
(Apple's MPS) cannot run the policy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode

__all__ = ["DRAWS", "POLICY_OPS", "BatchAugmentation", "normalize", "sample_bits", "sample_uniforms"]

# TrivialAugment's wide search space (torchvision's TrivialAugmentWide): name -> largest magnitude (None: an
# operation without one); the bins run linearly from 0 to it (posterize and solarize: see _magnitude)
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
_GEOMETRIC = ("shear_x", "shear_y", "translate_x", "translate_y", "rotate")

# the draws of an image, in order (columns of sample_bits)
_CROP_Y, _CROP_X, _FLIP, _OP, _MAGNITUDE, _SIGN, _ERASE, _AREA, _RATIO, _TOP, _LEFT = range(11)
DRAWS = 11
_MASK32 = 0xFFFFFFFF
_ONE = 1 << 32  # 2^32: a draw b is the uniform b / 2^32
_DRAW_KEYS = tuple((0x9E3779B9 * (j + 1)) & _MASK32 for j in range(DRAWS))

# what the blend step does with an image (a column of the policy table); the rest need no blend
_PLAIN, _COLOR, _CONTRAST, _SHARPNESS, _AUTOCONTRAST, _EQUALIZE = range(6)


@functools.lru_cache(maxsize=64)
def _constant(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor, made (and copied to the device) once."""
    return torch.tensor(values, dtype=dtype, device=device)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A xorshift-multiply hash of int64 values in [0, 2^32) to [0, 2^32) (exact: products stay below 2^63)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def sample_bits(seeds: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """``(B, DRAWS)`` int64 draws in [0, 2^32), row i a function of ``seeds[i]`` only (see the module
    docstring), on the seeds' device."""
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    keys = (seeds ^ (seeds >> 32)) & _MASK32
    return _mix32(keys.unsqueeze(1) ^ _constant(_DRAW_KEYS, torch.int64, seeds.device))


def sample_uniforms(seeds: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """``(B, DRAWS)`` float64 uniforms in [0, 1): :func:`sample_bits` / 2^32."""
    return sample_bits(seeds).double() * (1.0 / _ONE)


def _magnitude(op: str, level: int, positive: bool, bins: int) -> float:
    """The magnitude of bin ``level`` of an operation (torchvision's TrivialAugmentWide bins)."""
    top = POLICY_OPS[op]
    if top is None:
        return 0.0
    if op == "posterize":  # bits kept: 8 down to 2
        return float(8 - round(level / ((bins - 1) / 6)))
    if op == "solarize":  # threshold: 255 down to 0
        return 255.0 * (1 - level / (bins - 1))
    magnitude = top * level / (bins - 1)
    return magnitude if positive or op not in _SIGNED else -magnitude


def _policy_row(row: int, bins: int) -> tuple[str, float]:
    """(operation, signed magnitude) of a row of the policy tables: row = (op * bins + level) * 2 + positive,
    op 14 (beyond the search space) meaning no operation."""
    op_index, rest = divmod(row, 2 * bins)
    level, positive = divmod(rest, 2)
    names = list(POLICY_OPS)
    op = names[op_index] if op_index < len(names) else "identity"
    return op, _magnitude(op, level, bool(positive), bins)


def _geometric(image: torch.Tensor, op: str, magnitude: float, fill: list[float]) -> torch.Tensor:
    """A geometric policy operation, as torchvision's TrivialAugmentWide calls it (nearest neighbour)."""
    nearest = InterpolationMode.NEAREST
    if op in ("shear_x", "shear_y"):
        angle = math.degrees(math.atan(magnitude))
        shear = [angle, 0.0] if op == "shear_x" else [0.0, angle]
        return TF.affine(
            image, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, interpolation=nearest, fill=fill, center=[0, 0]
        )
    if op in ("translate_x", "translate_y"):
        shift = [int(magnitude), 0] if op == "translate_x" else [0, int(magnitude)]
        return TF.affine(
            image, angle=0.0, translate=shift, scale=1.0, shear=[0.0, 0.0], interpolation=nearest, fill=fill
        )
    return TF.rotate(image, magnitude, interpolation=nearest, fill=fill)


def _pixel_map(height: int, width: int, op: str, magnitude: float) -> torch.Tensor:
    """For each output pixel of a geometric operation, the index of the source pixel it takes, or H*W for
    the fill: torchvision's own operation run on an image of pixel indices."""
    size = height * width
    indices = torch.arange(size, dtype=torch.float32).view(1, 1, height, width)
    moved = _geometric(indices, op, magnitude, [-1.0]).flatten()
    return torch.where(moved < 0, size, moved).long()


@dataclass(frozen=True)
class _PolicyTables:
    """Everything the policy needs per row (operation, magnitude bin, sign), on one device.

    params: (rows, 3, 1, 1) float64: the blend's factor r (a float32 value), its weight on ``other``
        (1 - f as a float32 value, 0 for no blend), and what the blend does (_PLAIN, _COLOR, ...).
    maps: (rows, H*W) int64 source-pixel maps (H*W: the fill), the identity for non-geometric rows.
    luts: (rows, 1, 1, 256) int64 posterize/solarize lookup tables, the identity for other rows.
    """

    params: torch.Tensor
    maps: torch.Tensor
    luts: torch.Tensor


@functools.lru_cache(maxsize=8)
def _policy_tables(height: int, width: int, channels: int, bins: int, device: torch.device) -> _PolicyTables:
    rows = (len(POLICY_OPS) + 1) * bins * 2
    params = torch.zeros(rows, 3, dtype=torch.float64)
    params[:, 0] = 1.0
    identity_map = torch.arange(height * width)
    maps = identity_map.expand(rows, -1).clone()
    values = torch.arange(256)
    luts = values.expand(rows, -1).clone()
    sharpenable = height > 2 and width > 2  # torchvision leaves images of side 2 or less unsharpened
    for row in range(rows):
        op, magnitude = _policy_row(row, bins)
        factor = 1.0 + magnitude
        # torchvision's float32 factor and 1 - factor (the latter from float64, rounded once)
        ratio = float(torch.tensor(factor, dtype=torch.float64).float())
        weight = float(torch.tensor(1.0 - factor, dtype=torch.float64).float())
        if op in _GEOMETRIC:
            maps[row] = _pixel_map(height, width, op, magnitude)
        elif op == "brightness":
            params[row, 0] = ratio
        elif (op == "color" and channels == 3) or op == "contrast":
            params[row] = torch.tensor([ratio, weight, _COLOR if op == "color" else _CONTRAST])
        elif op == "sharpness" and sharpenable:
            params[row] = torch.tensor([1.0, weight, _SHARPNESS])
        elif op == "autocontrast":
            params[row, 2] = _AUTOCONTRAST
        elif op == "equalize":
            params[row, 2] = _EQUALIZE
        elif op == "posterize":
            bits = int(magnitude)
            luts[row] = values & ((((1 << bits) - 1) << (8 - bits)) & 0xFF)
        elif op == "solarize":
            luts[row] = torch.where(values >= magnitude, 255 - values, values)
    return _PolicyTables(params.view(rows, 3, 1, 1).to(device), maps.to(device), luts.view(rows, 1, 1, 256).to(device))


@functools.lru_cache(maxsize=8)
def _crop_maps(height: int, width: int, padding: int, device: torch.device) -> torch.Tensor:
    """(combinations, H*W + 1) source-pixel maps of the padded crop and flip, row (top * (2p+1) + left) * 2 +
    not_flipped; H*W stands for the fill, and the last column maps the fill to itself (for composition)."""
    side, size = 2 * padding + 1, height * width
    maps = []
    for top in range(side):
        for left in range(side):
            for not_flipped in (0, 1):
                columns = torch.arange(width) if not_flipped else torch.arange(width).flip(0)
                rows, columns = torch.arange(height)[:, None] + top - padding, columns[None, :] + left - padding
                inside = (rows >= 0) & (rows < height) & (columns >= 0) & (columns < width)
                maps.append(torch.where(inside, rows * width + columns, size).flatten())
    maps = torch.cat([torch.stack(maps), torch.full((len(maps), 1), size)], dim=1)
    return maps.to(device)


@functools.lru_cache(maxsize=8)
def _normalization_lut(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """(1, C, 1, 256) float32: the normalisation of every pixel value, in :func:`normalize`'s arithmetic."""
    values = torch.arange(256, dtype=torch.uint8, device=device).expand(1, len(mean), 256).unsqueeze(-1)
    return normalize(values, mean, std).view(1, len(mean), 1, 256)


@functools.lru_cache(maxsize=8)
def _histogram_parts(batch: int, channels: int, pixels: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Zeros to scatter a histogram into and the ones it counts, reused (scatter_add does not write them)."""
    zeros = torch.zeros(batch, channels, 1, 256, dtype=torch.int64, device=device)
    return zeros, torch.ones(1, dtype=torch.int64, device=device).expand(batch, channels, 1, pixels)


@functools.lru_cache(maxsize=8)
def _sharpness_parts(channels: int, height: int, width: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """torchvision's smoothing kernel (1s around a 5, over 13) for each channel, as a dense C -> C kernel
    that is zero across channels (a CPU runs it several times faster than the grouped convolution, and the
    rounded result is the same), and the mask of inner pixels (torchvision's sharpness keeps the border)."""
    a, b = 1.0 / 13.0, 5.0 / 13.0
    kernel = torch.zeros(channels, channels, 3, 3, device=device)
    kernel[range(channels), range(channels)] = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], device=device)
    inner = torch.zeros(1, 1, height, width, device=device)
    inner[..., 1:-1, 1:-1] = 1.0
    return kernel, inner


def _grayscale(images: torch.Tensor) -> torch.Tensor:
    """torchvision's float grayscale of a uint8 RGB batch (ITU-R 601-2 luma, floored) -> (B, 1, H, W)."""
    red, green, blue = images.unbind(dim=-3)
    return red.mul(0.2989).add_(green, alpha=0.587).add_(blue, alpha=0.114).unsqueeze(-3).floor_()


@dataclass(frozen=True)
class BatchAugmentation:
    """Settings of the batched training augmentation (the steps and draws: the module docstring).

    Args:
        padding: the padded random crop's shift, in pixels of the output (0: no crop).
        hflip: probability of a horizontal flip (0 for data that is not mirror-symmetric).
        policy: ``"trivial"`` for the TrivialAugment-style policy, ``None`` for none.
        magnitude_bins: how many magnitudes the policy draws from (torchvision's TrivialAugmentWide: 31).
        re_prob: probability of random erasing.
        policy_epochs: the policy is applied in the first ``policy_epochs`` epochs of a run and not after,
            so that a run can end on images closer to the evaluated ones (crop, flip and erasing stay on);
            ``None``: in every epoch.
        policy_prob: the share of images that go through the policy at all (a milder policy: the others
            keep crop, flip and erasing only).
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
        return (
            self.policy is not None
            and round(self.policy_prob * _ONE) > 0
            and (self.policy_epochs is None or epoch < self.policy_epochs)
        )

    def _indices(self, bits: torch.Tensor, policy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each image's crop map row and policy row, from its draws, in integer arithmetic."""
        side, bins = 2 * self.padding + 1, self.magnitude_bins
        scale = (side, side, 1, len(POLICY_OPS), bins, 2)
        shift = (0, 0, _ONE - round(self.hflip * _ONE), 0, 0, 0)
        divisor = (_ONE, _ONE, _ONE, max(round(self.policy_prob * _ONE), 1), _ONE, _ONE)
        largest = (side - 1, side - 1, 1, len(POLICY_OPS), bins - 1, 1)
        device = bits.device
        columns = (bits[:, :6] * _constant(scale, torch.int64, device) + _constant(shift, torch.int64, device)) // (
            _constant(divisor, torch.int64, device)
        )
        columns = columns.clamp_max(_constant(largest, torch.int64, device))
        crop_row = (columns * _constant((2 * side, 2, 1, 0, 0, 0), torch.int64, device)).sum(1)
        if not policy:
            return crop_row, None
        return crop_row, (columns * _constant((0, 0, 0, 2 * bins, 2, 1), torch.int64, device)).sum(1)

    def _move(
        self, images: torch.Tensor, crop_row: torch.Tensor, policy_row: torch.Tensor | None, fill: torch.Tensor
    ) -> torch.Tensor:
        """The crop, the flip and the geometric operations of every image in one gather."""
        batch, channels, height, width = images.shape
        source = _crop_maps(height, width, self.padding, images.device)[crop_row]
        if policy_row is None:
            source = source[:, :-1]
        else:
            maps = _policy_tables(height, width, channels, self.magnitude_bins, images.device).maps
            source = source.gather(1, maps[policy_row])
        canvas = torch.cat([images.view(batch, channels, -1), fill.expand(batch, channels, 1)], dim=2)
        moved = canvas.gather(2, source.unsqueeze(1).expand(batch, channels, height * width))
        return moved.view(batch, channels, height, width)

    def _recolour(
        self, images: torch.Tensor, policy_row: torch.Tensor, mean: Sequence[float], std: Sequence[float]
    ) -> torch.Tensor:
        """The colour and tone operations of every image, then the normalisation (float32 out)."""
        batch, channels, height, width = images.shape
        tables = _policy_tables(height, width, channels, self.magnitude_bins, images.device)
        params = tables.params[policy_row]  # (B, 3, 1, 1)
        kind = params[:, 2:3]
        # the blend x * r + other * (1 - f), exactly torchvision's _blend (its multiply-add rounded once)
        gray = _grayscale(images) if channels == 3 else images.float()
        other = torch.where(kind == _CONTRAST, gray.mean(dim=(-3, -2, -1), keepdim=True), gray)
        if height > 2 and width > 2:
            kernel, inner = _sharpness_parts(channels, height, width, images.device)
            floats = images.float()
            blurred = torch.nn.functional.conv2d(floats, kernel, padding=1).round_()
            other = torch.where(kind == _SHARPNESS, (blurred - floats) * inner, other)
        blended = (images.mul(params[:, 0:1].float()).double() + other.double() * params[:, 1:2]).float()
        # autocontrast: each channel stretched to 0-255 (torchvision's arithmetic); the identity elsewhere
        low, high = images.amin(dim=(-2, -1), keepdim=True), images.amax(dim=(-2, -1), keepdim=True)
        spread = high - low
        stretch = (spread != 0) & (kind == _AUTOCONTRAST)
        scale = torch.where(stretch, spread * (1.0 / 255), 1.0)
        pixels = ((blended - low * stretch) / scale).clamp_(0, 255).long().view(batch, channels, 1, -1)
        # equalize: torchvision's lookup table from the histogram (PIL's scheme), for the images that drew it
        zeros, ones = _histogram_parts(batch, channels, height * width, images.device)
        histogram = zeros.scatter_add(3, pixels, ones)
        below = histogram.cumsum(3) - histogram  # pixels darker than each value
        step = (pixels != high).sum(3, keepdim=True) // 255  # of the pixels below the image's maximum
        equalized = ((below + step // 2) // step.clamp(min=1)).clamp_(max=255)
        lut = torch.where((step != 0) & (kind == _EQUALIZE), equalized, tables.luts[policy_row])
        # the posterize / solarize / equalize table composed with the normalisation, applied in one gather
        normalized = _normalization_lut(tuple(mean), tuple(std), images.device).expand(batch, channels, 1, 256)
        return normalized.gather(3, lut).gather(3, pixels).view(batch, channels, height, width)

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
        if size is not None and tuple(images.shape[-2:]) != (size, size):
            images = TF.resize(images, [size, size], antialias=True)
        bits = sample_bits(torch.as_tensor(seeds, dtype=torch.int64, device=images.device))
        policy, policy_row = self.policy_on(epoch), None
        if self.padding or self.hflip or policy:
            fill = _constant(tuple(round(255 * m) for m in mean), torch.uint8, images.device).view(1, -1, 1)
            crop_row, policy_row = self._indices(bits, policy)
            images = self._move(images, crop_row, policy_row, fill)
        out = normalize(images, mean, std) if policy_row is None else self._recolour(images, policy_row, mean, std)
        if self.re_prob:
            out = self.erase(out, bits.double() * (1.0 / _ONE))
        return out


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (B, C, H, W) to float32 ``(x / 255 - mean) / std``, as ToTensor + Normalize compute it."""
    mean_t = _constant(tuple(mean), torch.float32, images.device).view(1, -1, 1, 1)
    std_t = _constant(tuple(std), torch.float32, images.device).view(1, -1, 1, 1)
    return images.float().div_(255.0).sub_(mean_t).div_(std_t)  # in place: the same numbers, fewer copies
