"""Batched augmentation equals its per-image definition: the draws against a pure-Python transcription of
the counter-based hash, the padded crop and the flip against a numpy transcription, every policy operation
and magnitude against torchvision's own TrivialAugmentWide operation on each image alone, erasing against
a per-image loop; each image's augmentation depends on its seed only; and a batch costs a fixed number of
tensor operations, none of which reads a value back to the host."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch
from conftest import OpCounter
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from crate.data.batch_augmentation import DRAWS, POLICY_OPS, BatchAugmentation, normalize, sample_bits, sample_uniforms

MEAN = (0.49, 0.48, 0.45)
STD = (0.25, 0.24, 0.26)
FILL = [round(255 * m) for m in MEAN]
TWO32 = 1 << 32


def _batch(n: int = 24, size: int = 12, channels: int = 3) -> tuple[torch.Tensor, list[int]]:
    generator = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=generator)
    return images, [1000 + 7 * i for i in range(n)]


def _hash(seed: int, draw: int) -> int:
    """The documented draw, in Python integers: mix32(key(seed) ^ k_draw)."""
    seed &= (1 << 64) - 1  # the int64 seed's two's-complement bits
    key = (seed ^ (seed >> 32)) & 0xFFFFFFFF  # the low 32 bits of a shift do not depend on the sign
    x = key ^ ((0x9E3779B9 * (draw + 1)) & 0xFFFFFFFF)
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


def _choice(bits: list[int], policy_prob: float = 1.0, bins: int = 31) -> tuple[str, float]:
    """An image's (operation, signed magnitude) as the module docstring defines it, in Python numbers."""
    names = list(POLICY_OPS)
    op = bits[3] * 14 // max(round(policy_prob * TWO32), 1)
    if op >= 14:
        return "identity", 0.0
    name, level, negative = names[op], bits[4] * bins // TWO32, bits[5] < TWO32 // 2
    top = POLICY_OPS[name]
    if top is None:
        return name, 0.0
    if name == "posterize":
        return name, float(8 - round(level / ((bins - 1) / 6)))
    if name == "solarize":
        return name, 255.0 * (1 - level / (bins - 1))
    magnitude = top * level / (bins - 1)
    signed = name not in ("posterize", "solarize", "autocontrast", "equalize", "identity")
    return name, -magnitude if signed and negative else magnitude


def test_the_draws_equal_a_transcription_of_the_documented_hash() -> None:
    seeds = [0, 1, 2, 1000, 2**31 - 1, 2**32, 2**32 + 5, 123_456_789_012_345, 2**62 + 3, -1, -(2**40)]
    bits = sample_bits(torch.tensor(seeds))
    assert bits.shape == (len(seeds), DRAWS) and bits.dtype == torch.int64
    assert bits.tolist() == [[_hash(s, j) for j in range(DRAWS)] for s in seeds]
    assert torch.equal(sample_uniforms(seeds), bits.double() / TWO32)


def test_the_draws_are_uniform_and_unrelated_across_draws_and_neighbouring_seeds() -> None:
    """Consecutive seeds (as the sampler gives them): each draw's 16-bin histogram passes a chi-square test at
    the 1e-4 level, and draws of one image and of neighbouring images are uncorrelated (|r| < 0.02)."""
    n = 40_000
    uniforms = sample_uniforms(torch.arange(5_000_000, 5_000_000 + n)).numpy()
    counts = np.stack([np.bincount((uniforms[:, j] * 16).astype(int), minlength=16) for j in range(DRAWS)])
    chi2 = ((counts - n / 16) ** 2 / (n / 16)).sum(axis=1)
    assert chi2.max() < 52.6, chi2  # chi-square with 15 degrees of freedom, p = 1e-4
    within = np.corrcoef(uniforms.T)[np.triu_indices(DRAWS, 1)]
    across = [np.corrcoef(uniforms[:-1, j], uniforms[1:, j])[0, 1] for j in range(DRAWS)]
    assert np.abs(within).max() < 0.02 and np.abs(across).max() < 0.02


@pytest.mark.parametrize("padding", [3, 0], ids=["crop-and-flip", "flip-only"])
def test_crop_and_flip_equal_a_numpy_transcription_of_pad_shift_and_mirror(padding: int) -> None:
    images, seeds = _batch()
    augmentation = BatchAugmentation(padding=padding, hflip=0.5)
    out = augmentation(images, seeds, MEAN, STD)
    flips = 0
    for i, image in enumerate(images.numpy()):
        bits = [_hash(seeds[i], j) for j in range(3)]
        top, left = bits[0] * (2 * padding + 1) // TWO32, bits[1] * (2 * padding + 1) // TWO32
        canvas = np.stack([np.pad(channel, padding, constant_values=FILL[c]) for c, channel in enumerate(image)])
        expected = canvas[:, top : top + 12, left : left + 12]
        if bits[2] < TWO32 // 2:
            expected, flips = expected[:, :, ::-1], flips + 1
        expected = (expected.astype(np.float32) / 255 - np.float32(MEAN)[:, None, None]) / np.float32(STD)[
            :, None, None
        ]
        np.testing.assert_allclose(out[i].numpy(), expected, atol=1e-6)
    assert 0 < flips < len(images)  # both branches were exercised


def _seeds_of_every_choice(bins: int = 31) -> tuple[list[int], list[tuple[str, float]]]:
    """One seed for each (operation, magnitude bin, sign) the policy can draw, found by search."""
    wanted, found = {}, {}
    bits = sample_bits(torch.arange(200_000)).tolist()
    for seed, row in enumerate(bits):
        key = (row[3] * 14 // TWO32, row[4] * bins // TWO32, row[5] >= TWO32 // 2)
        if key not in wanted:
            wanted[key], found[key] = seed, _choice(row, bins=bins)
    assert len(wanted) == 14 * bins * 2
    return list(wanted.values()), list(found.values())


def _varied_images(n: int, size: int, channels: int) -> torch.Tensor:
    """Random images whose channels each span a random part of 0-255 (so autocontrast has work to do), some
    with a saturated half (so equalize meets its no-op case, too few pixels below the maximum)."""
    generator = torch.Generator().manual_seed(5)
    low = torch.randint(0, 128, (n, channels, 1, 1), generator=generator)
    span = torch.randint(1, 128, (n, channels, 1, 1), generator=generator)
    images = low + (torch.rand(n, channels, size, size, generator=generator) * span).long()
    saturated = torch.arange(n).view(n, 1, 1, 1) % 7 == 0
    images = torch.where(saturated & (torch.arange(size).view(1, 1, size, 1) < size // 2 + 2), 255, images)
    flat = torch.arange(n).view(n, 1, 1, 1) % 11 == 3  # a constant first channel: autocontrast leaves it
    images[:, :1] = torch.where(flat, 90, images[:, :1])
    return images.to(torch.uint8)


@pytest.mark.parametrize(("channels", "size"), [(3, 24), (3, 25), (1, 24)], ids=["rgb", "rgb-odd-side", "grey"])
def test_every_policy_operation_and_magnitude_equals_torchvision_on_each_image_alone(channels: int, size: int) -> None:
    """Bit for bit, for all 14 x 31 x 2 (operation, magnitude bin, sign) draws, each on its own random image,
    in one batch (normalised outputs compared, as normalisation is part of the batched step)."""
    seeds, choices = _seeds_of_every_choice()
    images = _varied_images(len(seeds), size, channels)
    fill = FILL[:channels]
    mean, std = MEAN[:channels], STD[:channels]
    out = BatchAugmentation(padding=0, hflip=0.0, policy="trivial")(images, seeds, mean, std)
    reference = v2.TrivialAugmentWide(num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=fill)
    names = dict(zip(POLICY_OPS, reference._AUGMENTATION_SPACE, strict=True))
    changed = collections.Counter()
    for i, (op, magnitude) in enumerate(choices):
        name = names[op]
        magnitudes_fn, signed = reference._AUGMENTATION_SPACE[name]
        if op == "solarize":  # torchvision's solarize magnitude is a fraction of the full scale
            magnitude = magnitude / 255.0
        bins = magnitudes_fn(31, size, size)
        if bins is not None:  # the magnitude is one of torchvision's bins, signed where it is
            assert torch.isclose(bins.double(), torch.tensor(abs(magnitude), dtype=torch.float64), atol=1e-6).any()
            assert signed or magnitude >= 0
        expected = reference._apply_image_or_video_transform(
            tv_tensors.Image(images[i]), name, magnitude, InterpolationMode.NEAREST, {tv_tensors.Image: fill}
        )
        expected = expected.as_subclass(torch.Tensor)
        changed[op] += not torch.equal(expected, images[i])
        assert torch.equal(out[i], normalize(expected[None], mean, std)[0]), (op, magnitude)
    # every operation but the identity (and saturation on grey images) changed most of its images
    inert = {"identity", "color"} if channels == 1 else {"identity"}
    assert {op for op, n in changed.items() if n >= 31} == set(POLICY_OPS) - inert


def test_erasing_sets_one_rectangle_of_the_drawn_area_and_ratio_to_the_mean() -> None:
    images, seeds = _batch(n=64, size=16)
    augmentation = BatchAugmentation(padding=0, hflip=0.0, re_prob=0.5)
    normalised = normalize(images, MEAN, STD)
    out = augmentation.erase(normalised, sample_uniforms(seeds))
    uniforms = sample_uniforms(seeds).numpy()
    erased = 0
    for i in range(64):
        expected = normalised[i].clone()
        if uniforms[i, 6] < 0.5:
            area = 256 * (0.02 + uniforms[i, 7] * (1 / 3 - 0.02))
            ratio = math.exp(math.log(0.3) + uniforms[i, 8] * (math.log(1 / 0.3) - math.log(0.3)))
            h = min(max(round(math.sqrt(area * ratio)), 1), 16)
            w = min(max(round(math.sqrt(area / ratio)), 1), 16)
            top, left = int(uniforms[i, 9] * (16 - h + 1)), int(uniforms[i, 10] * (16 - w + 1))
            expected[:, top : top + h, left : left + w] = 0.0
            erased += 1
        assert torch.equal(out[i], expected)
    assert 0 < erased < 64


def test_each_image_s_augmentation_depends_on_its_own_seed_only() -> None:
    """Another batch composition (resume, batch size, DDP split) gives each image the same augmentation."""
    images, seeds = _batch(n=32)
    augmentation = BatchAugmentation(padding=4, hflip=0.5, policy="trivial", re_prob=0.3)
    whole = augmentation(images, seeds, MEAN, STD)
    order = torch.randperm(32, generator=torch.Generator().manual_seed(0))[:11]
    part = augmentation(images[order], [seeds[i] for i in order], MEAN, STD)
    assert torch.equal(part, whole[order])
    other = augmentation(images, [s + 1 for s in seeds], MEAN, STD)
    assert not torch.equal(other, whole)


def test_the_policy_stops_after_policy_epochs_and_nothing_else_changes() -> None:
    """Epochs before ``policy_epochs`` get the whole augmentation, later ones the same draws without the policy."""
    images, seeds = _batch(n=32)
    steps = dict(padding=4, hflip=0.5, re_prob=0.3)
    limited = BatchAugmentation(policy="trivial", policy_epochs=3, **steps)
    always, never = BatchAugmentation(policy="trivial", **steps), BatchAugmentation(**steps)
    with_policy, without = always(images, seeds, MEAN, STD), never(images, seeds, MEAN, STD)
    assert not torch.equal(with_policy, without)  # the policy changes this batch, so the comparisons can fail
    for epoch in (0, 2):
        assert torch.equal(limited(images, seeds, MEAN, STD, epoch=epoch), with_policy)
        assert torch.equal(always(images, seeds, MEAN, STD, epoch=epoch + 100), with_policy)
    for epoch in (3, 50):
        assert torch.equal(limited(images, seeds, MEAN, STD, epoch=epoch), without)


def test_policy_prob_leaves_the_images_above_it_alone_and_rescales_the_operation_draw_of_the_others() -> None:
    """``policy_prob`` p: an image whose operation draw b is >= p 2^32 gets no operation, the others operation
    floor(14 b / (p 2^32)) with the full policy's magnitude; the batch matches that image by image."""
    images, seeds = _batch(n=64)
    bits = [[_hash(s, j) for j in range(DRAWS)] for s in seeds]
    mild = BatchAugmentation(policy="trivial", padding=0, hflip=0.0, policy_prob=0.4)
    full = BatchAugmentation(policy="trivial", padding=0, hflip=0.0)
    plain = BatchAugmentation(padding=0, hflip=0.0)
    out, out_full, out_plain = (a(images, seeds, MEAN, STD) for a in (mild, full, plain))
    left_alone = 0
    for i, row in enumerate(bits):
        op, _ = _choice(row, policy_prob=0.4)
        if row[3] >= round(0.4 * TWO32):
            assert op == "identity" and torch.equal(out[i], out_plain[i])
            left_alone += 1
        elif op == _choice(row)[0]:  # the same operation as the full policy's draw: the same image
            assert torch.equal(out[i], out_full[i])
    assert 0 < left_alone < len(seeds)  # both branches were exercised
    assert not torch.equal(out, out_plain)


@pytest.mark.parametrize("policy", [None, "trivial"])
def test_a_batch_costs_a_fixed_small_number_of_operations_without_host_reads(policy: str | None) -> None:
    """The same operations at batch 16 and 96 (with every policy operation drawn in the larger one): at most
    100 with crop, flip and the policy; none that reads a tensor's value on the host (``item``, ``bool``,
    ``tolist`` all run ``_local_scalar_dense``) or makes a shape from data (``nonzero``)."""
    augmentation = BatchAugmentation(padding=4, hflip=0.5, policy=policy)
    counts = []
    for n in (16, 96):
        images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)
        seeds = torch.arange(n) + 77
        augmentation(images, seeds, MEAN, STD)  # the first batch of a size builds its tables
        with OpCounter() as counter:
            augmentation(images, seeds, MEAN, STD)
        counts.append(counter.ops)
    assert counts[0] == counts[1]
    assert sum(counts[1].values()) <= (100 if policy else 40), counts[1]
    assert not {"_local_scalar_dense", "nonzero", "item", "masked_select"} & set(counts[1])


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(padding=-1), "padding"),
        (dict(hflip=1.5), "hflip"),
        (dict(re_prob=-0.1), "re_prob"),
        (dict(policy="rand-m9"), "policy"),
        (dict(magnitude_bins=1), "magnitude_bins"),
        (dict(policy="trivial", policy_epochs=-1), "policy_epochs"),
        (dict(policy="trivial", policy_prob=1.5), "policy_prob"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BatchAugmentation(**settings)
