"""DINO's multi-crop augmentation of whole uint8 batches, on the batch's device, each image from its own seed.

Self-distillation (SimDINO, :mod:`crate.lit.self_distillation`) sees every image in several views: ``global_crops``
views at ``global_size`` covering ``global_scale`` of the image's area, and ``local_crops`` views at
``local_size`` covering ``local_scale``. Each view of an image is drawn from that image's seed alone (the
sampler's per-sample seed, as in :mod:`crate.data.batch_augmentation`), so resume, batch size and DDP split
do not change it: view ``v``'s draw ``j`` is ``mix32(mix32(key(s) XOR c_v) XOR k_j)``, the classification
path's counter-based hash with a key per view.

Per view, in order (DINO's recipe, with the probabilities per view that it uses):

- a random resized crop: area share ``a ~ U(scale)``, log aspect ratio ``~ U(log 3/4, log 4/3)``, the box
  ``sqrt(a r) x sqrt(a / r)`` of the image (clipped to the image; torchvision instead redraws up to ten
  times), placed uniformly, resampled bilinearly to the view's size, and mirrored with probability ``hflip``;
- with probability ``jitter_prob``, colour jitter: brightness, contrast and saturation factors
  ``~ U(1 - x, 1 + x)`` and a hue shift ``~ U(-hue, hue)`` turns of the colour wheel, applied in that fixed
  order (torchvision draws the order; the hue shift here is a rotation of the chroma plane of YIQ, not
  torchvision's HSV round trip), clamped to [0, 1] after each;
- with probability ``grayscale_prob``, the luma (ITU-R 601) in every channel;
- a Gaussian blur with ``sigma ~ U(0.1, 2.0)`` pixels of a 32-pixel view (scaled with the view's side; a
  kernel of ``blur_kernel`` taps, edges replicated) with probability ``blur_prob`` (first global view 1.0,
  second 0.1, local views 0.5);
- solarisation (``x -> 1 - x`` where ``x >= 0.5``) with probability ``solarize_prob`` (second global view
  0.2, others 0);
- normalisation with the model's mean and std.

All views of one size go through these steps as one batch (``views x B`` images), so a training batch costs
two passes of a fixed number of tensor operations whatever its size, with nothing read back to the host.
Colour steps act on 3-channel images only; 1-channel images get crop, flip, blur and solarisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .batch_augmentation import _MASK32, _constant, _mix32

__all__ = ["MultiCrop", "view_uniforms"]

# a view's draws, in order (columns of view_uniforms)
_AREA, _RATIO, _X, _Y, _FLIP, _JITTER, _BRIGHT, _CONTRAST, _SATURATE, _HUE, _GRAY, _BLUR, _SIGMA, _SOLARIZE = range(14)
VIEW_DRAWS = 14
_DRAW_KEYS = tuple((0x9E3779B9 * (j + 1)) & _MASK32 for j in range(VIEW_DRAWS))
_LUMA = (0.299, 0.587, 0.114)
# RGB -> YIQ and back (NTSC); the hue shift rotates (I, Q)
_TO_YIQ = ((0.299, 0.587, 0.114), (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))
_FROM_YIQ = tuple(map(tuple, torch.linalg.inv(torch.tensor(_TO_YIQ, dtype=torch.float64)).tolist()))


def view_uniforms(seeds: Sequence[int] | torch.Tensor, views: Sequence[int]) -> torch.Tensor:
    """``(len(views) * B, VIEW_DRAWS)`` float64 uniforms in [0, 1), view-major: row ``i * B + b`` holds view
    ``views[i]`` of image ``b``, a function of ``seeds[b]`` and the view's number only."""
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    keys = (seeds ^ (seeds >> 32)) & _MASK32  # (B,)
    view_keys = _constant(tuple((0x85EBCA6B * (v + 1)) & _MASK32 for v in views), torch.int64, seeds.device)
    per_view = _mix32((view_keys[:, None] ^ keys[None, :]).reshape(-1))  # (V B,)
    draw_keys = _constant(_DRAW_KEYS, torch.int64, seeds.device)
    return _mix32(per_view[:, None] ^ draw_keys).double() * (1.0 / (1 << 32))


def _gaussian_taps(sigma: torch.Tensor, taps: int) -> torch.Tensor:
    """(n, taps) normalised 1-D Gaussian kernels of the given widths (pixels)."""
    offsets = _constant(tuple(k - (taps - 1) / 2 for k in range(taps)), torch.float32, sigma.device)
    weights = torch.exp((offsets[None, :] / sigma[:, None]).square().mul(-0.5))
    return weights / weights.sum(dim=1, keepdim=True)


@dataclass(frozen=True)
class MultiCrop:
    """Settings of the multi-crop views (the steps: the module docstring). Probabilities given per view kind
    are ``(first global, other globals, locals)``.

    Args:
        global_crops: views at ``global_size`` (the teacher sees these); at least 1.
        local_crops: views at ``local_size`` (the student alone); 0 for none.
        global_size: the side of a global view (the model's image size).
        local_size: the side of a local view (the model must take it: ``dynamic_img_size``).
        global_scale: area share range of a global crop.
        local_scale: area share range of a local crop.
        hflip: probability of a horizontal flip.
        jitter_prob: probability of the colour jitter.
        brightness: brightness factor range half-width.
        contrast: contrast factor range half-width.
        saturation: saturation factor range half-width.
        hue: hue shift range half-width, in turns (0.5: half the wheel).
        grayscale_prob: probability of grey.
        blur_prob: probability of the blur per view kind.
        blur_sigma: blur width range in pixels of a 32-pixel view (scaled with the view's side).
        blur_kernel: taps of the blur kernel (odd).
        solarize_prob: probability of solarisation per view kind.
    """

    global_crops: int = 2
    local_crops: int = 8
    global_size: int = 32
    local_size: int = 16
    global_scale: tuple[float, float] = (0.4, 1.0)
    local_scale: tuple[float, float] = (0.05, 0.4)
    hflip: float = 0.5
    jitter_prob: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.2
    hue: float = 0.1
    grayscale_prob: float = 0.2
    blur_prob: tuple[float, float, float] = (1.0, 0.1, 0.5)
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = 7
    solarize_prob: tuple[float, float, float] = (0.0, 0.2, 0.0)

    def __post_init__(self) -> None:
        if self.global_crops < 1 or self.local_crops < 0:
            raise ValueError(
                f"need global_crops >= 1 and local_crops >= 0; got {self.global_crops}, {self.local_crops}"
            )
        for name in ("global_scale", "local_scale"):
            low, high = getattr(self, name)
            if not 0 < low <= high <= 1:
                raise ValueError(f"{name} must satisfy 0 < low <= high <= 1; got {(low, high)}")
        if self.blur_kernel < 1 or self.blur_kernel % 2 == 0:
            raise ValueError(f"blur_kernel must be a positive odd number of taps; got {self.blur_kernel}")
        if self.global_size < 1 or self.local_size < 1:
            raise ValueError(f"view sizes must be positive; got {self.global_size}, {self.local_size}")

    @property
    def n_crops(self) -> int:
        return self.global_crops + self.local_crops

    def __call__(
        self, images: torch.Tensor, seeds: Sequence[int] | torch.Tensor, mean: Sequence[float], std: Sequence[float]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The global views ``(global_crops * B, C, g, g)`` and local views ``(local_crops * B, C, l, l)`` (None
        without local crops), view-major, normalised float32, of a uint8 batch ``(B, C, H, W)``."""
        seeds = torch.as_tensor(seeds, dtype=torch.int64, device=images.device)
        kinds = [0] + [1] * (self.global_crops - 1)
        globals_ = self._views(images, seeds, range(self.global_crops), kinds, self.global_size, self.global_scale)
        locals_ = None
        if self.local_crops:
            views = range(self.global_crops, self.n_crops)
            locals_ = self._views(images, seeds, views, [2] * self.local_crops, self.local_size, self.local_scale)
        return normalize_views(globals_, mean, std), (None if locals_ is None else normalize_views(locals_, mean, std))

    def _views(
        self,
        images: torch.Tensor,
        seeds: torch.Tensor,
        views: Sequence[int],
        kinds: Sequence[int],
        size: int,
        scale: tuple[float, float],
    ) -> torch.Tensor:
        """Views ``views`` of every image as floats in [0, 1], view-major."""
        device, batch = images.device, len(images)
        # every draw mapped to its range in one multiply-add: (V B, VIEW_DRAWS) parameters, columns as named
        low, span = self._ranges(scale, size)
        p = torch.addcmul(
            _constant(low, torch.float32, device),
            view_uniforms(seeds, list(views)).float(),
            _constant(span, torch.float32, device),
        )
        # the per-kind probabilities of the blur and solarisation, per row
        kind = _constant(tuple(kinds), torch.int64, device).repeat_interleave(batch)
        chances = _constant(self.blur_prob + self.solarize_prob, torch.float32, device).view(2, 3)[:, kind]
        blur_on, solarize_on = p[:, _BLUR] < chances[0], p[:, _SOLARIZE] < chances[1]
        x = images.float().div(255.0).repeat(len(views), 1, 1, 1)
        x = self._crop(x, p, size)
        if x.shape[1] == 3:
            x = self._jitter(x, p)
        x = self._blur(x, p, blur_on)
        return torch.where(solarize_on[:, None, None, None] & (x >= 0.5), 1.0 - x, x)

    def _ranges(self, scale: tuple[float, float], size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per draw, the low end and width of the range it is mapped to (probability draws stay uniforms)."""
        ranges = [(0.0, 1.0)] * VIEW_DRAWS
        ranges[_AREA] = scale
        ranges[_RATIO] = (math.log(3 / 4), math.log(4 / 3))
        ranges[_BRIGHT] = (1 - self.brightness, 1 + self.brightness)
        ranges[_CONTRAST] = (1 - self.contrast, 1 + self.contrast)
        ranges[_SATURATE] = (1 - self.saturation, 1 + self.saturation)
        ranges[_HUE] = (-2 * math.pi * self.hue, 2 * math.pi * self.hue)  # radians
        ranges[_SIGMA] = tuple(sigma * size / 32 for sigma in self.blur_sigma)  # pixels of this view
        return tuple(low for low, _ in ranges), tuple(high - low for low, high in ranges)

    def _crop(self, x: torch.Tensor, p: torch.Tensor, size: int) -> torch.Tensor:
        area, ratio = p[:, _AREA], torch.exp(p[:, _RATIO])
        extent = torch.stack([torch.sqrt(area * ratio), torch.sqrt(area / ratio)], dim=1).clamp(max=1.0)  # (w, h)
        corner = p[:, _X : _Y + 1] * (1 - extent)  # (left, top): shares of the image's side
        flip = torch.where(p[:, _FLIP] < self.hflip, -1.0, 1.0)
        zero = torch.zeros_like(area)
        theta = torch.stack(
            [
                extent[:, 0] * flip,
                zero,
                2 * corner[:, 0] + extent[:, 0] - 1,
                zero,
                extent[:, 1],
                2 * corner[:, 1] + extent[:, 1] - 1,
            ],
            dim=1,
        ).view(-1, 2, 3)
        grid = F.affine_grid(theta, [len(x), x.shape[1], size, size], align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def _jitter(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        on = (p[:, _JITTER] < self.jitter_prob)[:, None, None, None]
        factors = p[:, _BRIGHT : _SATURATE + 1, None, None, None]  # (n, 3, 1, 1, 1): brightness, contrast, saturation
        luma = _constant(_LUMA, torch.float32, x.device).view(1, 3, 1, 1)
        y = (x * factors[:, 0]).clamp(0, 1)
        grey_mean = (y * luma).sum(dim=1, keepdim=True).mean(dim=(2, 3), keepdim=True)
        y = torch.lerp(grey_mean, y, factors[:, 1]).clamp(0, 1)
        y = torch.lerp((y * luma).sum(dim=1, keepdim=True), y, factors[:, 2]).clamp(0, 1)
        y = torch.where(on, self._hue(y, p[:, _HUE]), x)
        gray = (p[:, _GRAY] < self.grayscale_prob)[:, None, None, None]
        return torch.where(gray, (y * luma).sum(dim=1, keepdim=True).expand_as(y), y)

    @staticmethod
    def _hue(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
        """A rotation by ``angle`` (radians) of the chroma plane (I, Q) of YIQ, as one 3 x 3 RGB matrix per image."""
        cos, sin, zero, one = torch.cos(angle), torch.sin(angle), torch.zeros_like(angle), torch.ones_like(angle)
        rotation = torch.stack([one, zero, zero, zero, cos, -sin, zero, sin, cos], dim=1).view(-1, 3, 3)
        to_yiq = _constant(_TO_YIQ, torch.float32, x.device)
        matrix = _constant(_FROM_YIQ, torch.float32, x.device) @ rotation @ to_yiq  # (n, 3, 3), RGB -> RGB
        return torch.einsum("nij,njhw->nihw", matrix, x).clamp(0, 1)

    def _blur(self, x: torch.Tensor, p: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
        taps = _gaussian_taps(p[:, _SIGMA], self.blur_kernel)  # (n, k)
        n, channels, height, width = x.shape
        kernels = taps.repeat_interleave(channels, dim=0)  # (n C, k)
        pad = self.blur_kernel // 2
        flat = x.reshape(1, n * channels, height, width)
        flat = F.conv2d(F.pad(flat, (pad, pad, 0, 0), mode="replicate"), kernels[:, None, None, :], groups=n * channels)
        flat = F.conv2d(F.pad(flat, (0, 0, pad, pad), mode="replicate"), kernels[:, None, :, None], groups=n * channels)
        return torch.where(on[:, None, None, None], flat.reshape(n, channels, height, width), x)


def normalize_views(views: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Float views in [0, 1] normalised as :func:`crate.data.batch_augmentation.normalize` normalises uint8."""
    mean_t = _constant(tuple(mean), torch.float32, views.device).view(1, -1, 1, 1)
    std_t = _constant(tuple(std), torch.float32, views.device).view(1, -1, 1, 1)
    return (views - mean_t) / std_t
