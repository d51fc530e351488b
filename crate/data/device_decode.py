"""Image folders of JPEGs decoded and augmented on the device that trains: the loader's workers only read bytes.

Decoding a full-size JPEG with PIL takes a few milliseconds of a CPU core, and a data-loader worker per core
cannot keep a GPU busy with a large model at ImageNet sizes. Here a worker reads each file's bytes; a batch of
them is decoded where the model runs (``torchvision.io.decode_jpeg`` on a list, ``device="cuda"``: nvJPEG),
then cropped, resized, flipped and normalised there. On a CPU the same code decodes on the CPU, so the path is
tested where there is no GPU.

**Which files go to the device.** A file goes as bytes when its header says it is a sequential (baseline or
extended, Huffman-coded) JPEG with three components (YCbCr): what every decoder takes. Progressive JPEGs,
grayscale and CMYK JPEGs, PNGs and every other format are decoded in the worker by the folder's own reader
(:class:`crate.lit.data.ImageLoader`'s conversions), so they arrive as pixels and join the batch on the device.

**Training**, per image, every draw from a ``random.Random`` seeded by the image's own sample seed (so an
image's augmentation does not depend on the batch size, the resume point or the number of processes, as in the
stored path): timm's random-resized crop box (:func:`crop_box`: ``RandomResizedCropAndInterpolation``'s
algorithm, ten tries then a central crop), the crop resized to the output side (antialiased, the model's
interpolation), a horizontal flip with probability ``hflip``; then the whole batch goes through
:class:`crate.data.BatchAugmentation` without its crop and flip: the TrivialAugment-style policy where
``policy`` is ``"trivial"``, the normalisation, and random erasing where ``re_prob`` > 0, each from the image's
own counter-based draws (a separate stream from the crop's).

**Evaluation**: timm's evaluation transform, the shorter side resized to ``floor(size / crop_pct)`` and the
centre cropped to ``size``, then normalised.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision.transforms.v2.functional as TF
from torch.utils.data import Dataset
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import InterpolationMode

from .batch_augmentation import BatchAugmentation, normalize

__all__ = [
    "DeviceImageTransform",
    "EncodedImages",
    "SeededEncodedImages",
    "collate_encoded",
    "crop_box",
    "decode_batch",
    "device_decodable",
    "jpeg_frame",
]

_SEQUENTIAL = (0xC0, 0xC1)  # SOF0 (baseline) and SOF1 (extended sequential), Huffman-coded
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn; C4 (DHT), C8 (JPG), CC (DAC) are not frames
_STANDALONE = frozenset(range(0xD0, 0xDA)) | {0x01}  # RSTn, SOI, EOI, TEM: markers without a length


def jpeg_frame(data: bytes) -> tuple[int, int] | None:
    """``(SOF marker, components)`` from a JPEG's header, or None when ``data`` is not a readable JPEG."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _STANDALONE:
            position += 2
            continue
        length = (data[position + 2] << 8) | data[position + 3]
        if marker in _FRAMES:
            return (marker, data[position + 9]) if position + 10 <= len(data) else None
        if marker == 0xDA or length < 2:  # scan data before any frame header: not a valid JPEG
            return None
        position += 2 + length
    return None


def device_decodable(data: bytes) -> bool:
    """Whether a file's bytes go to the device decoder: a sequential three-component JPEG."""
    frame = jpeg_frame(data)
    return frame is not None and frame[0] in _SEQUENTIAL and frame[1] == 3


class EncodedImages(Dataset):
    """A split's files as ``(payload, label, path)``: the payload is the file's bytes (a 1-D uint8 tensor) when
    the device decodes it, otherwise the image read by ``loader`` (a PIL reader of the folder's mode, which names
    the file in its error) as a ``(C, H, W)`` uint8 tensor."""

    def __init__(self, samples: Sequence[tuple[Path | str, int]], loader: Callable[[str], Any]) -> None:
        self.samples = [(str(path), int(label)) for path, label in samples]
        self.targets = [label for _, label in self.samples]
        self.loader = loader

    def __len__(self) -> int:
        return len(self.samples)

    def payload(self, path: str) -> torch.Tensor:
        data = Path(path).read_bytes()
        if getattr(self.loader, "mode", "RGB") == "RGB" and device_decodable(data):
            return torch.frombuffer(bytearray(data), dtype=torch.uint8)
        image = np.asarray(self.loader(path))
        return torch.from_numpy(image.copy()).permute(2, 0, 1) if image.ndim == 3 else torch.from_numpy(image)[None]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, str]:
        path, label = self.samples[index]
        return self.payload(path), label, path


class SeededEncodedImages(Dataset):
    """:class:`EncodedImages` keyed by ``(index, sample_seed)`` for the resumable loader:
    ``(payload, label, path, seed)``."""

    def __init__(self, images: EncodedImages) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int, str, int]:
        payload, label, path = self.images[key[0]]
        return payload, label, path, int(key[1])


def collate_encoded(items: list[tuple[Any, ...]]) -> dict[str, Any]:
    """A batch of encoded items: ``{"payloads": [...], "labels": (B,), "paths": [...][, "seeds": (B,)]}``."""
    batch: dict[str, Any] = {
        "payloads": [item[0] for item in items],
        "labels": torch.tensor([item[1] for item in items], dtype=torch.int64),
        "paths": [item[2] for item in items],
    }
    if len(items[0]) > 3:
        batch["seeds"] = torch.tensor([item[3] for item in items], dtype=torch.int64)
    return batch


def decode_batch(
    payloads: Sequence[torch.Tensor], paths: Sequence[str], device: torch.device | str
) -> list[torch.Tensor]:
    """Every payload as a ``(C, H, W)`` uint8 image on ``device``: the encoded ones decoded there in one call,
    the others moved there. A file the decoder refuses raises ``ValueError`` naming it."""
    device = torch.device(device)
    encoded = [i for i, payload in enumerate(payloads) if payload.dim() == 1]
    images: list[torch.Tensor | None] = [None if payload.dim() == 1 else payload.to(device) for payload in payloads]
    if encoded:
        try:
            decoded = decode_jpeg([payloads[i] for i in encoded], mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # find the file: decode one at a time
            decoded = []
            for i in encoded:
                try:
                    decoded.append(decode_jpeg(payloads[i], mode=ImageReadMode.RGB, device=device))
                except RuntimeError as err:
                    reason = str(err).strip().split(", ")[-1]  # torchvision prefixes its source location
                    raise ValueError(f"cannot decode image {paths[i]} ({reason}); replace or remove the file") from err
        for i, image in zip(encoded, decoded, strict=True):
            images[i] = image
    return images  # type: ignore[return-value]


def crop_box(
    height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float], rng: random.Random
) -> tuple[int, int, int, int]:
    """``(top, left, crop height, crop width)`` of a random-resized crop, with timm's (and torchvision's) draws:
    up to ten tries of an area share in ``scale`` and a log-uniform aspect ratio in ``ratio``, the first that
    fits placed uniformly; otherwise the largest central crop within ``ratio``."""
    area = height * width
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = rng.uniform(*scale) * area
        aspect = math.exp(rng.uniform(log_low, log_high))
        crop_w = int(round(math.sqrt(target * aspect)))
        crop_h = int(round(math.sqrt(target / aspect)))
        if crop_w <= width and crop_h <= height:
            return rng.randint(0, height - crop_h), rng.randint(0, width - crop_w), crop_h, crop_w
    shape = width / height
    if shape < min(ratio):
        crop_w, crop_h = width, int(round(width / min(ratio)))
    elif shape > max(ratio):
        crop_w, crop_h = int(round(height * max(ratio))), height
    else:
        crop_w, crop_h = width, height
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


@dataclass(frozen=True)
class DeviceImageTransform:
    """The training and evaluation transforms of decoded images on their device (module docstring).

    Args:
        size: the output side.
        mean: the normalisation's mean, one value per channel.
        std: the normalisation's standard deviation, one value per channel.
        scale: the random-resized crop's range of area shares.
        ratio: the random-resized crop's range of aspect ratios.
        hflip: probability of a horizontal flip.
        re_prob: probability of random erasing (timm's settings, as :class:`BatchAugmentation` draws it).
        policy: ``"trivial"``: :class:`BatchAugmentation`'s TrivialAugment-style policy after the crop and flip,
            each image by its own seed; ``None``: none.
        interpolation: ``bilinear`` or ``bicubic`` (the model's pretrained cfg), antialiased.
        crop_pct: the evaluation's centre crop share (timm's ``crop_pct``).
    """

    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: float = 0.5
    re_prob: float = 0.0
    policy: str | None = None
    interpolation: str = "bilinear"
    crop_pct: float = 0.875

    def __post_init__(self) -> None:
        if self.interpolation not in ("bilinear", "bicubic"):
            raise ValueError(f"interpolation must be 'bilinear' or 'bicubic' on the device, got {self.interpolation!r}")
        if not 0 < self.crop_pct <= 1:
            raise ValueError(f"crop_pct must lie in (0, 1], got {self.crop_pct}")

    @property
    def _mode(self) -> InterpolationMode:
        return InterpolationMode.BICUBIC if self.interpolation == "bicubic" else InterpolationMode.BILINEAR

    def _resized_crop(self, image: torch.Tensor, box: tuple[int, int, int, int]) -> torch.Tensor:
        top, left, height, width = box
        return TF.resized_crop(image, top, left, height, width, [self.size, self.size], self._mode, antialias=True)

    def train(self, images: Sequence[torch.Tensor], seeds: Sequence[int], epoch: int = 0) -> torch.Tensor:
        """A normalised float32 batch ``(B, C, size, size)`` of uint8 images, each augmented by its own seed
        (the crop box and flip from ``random.Random(seed)``; the policy and erasing from the seed's counter-based
        draws, :mod:`crate.data.batch_augmentation`)."""
        out = []
        for image, seed in zip(images, seeds, strict=True):
            rng = random.Random(int(seed))
            box = crop_box(image.shape[-2], image.shape[-1], self.scale, self.ratio, rng)
            crop = self._resized_crop(image, box)
            out.append(crop.flip(-1) if rng.random() < self.hflip else crop)
        rest = BatchAugmentation(padding=0, hflip=0.0, policy=self.policy, re_prob=self.re_prob)
        seeds_t = torch.as_tensor([int(s) for s in seeds], dtype=torch.int64)
        return rest(torch.stack(out), seeds_t, self.mean, self.std, epoch=epoch)

    def evaluate(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """timm's evaluation transform of each image (shorter side to ``floor(size / crop_pct)``, centre crop),
        normalised: ``(B, C, size, size)`` float32."""
        side = math.floor(self.size / self.crop_pct)
        out = []
        for image in images:
            resized = TF.resize(image, side, self._mode, antialias=True)
            out.append(TF.center_crop(resized, [self.size, self.size]))
        return normalize(torch.stack(out), self.mean, self.std)
