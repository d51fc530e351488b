"""DataModules: the embedded digits split, ImageFolder with mixed image modes, and clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from crate.lit.data import CIFARDataModule, DigitsDataModule, ImageFolderDataModule


def test_digits_split_is_deterministic_stratified_and_resized() -> None:
    first, second = DigitsDataModule(img_size=24), DigitsDataModule(img_size=24)
    first.setup("fit")
    second.setup("fit")
    assert torch.equal(first.val_set.labels, second.val_set.labels)
    assert torch.equal(first.val_set.images, second.val_set.images)
    n_train, n_val = len(first.train_set), len(first.val_set)
    assert n_train + n_val == 1797 and abs(n_val - 0.2 * 1797) < 1
    train_share = np.bincount(first.train_set.labels.numpy()) / n_train
    val_share = np.bincount(first.val_set.labels.numpy()) / n_val
    assert np.abs(train_share - val_share).max() < 0.01  # stratified: the same class shares
    image, label = first.train_set[0]
    assert image.shape == (1, 24, 24) and 0 <= int(label) < 10
    images, labels = next(iter(first.val_dataloader()))
    assert images.shape == (64, 1, 24, 24) and images.dtype == torch.float32
    assert images.min() >= -1.01 and images.max() <= 1.01


def test_digits_three_channels_repeat_the_gray_image() -> None:
    data = DigitsDataModule(in_chans=3, augment=False)
    data.setup("fit")
    image, _ = data.val_set[3]
    assert data.in_chans == 3 and image.shape == (3, 32, 32)
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])


def _write_image_folder(root: Path, classes: int = 2, per_class: int = 6) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, size=(20, 24), dtype=np.uint8)
                mode_image = Image.fromarray(pixels, mode="L")  # grayscale
                if i % 2:
                    mode_image = mode_image.convert("RGB")
                mode_image.save(folder / f"{i}.png")


def test_image_folder_accepts_grayscale_and_rgb(tmp_path: Path) -> None:
    _write_image_folder(tmp_path)
    data = ImageFolderDataModule(str(tmp_path), img_size=32, batch_size=4, num_workers=0)
    assert data.num_classes == 2 and data.in_chans == 3
    data.setup("fit")
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (4, 3, 32, 32)
    assert set(labels.tolist()) <= {0, 1}


def test_missing_image_folder_root_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"lacks .*train.*val.*--data.root"):
        ImageFolderDataModule(str(tmp_path / "nowhere"))


def test_missing_cifar_offline_names_the_expected_folder(tmp_path: Path) -> None:
    data = CIFARDataModule(root=str(tmp_path), dataset="cifar10", download=False)
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-py"):
        data.prepare_data()


def test_training_loader_resumes_mid_epoch_and_not_past_a_finished_epoch() -> None:
    data = DigitsDataModule(batch_size=64)
    data.setup("fit")
    loader = data.train_dataloader()
    loader.resumable_sampler.set_epoch(1)
    epoch_one = list(loader)
    assert len(epoch_one) == 23

    mid = data.train_dataloader()
    mid.load_state_dict({"epoch": 1, "batches": 9})  # stopped after 9 batches of epoch 1
    rest = list(mid)
    assert len(rest) == 14
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(epoch_one[9:], rest, strict=True))

    done = data.train_dataloader()
    done.load_state_dict({"epoch": 0, "batches": 23})  # stopped at the end of epoch 0
    done.resumable_sampler.set_epoch(1)  # what Lightning does when epoch 1 starts
    assert all(torch.equal(a[0], b[0]) for a, b in zip(epoch_one, list(done), strict=True))

    other = data.train_dataloader()
    other.resumable_sampler.set_epoch(2)
    assert not torch.equal(next(iter(other))[0], epoch_one[0][0])  # a new order every epoch


def test_image_folder_augmentation_settings_reach_timm_s_transform(tmp_path: Path) -> None:
    from timm.data.random_erasing import RandomErasing
    from timm.data.transforms import RandomResizedCropAndInterpolation
    from torchvision import transforms

    _write_image_folder(tmp_path)

    def steps(**kwargs) -> list:
        data = ImageFolderDataModule(str(tmp_path), num_workers=0, **kwargs)
        data.setup("fit")
        return list(data.train_set.transform.transforms)

    def crop(found: list) -> RandomResizedCropAndInterpolation:
        return next(step for step in found if isinstance(step, RandomResizedCropAndInterpolation))

    assert crop(steps(img_size=32)).scale == (0.6, 1.0)  # small images keep most of themselves
    assert crop(steps(img_size=224)).scale == (0.08, 1.0)  # timm's ImageNet range
    custom = steps(img_size=32, scale=(0.9, 1.0), hflip=0.0, re_prob=0.25, auto_augment="rand-m9-mstd0.5")
    assert crop(custom).scale == (0.9, 1.0)
    assert not any(isinstance(step, transforms.RandomHorizontalFlip) for step in custom)
    assert any(isinstance(step, RandomErasing) and step.probability == 0.25 for step in custom)
    assert any("RandAugment" in type(step).__name__ for step in custom)
    with pytest.raises(ValueError, match="scale"):
        ImageFolderDataModule(str(tmp_path), scale=(0.5, 0.2))
