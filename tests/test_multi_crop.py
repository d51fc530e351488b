"""Multi-crop views of whole batches (crate.data.MultiCrop): each view a function of its image's seed alone, the
documented draws, the crop geometry against a ramp image, each colour step against its formula, and a fixed
number of operations per batch with nothing read back."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import OpCounter

from crate.data import MultiCrop
from crate.data.multi_crop import VIEW_DRAWS, view_uniforms

MEAN, STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # views come back in [0, 1]
PLAIN = dict(jitter_prob=0.0, grayscale_prob=0.0, blur_prob=(0.0, 0.0, 0.0), solarize_prob=(0.0, 0.0, 0.0))


def _mix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


def test_view_draws_are_the_documented_hash_in_python_integers() -> None:
    seeds = [0, 7, 2**40 + 3, 123456789]
    got = view_uniforms(seeds, [0, 3])
    for row, (view, seed) in enumerate((v, s) for v in (0, 3) for s in seeds):
        key = (seed ^ (seed >> 32)) & 0xFFFFFFFF
        per_view = _mix32(key ^ ((0x85EBCA6B * (view + 1)) & 0xFFFFFFFF))
        for draw in range(VIEW_DRAWS):
            expected = _mix32(per_view ^ ((0x9E3779B9 * (draw + 1)) & 0xFFFFFFFF)) / 2**32
            assert got[row, draw].item() == expected


def test_view_draws_are_uniform_and_views_differ() -> None:
    u = view_uniforms(torch.arange(4000), [0, 1]).numpy()
    counts = np.histogram(u[:4000, 0], bins=10, range=(0, 1))[0]
    assert ((counts - 400) ** 2 / 400).sum() < 30  # chi-square, 9 dof: p ~ 5e-4
    assert abs(np.corrcoef(u[:4000, 0], u[4000:, 0])[0, 1]) < 0.06  # view 0 and view 1 of an image: unrelated


def test_each_image_s_views_depend_on_its_seed_alone() -> None:
    torch.manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    seeds = torch.tensor([11, 22, 33, 44, 55, 66])
    crop = MultiCrop(global_crops=2, local_crops=3)
    globals_, locals_ = crop(images, seeds, MEAN, STD)
    sub_globals, sub_locals = crop(images[[4, 1]], seeds[[4, 1]], MEAN, STD)
    torch.testing.assert_close(sub_globals.view(2, 2, 3, 32, 32), globals_.view(2, 6, 3, 32, 32)[:, [4, 1]])
    torch.testing.assert_close(sub_locals.view(3, 2, 3, 16, 16), locals_.view(3, 6, 3, 16, 16)[:, [4, 1]])
    assert globals_.shape == (12, 3, 32, 32) and locals_.shape == (18, 3, 16, 16)
    assert not torch.equal(globals_[:6], globals_[6:])  # two global views of one image differ


def test_crops_cover_the_drawn_box_of_a_ramp_image() -> None:
    """On an image whose red channel is its column's index (a ramp bilinear sampling reproduces), the view's
    columns sample the box the draws give: x = (left + (j + 1/2) w / size) W - 1/2."""
    side, size = 64, 16
    columns = torch.arange(side, dtype=torch.float32).expand(side, side)
    image = torch.stack([columns, columns.T, torch.zeros(side, side)])[None].round().to(torch.uint8)
    seeds = torch.arange(40)
    crop = MultiCrop(global_crops=1, local_crops=0, global_size=size, hflip=0.0, **PLAIN)
    views, _ = crop(image.expand(40, -1, -1, -1).contiguous(), seeds, MEAN, STD)
    u = view_uniforms(seeds, [0]).numpy()
    area = 0.4 + 0.6 * u[:, 0]
    ratio = np.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u[:, 1])
    width, height = np.minimum(np.sqrt(area * ratio), 1), np.minimum(np.sqrt(area / ratio), 1)
    left, top = u[:, 2] * (1 - width), u[:, 3] * (1 - height)
    j = np.arange(size) + 0.5
    for n in range(40):
        x = (left[n] + j * width[n] / size) * side - 0.5
        y = (top[n] + j * height[n] / size) * side - 0.5
        inside_x, inside_y = (x >= 0) & (x <= side - 1), (y >= 0) & (y <= side - 1)
        got_x = views[n, 0].numpy() * 255
        got_y = views[n, 1].numpy() * 255
        assert np.allclose(got_x[0, inside_x], x[inside_x], atol=1e-2)
        assert np.allclose(got_y[inside_y, 0], y[inside_y], atol=1e-2)


def test_flip_mirrors_and_grey_solarise_and_blur_follow_their_formulas() -> None:
    torch.manual_seed(1)
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    seeds = torch.arange(8)
    full = dict(global_crops=1, local_crops=0, global_scale=(1.0, 1.0), **PLAIN)
    plain, _ = MultiCrop(hflip=0.0, **full)(images, seeds, MEAN, STD)
    flipped, _ = MultiCrop(hflip=1.0, **full)(images, seeds, MEAN, STD)
    torch.testing.assert_close(flipped, plain.flip(-1), atol=1e-6, rtol=0)
    grey, _ = MultiCrop(hflip=0.0, **dict(full, grayscale_prob=1.0))(images, seeds, MEAN, STD)
    luma = (plain * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
    torch.testing.assert_close(grey, luma.expand_as(grey), atol=1e-6, rtol=0)
    solar, _ = MultiCrop(hflip=0.0, **dict(full, solarize_prob=(1.0, 1.0, 1.0)))(images, seeds, MEAN, STD)
    torch.testing.assert_close(solar, torch.where(plain >= 0.5, 1 - plain, plain))
    blurred, _ = MultiCrop(hflip=0.0, **dict(full, blur_prob=(1.0, 1.0, 1.0)))(images, seeds, MEAN, STD)
    sigma = (0.1 + 1.9 * view_uniforms(seeds, [0])[:, 12]).numpy()
    taps = np.exp(-0.5 * (np.arange(7)[None, :] - 3) ** 2 / sigma[:, None] ** 2)
    taps /= taps.sum(1, keepdims=True)
    x = plain.double().numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)), mode="edge")
    expected = np.zeros_like(x)
    for n in range(8):
        rows = sum(taps[n, k] * padded[n, :, :, k : k + 32] for k in range(7))
        expected[n] = sum(taps[n, k] * rows[:, k : k + 32, :] for k in range(7))
    assert np.abs(blurred.double().numpy() - expected).max() < 1e-5


def test_jitter_at_zero_strength_changes_nothing_and_hue_keeps_grey() -> None:
    torch.manual_seed(2)
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    seeds = torch.arange(6)
    base = dict(global_crops=1, local_crops=0, **PLAIN)
    plain, _ = MultiCrop(**base)(images, seeds, MEAN, STD)
    zero = dict(base, jitter_prob=1.0, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0)
    same, _ = MultiCrop(**zero)(images, seeds, MEAN, STD)
    torch.testing.assert_close(same, plain, atol=1e-5, rtol=0)
    grey_images = images[:, :1].expand(-1, 3, -1, -1).contiguous()
    hue_only = dict(zero, hue=0.5)
    grey, _ = MultiCrop(**hue_only)(grey_images, seeds, MEAN, STD)
    grey_plain, _ = MultiCrop(**base)(grey_images, seeds, MEAN, STD)
    torch.testing.assert_close(grey, grey_plain, atol=1e-5, rtol=0)  # a hue rotation leaves grey as it is


def test_a_batch_costs_the_same_operations_at_any_size_with_nothing_read_back() -> None:
    crop = MultiCrop()
    crop(torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.arange(2), (0.5,) * 3, (0.25,) * 3)  # constants made
    counts = []
    for batch in (4, 32):
        images = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8)
        with OpCounter() as counter:
            crop(images, torch.arange(batch), (0.5,) * 3, (0.25,) * 3)
        counts.append(sum(counter.ops.values()))
        assert counter.ops["aten._local_scalar_dense"] == 0 and counter.ops["aten.nonzero"] == 0
    assert counts[0] == counts[1] <= 400  # both passes (global and local views), views included


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="global_crops"):
        MultiCrop(global_crops=0)
    with pytest.raises(ValueError, match="local_scale"):
        MultiCrop(local_scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="blur_kernel"):
        MultiCrop(blur_kernel=4)
