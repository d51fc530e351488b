"""Batched augmentation equals its per-image definition: the padded crop and the flip against a numpy
transcription, the policy against torchvision's own TrivialAugmentWide operation on each image alone,
erasing against a per-image loop; and each image's augmentation depends on its seed only."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from crate.data.batch_augmentation import POLICY_OPS, BatchAugmentation, normalize, sample_uniforms

MEAN = (0.49, 0.48, 0.45)
STD = (0.25, 0.24, 0.26)
FILL = [round(255 * m) for m in MEAN]


def _batch(n: int = 24, size: int = 12, channels: int = 3) -> tuple[torch.Tensor, list[int]]:
    generator = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=generator)
    return images, [1000 + 7 * i for i in range(n)]


@pytest.mark.parametrize("padding", [3, 0], ids=["crop-and-flip", "flip-only"])
def test_crop_and_flip_equal_a_numpy_transcription_of_pad_shift_and_mirror(padding: int) -> None:
    images, seeds = _batch()
    augmentation = BatchAugmentation(padding=padding, hflip=0.5)
    out = augmentation(images, seeds, MEAN, STD)
    uniforms = sample_uniforms(seeds).numpy()
    flips = 0
    for i, image in enumerate(images.numpy()):
        top, left = int(uniforms[i, 0] * (2 * padding + 1)), int(uniforms[i, 1] * (2 * padding + 1))
        canvas = np.stack([np.pad(channel, padding, constant_values=FILL[c]) for c, channel in enumerate(image)])
        expected = canvas[:, top : top + 12, left : left + 12]
        if uniforms[i, 2] < 0.5:
            expected, flips = expected[:, :, ::-1], flips + 1
        expected = (expected.astype(np.float32) / 255 - np.float32(MEAN)[:, None, None]) / np.float32(STD)[
            :, None, None
        ]
        np.testing.assert_allclose(out[i].numpy(), expected, atol=1e-6)
    assert 0 < flips < len(images)  # both branches were exercised


@pytest.mark.parametrize(("channels", "size"), [(3, 12), (3, 13), (1, 12)], ids=["rgb", "rgb-odd-side", "grey"])
def test_the_policy_equals_torchvision_s_trivial_augment_operation_on_each_image_alone(
    channels: int, size: int
) -> None:
    """Bit for bit, with the images of one operation (the colour ones: each with its own factor) in one call."""
    images, _ = _batch(n=200, size=size, channels=channels)
    seeds = list(range(200))
    fill = FILL[:channels]
    augmentation = BatchAugmentation(padding=0, hflip=0.0, policy="trivial")
    out = augmentation.apply_policy(images, sample_uniforms(seeds), torch.tensor(fill, dtype=torch.uint8))
    reference = v2.TrivialAugmentWide(num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=fill)
    names = dict(zip(POLICY_OPS, reference._AUGMENTATION_SPACE, strict=True))
    choices = augmentation.policy_choices(sample_uniforms(seeds))
    assert {op for op, _ in choices} == set(POLICY_OPS)  # every operation drawn at least once
    for i, (op, magnitude) in enumerate(choices):
        name = names[op]
        magnitudes_fn, signed = reference._AUGMENTATION_SPACE[name]
        if op == "solarize":  # torchvision's solarize magnitude is a fraction of the full scale
            magnitude = magnitude / 255.0
        bins = magnitudes_fn(31, size, size)
        if bins is not None:  # the magnitude is one of torchvision's bins, signed where it is
            bins = bins.double()
            assert torch.isclose(bins, torch.tensor(abs(magnitude), dtype=torch.float64), atol=1e-6).any(), op
            assert signed or magnitude >= 0
        expected = reference._apply_image_or_video_transform(
            tv_tensors.Image(images[i]), name, magnitude, InterpolationMode.NEAREST, {tv_tensors.Image: fill}
        )
        assert torch.equal(out[i], expected.as_subclass(torch.Tensor)), (op, magnitude)


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
    """``policy_prob`` p: an image whose operation uniform u is >= p gets no operation, the others get
    operation floor(u / p * 14) with the full policy's magnitude; the batch matches that image by image."""
    images, seeds = _batch(n=64)
    uniforms = sample_uniforms(seeds)
    names = list(POLICY_OPS)
    full = BatchAugmentation(policy="trivial", padding=0, hflip=0.0)
    assert BatchAugmentation(policy="trivial", policy_prob=1.0).policy_choices(uniforms) == full.policy_choices(
        uniforms
    )
    mild = BatchAugmentation(policy="trivial", padding=0, hflip=0.0, policy_prob=0.4)
    choices = mild.policy_choices(uniforms)
    left_alone = 0
    for i, choice in enumerate(choices):
        u = float(uniforms[i, 3])  # the operation's column
        if u >= 0.4:
            assert choice == ("identity", 0.0)
            left_alone += 1
        else:
            expected = names[int(u / 0.4 * len(names))]
            assert choice[0] == expected
            # the full policy's magnitude for that operation, from the image's own magnitude and sign draws
            moved = uniforms[i : i + 1].clone()
            moved[0, 3] = (names.index(expected) + 0.5) / len(names)
            assert choice == full.policy_choices(moved)[0]
    assert 0 < left_alone < len(seeds)  # both branches were exercised
    out = mild(images, seeds, MEAN, STD)
    plain = BatchAugmentation(padding=0, hflip=0.0)(images, seeds, MEAN, STD)
    for i, choice in enumerate(choices):
        if choice[0] == "identity":
            assert torch.equal(out[i], plain[i])
    assert not torch.equal(out, plain)


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
