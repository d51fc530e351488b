"""Training augmentation in timm's terms, one set of settings for every DataModule of the zoo.

The settings are the arguments of timm's ``create_transform`` (crop scale and ratio, flips, colour
jitter, RandAugment / AutoAugment, random erasing) and the transform is built from timm's own pieces.
Three things are added, for small and centred images:

- **size-dependent defaults.** timm's ImageNet crop keeps 8-100% of the image area: 8% of a 224-pixel
  image is a 63-pixel square, of a 32-pixel image a 9-pixel one, which leaves little of a small image.
  Unless set, the crop range is (0.08, 1) from 128 pixels up and (0.6, 1) below, and colour jitter is
  0.4 from 128 pixels up and off below.
- **a random affine step** (``rotate``, ``translate``, ``zoom``; torchvision's ``RandomAffine``): small
  rotations, shifts and rescalings that, unlike the crop, can zoom out; handwriting and other centred
  small images need them more than crops.
- **a padded crop** (``padding > 0``), CIFAR's recipe: resize to the output size, pad by ``padding``
  pixels and crop at a random position; it shifts without rescaling. It replaces the random-resized
  crop, so it cannot be combined with ``scale``.

``fill`` is the colour that geometric augmentations (rotation, shear and translation in RandAugment,
the padded crop's border, the affine step) bring in: the data's mean colour by default (timm's choice),
the background where the data has one (digits are white strokes on black).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from timm.data.transforms import str_to_interp_mode
from timm.data.transforms_factory import transforms_imagenet_train
from torchvision import transforms

from crate.data.device_decode import DeviceImageTransform

__all__ = ["SMALL_IMAGE", "Augmentation", "check_device_augmentation", "device_transform", "train_transform"]

SMALL_IMAGE = 128  # below this side (pixels), the crop range and colour jitter defaults are the small-image ones


@dataclass(frozen=True)
class Augmentation:
    """Training augmentation settings (timm's ``create_transform`` arguments).

    Args:
        scale: area range of the random-resized crop; ``None``: (0.08, 1) from 128 pixels up, (0.6, 1) below.
        ratio: aspect-ratio range of the random-resized crop.
        padding: > 0 replaces the random-resized crop by a padded random crop (pixels of padding per side).
        hflip: probability of a horizontal flip (0 for data that is not mirror-symmetric: digits, text).
        vflip: probability of a vertical flip.
        rotate: a random rotation by up to this many degrees either way (0: none), after the crop.
        translate: a random shift by up to this fraction of the side (0: none), with the rotation.
        zoom: a random rescaling by a factor in this range (e.g. (0.9, 1.1); (1, 1): none), with the
            rotation; unlike the crop it can zoom out. The three are torchvision's ``RandomAffine``.
        color_jitter: brightness/contrast/saturation jitter; ``None``: 0.4 from 128 pixels up, 0 below.
            timm turns it off when ``auto_augment`` is set.
        auto_augment: timm's policy string, e.g. ``rand-m9-mstd0.5`` (RandAugment, magnitude 9) or
            ``rand-m5-n2-tweights`` (RandAugment drawing mostly geometric operations).
        re_prob: probability of random erasing (after normalisation).
        policy: ``"trivial"``: the TrivialAugment-style policy after the crop and flip, torchvision's
            ``TrivialAugmentWide`` operations and magnitudes filled with the mean colour: in the workers
            torchvision's transform itself, with ``decode: device`` :class:`crate.data.BatchAugmentation`'s
            batched version of it on the device, each image by its own seed. Not together with
            ``auto_augment``. ``None``: no policy.
    """

    scale: tuple[float, float] | None = None
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    padding: int = 0
    hflip: float = 0.5
    vflip: float = 0.0
    rotate: float = 0.0
    translate: float = 0.0
    zoom: tuple[float, float] = (1.0, 1.0)
    color_jitter: float | None = None
    auto_augment: str | None = None
    re_prob: float = 0.0
    policy: str | None = None

    def __post_init__(self) -> None:
        if self.scale is not None:
            object.__setattr__(self, "scale", tuple(self.scale))
            if len(self.scale) != 2 or not 0 < self.scale[0] <= self.scale[1] <= 1:
                raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, got {self.scale}")
        object.__setattr__(self, "ratio", tuple(self.ratio))
        if len(self.ratio) != 2 or not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must be (low, high) with 0 < low <= high, got {self.ratio}")
        if self.padding < 0:
            raise ValueError(f"padding must be >= 0, got {self.padding}")
        if self.padding and self.scale is not None:
            raise ValueError("padding (padded crop) and scale (random-resized crop) exclude each other; set one")
        object.__setattr__(self, "zoom", tuple(self.zoom))
        if len(self.zoom) != 2 or not 0 < self.zoom[0] <= self.zoom[1]:
            raise ValueError(f"zoom must be (low, high) with 0 < low <= high, got {self.zoom}")
        if not 0 <= self.rotate <= 180:
            raise ValueError(f"rotate must lie in [0, 180] degrees, got {self.rotate}")
        for name in ("hflip", "vflip", "re_prob", "translate"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.color_jitter is not None and self.color_jitter < 0:
            raise ValueError(f"color_jitter must be >= 0, got {self.color_jitter}")
        if self.auto_augment in ("", "none", "None", "null"):  # how configs and command lines spell "off"
            object.__setattr__(self, "auto_augment", None)
        if self.auto_augment is not None:
            try:  # timm parses the policy string when it builds the transform; parse it now
                transforms_imagenet_train(img_size=32, auto_augment=self.auto_augment)
            except (AssertionError, ValueError, KeyError, IndexError) as err:
                raise ValueError(
                    f"unknown auto_augment policy {self.auto_augment!r} ({str(err) or 'timm cannot parse it'}): use "
                    "timm's strings, e.g. rand-m9-mstd0.5"
                ) from err

        if self.policy in ("", "none", "None", "null"):
            object.__setattr__(self, "policy", None)
        if self.policy not in (None, "trivial"):
            raise ValueError(f"policy must be 'trivial' or null, got {self.policy!r}")
        if self.policy is not None and self.auto_augment is not None:
            raise ValueError(
                f"policy {self.policy!r} and auto_augment {self.auto_augment!r} are two policies: set one of them"
            )

    def scale_for(self, img_size: int) -> tuple[float, float]:
        """The crop's area range at this image size."""
        if self.scale is not None:
            return self.scale
        return (0.08, 1.0) if img_size >= SMALL_IMAGE else (0.6, 1.0)

    def color_jitter_for(self, img_size: int) -> float:
        """The colour jitter at this image size."""
        if self.color_jitter is not None:
            return self.color_jitter
        return 0.4 if img_size >= SMALL_IMAGE else 0.0


def train_transform(
    augmentation: Augmentation,
    img_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    interpolation: str = "bilinear",
    fill: Sequence[float] | None = None,
) -> transforms.Compose:
    """The training transform of a PIL image (any mode the settings suit) to a normalised tensor.

    ``mean`` and ``std`` have one entry per channel of the output; ``fill`` (0-1 per channel) defaults to
    ``mean``.
    """
    jitter = augmentation.color_jitter_for(img_size)
    common = dict(
        img_size=img_size,
        scale=augmentation.scale_for(img_size),
        ratio=augmentation.ratio,
        hflip=augmentation.hflip,
        vflip=augmentation.vflip,
        color_jitter=jitter if jitter > 0 else None,
        interpolation=interpolation,
        separate=True,
    )
    # timm fills RandAugment's geometric operations with the normalisation mean; the first call is given
    # the fill colour as its "mean" for that reason, and its normalisation (third part) is not used
    fill = tuple(mean if fill is None else fill)
    primary, secondary, _ = transforms_imagenet_train(
        **common, auto_augment=augmentation.auto_augment, mean=fill, std=tuple(std)
    )
    *_, final = transforms_imagenet_train(**common, mean=tuple(mean), std=tuple(std), re_prob=augmentation.re_prob)
    steps = list(primary.transforms)
    pixel_fill = tuple(round(255 * value) for value in fill)
    if augmentation.padding:
        steps[0:1] = [
            transforms.Resize((img_size, img_size), interpolation=str_to_interp_mode(interpolation)),
            transforms.RandomCrop(img_size, padding=augmentation.padding, fill=pixel_fill),
        ]
    if augmentation.rotate or augmentation.translate or augmentation.zoom != (1.0, 1.0):
        shift = (augmentation.translate, augmentation.translate) if augmentation.translate else None
        steps.append(
            transforms.RandomAffine(
                augmentation.rotate,
                translate=shift,
                scale=augmentation.zoom if augmentation.zoom != (1.0, 1.0) else None,
                interpolation=str_to_interp_mode(interpolation),
                fill=pixel_fill,
            )
        )
    if augmentation.policy == "trivial":
        steps.append(transforms.TrivialAugmentWide(fill=list(pixel_fill)))
    return transforms.Compose(steps + list(secondary.transforms) + list(final.transforms))


def check_device_augmentation(augmentation: Augmentation, img_size: int) -> None:
    """Refuse settings the device path (``decode: device``) does not apply: it crops (``scale``, ``ratio``),
    flips horizontally, applies the batch policy (``policy``) and erases (``re_prob``); colour jitter left at its
    default is not applied there."""
    unsupported = {
        "padding": augmentation.padding,
        "vflip": augmentation.vflip,
        "rotate": augmentation.rotate,
        "translate": augmentation.translate,
        "zoom": augmentation.zoom != (1.0, 1.0),
        "color_jitter": augmentation.color_jitter or 0.0,
        "auto_augment": augmentation.auto_augment,
    }
    given = [name for name, value in unsupported.items() if value]
    if given:
        raise ValueError(
            f"decode 'device' crops (scale, ratio), flips (hflip), applies the batch policy (policy: trivial) and "
            f"erases (re_prob) on the device; it does not apply {', '.join(given)}: leave them unset (for "
            "auto_augment: --data.augmentation.policy trivial), or decode on the CPU (--data.decode cpu)"
        )


def device_transform(augmentation: Augmentation, img_size: int, config: dict) -> DeviceImageTransform:
    """The device path's transforms for these settings and a timm data config (mean, std, interpolation,
    crop_pct)."""
    interpolation = config.get("interpolation", "bilinear")
    return DeviceImageTransform(
        size=img_size,
        mean=tuple(config["mean"]),
        std=tuple(config["std"]),
        scale=augmentation.scale_for(img_size),
        ratio=augmentation.ratio,
        hflip=augmentation.hflip,
        re_prob=augmentation.re_prob,
        policy=augmentation.policy,
        interpolation=interpolation if interpolation in ("bilinear", "bicubic") else "bilinear",
        crop_pct=config.get("crop_pct", 0.875),
    )
