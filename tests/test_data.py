"""DataModules: the embedded digits split, ImageFolder with mixed image modes, and clear errors."""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import write_image_folder
from helpers import cifar_arrays
from PIL import Image

from crate.data import ResumableDataLoader, SeededBatch
from crate.lit.data import Augmentation, CIFARDataModule, DigitsDataModule, ImageFolderDataModule
from crate.lit.data.augmentation import train_transform
from crate.lit.data.folder import DataError, ImageLoader


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
    data = DigitsDataModule(in_chans=3, augmentation=None)
    data.setup("fit")
    image, _ = data.val_set[3]
    assert data.in_chans == 3 and image.shape == (3, 32, 32)
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])


def test_image_folder_accepts_grayscale_and_rgb(tmp_path: Path) -> None:
    write_image_folder(tmp_path)
    data = ImageFolderDataModule(str(tmp_path), img_size=32, batch_size=4, num_workers=0)
    assert data.num_classes == 2 and data.in_chans == 3
    data.setup("fit")
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (4, 3, 32, 32)
    assert set(labels.tolist()) <= {0, 1}


def test_an_image_folder_s_train_set_is_its_evaluation_form_and_only_the_training_loader_augments(
    tmp_path: Path,
) -> None:
    """Probes, lenses and ``predict --data.predict_split train`` read ``train_set``: the same tensor at every read,
    the one the validation transform makes of the file. The training loader still crops and flips."""
    write_image_folder(tmp_path)
    data = ImageFolderDataModule(str(tmp_path), img_size=32, batch_size=4, num_workers=0)
    data.setup("fit")
    forms = [data.val_set.transform(data.loader(path)) for path, _ in data.train_set.samples]
    assert all(torch.equal(data.train_set[i][0], forms[i]) for i in range(len(forms)))
    assert torch.equal(data.train_set[0][0], data.train_set[0][0])
    images, _ = next(iter(data.train_dataloader()))
    assert not any(torch.equal(image, form) for image in images for form in forms)


@pytest.mark.parametrize(
    ("layout", "given", "said"),
    [
        ({"train": "train", "val": "valid"}, ".", "; rename (or link) valid/ to val/"),
        (
            {"train": "training", "val": "validation"},
            ".",
            "; rename (or link) training/ to train/ and validation/ to val/",
        ),
        ({"train": "train", "val": "val"}, "train", "is a split of the data root: give its parent, "),
        ({"train": "."}, ".", "; it holds class folders (a, b) itself: move them into train/, and a share of each"),
        ({"train": "train"}, ".", "; move a share of each class's images from train/<class>/ into val/<class>/"),
    ],
    ids=["valid", "training-validation", "a-split", "class-folders", "no-val"],
)
def test_a_root_without_its_splits_says_what_it_holds_instead(
    tmp_path: Path, layout: dict[str, str], given: str, said: str
) -> None:
    """Common layouts that are not train/ and val/: the refusal says what to rename or move (it said only what the
    root lacks)."""
    made, root = write_image_folder(tmp_path / "made", ("a", "b"), per_class=2, size=8), tmp_path / "data"
    for split, folder in layout.items():
        shutil.copytree(made / split, root / folder, dirs_exist_ok=True)
    with pytest.raises(FileNotFoundError, match="the data root must be a folder holding") as refused:
        ImageFolderDataModule(str(root / given))
    assert said in str(refused.value), str(refused.value)


def test_missing_image_folder_root_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=r"lacks .*train.*val.*: the data root must be a folder holding train/<class>/<images> and val/",
    ):
        ImageFolderDataModule(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as refused:
        ImageFolderDataModule(str(tmp_path / "nowhere"))
    assert "make cifar10-data" not in str(refused.value)
    with pytest.raises(FileNotFoundError, match=r"val/<class>/<images> \(CIFAR-10's: make cifar10-data writes data/"):
        ImageFolderDataModule(str(tmp_path / "data" / "cifar10"))  # the CIFAR-10 recipes' root, not yet written


def test_a_class_only_a_held_out_split_has_is_named_with_what_to_do(tmp_path: Path) -> None:
    write_image_folder(tmp_path)
    extra = tmp_path / "val" / "zebra"
    extra.mkdir()
    shutil.copy(next((tmp_path / "val").rglob("*.png")), extra / "0.png")
    with pytest.raises(
        DataError, match=r"val has classes that .*train lacks: \['zebra'\]; .* add their images to train/"
    ):
        ImageFolderDataModule(str(tmp_path))


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

    # Stopped at the end of epoch 0. Lightning makes the resumed run's first iterator before it sets the
    # sampler's epoch, and a loader with workers draws indices at once: the state alone must say epoch 1.
    finished = ResumableDataLoader(mid.dataset, batch_size=64, batches_done=lambda: 23)
    assert finished.state_dict() == {"epoch": 1, "batches": 0}
    limited = ResumableDataLoader(mid.dataset, batch_size=64, batches_done=lambda: 5, epoch_batches=lambda: 5)
    assert limited.state_dict() == {"epoch": 1, "batches": 0}  # limit_train_batches=5 ends epochs after 5
    data.num_workers = 1  # a worker process: indices are drawn when the iterator is made
    for state in ({"epoch": 1, "batches": 0}, {"epoch": 0, "batches": 23}):  # the second: older checkpoints
        done = data.train_dataloader()
        done.load_state_dict(state)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(epoch_one, list(done), strict=True))

    other = data.train_dataloader()
    other.resumable_sampler.set_epoch(2)
    assert not torch.equal(next(iter(other))[0], epoch_one[0][0])  # a new order every epoch


def _transform_steps(transform) -> list:
    return [step for part in getattr(transform, "transforms", [transform]) for step in _flat(part)]


def _flat(step) -> list:
    inner = getattr(step, "transforms", None)
    return [s for part in inner for s in _flat(part)] if isinstance(inner, list) else [step]


def test_augmentation_settings_reach_timm_s_transform_in_every_data_module(tmp_path: Path) -> None:
    from timm.data.random_erasing import RandomErasing
    from timm.data.transforms import RandomResizedCropAndInterpolation
    from torchvision import transforms

    write_image_folder(tmp_path)

    def folder_steps(**kwargs) -> list:
        data = ImageFolderDataModule(str(tmp_path), num_workers=0, **kwargs)
        data.setup("fit")
        return _transform_steps(data.train_transform)  # what the training loader applies

    def crop(found: list) -> RandomResizedCropAndInterpolation:
        return next(step for step in found if isinstance(step, RandomResizedCropAndInterpolation))

    assert crop(folder_steps(img_size=32)).scale == (0.6, 1.0)  # small images keep most of themselves
    assert crop(folder_steps(img_size=224)).scale == (0.08, 1.0)  # timm's ImageNet range
    assert any(isinstance(step, transforms.ColorJitter) for step in folder_steps(img_size=224))
    assert not any(isinstance(step, transforms.ColorJitter) for step in folder_steps(img_size=32))
    custom = Augmentation(scale=(0.9, 1.0), hflip=0.0, re_prob=0.25, auto_augment="rand-m9-mstd0.5")
    digits = DigitsDataModule(augmentation=custom)
    digits.setup("fit")
    for found in (folder_steps(img_size=32, augmentation=custom), _transform_steps(digits.train_transform)):
        assert crop(found).scale == (0.9, 1.0)
        assert not any(isinstance(step, transforms.RandomHorizontalFlip) for step in found)
        assert any(isinstance(step, RandomErasing) and step.probability == 0.25 for step in found)
        assert any("RandAugment" in type(step).__name__ for step in found)
    padded = ImageFolderDataModule(str(tmp_path), img_size=32, num_workers=0, augmentation=Augmentation(padding=3))
    padded.setup("fit")
    found = _transform_steps(padded.train_transform)
    assert any(isinstance(step, transforms.RandomCrop) and step.padding == 3 for step in found)
    assert not any(isinstance(step, RandomResizedCropAndInterpolation) for step in found)


def test_cifar_arrays_feed_the_tensor_store_path(monkeypatch) -> None:
    """torchvision's CIFAR arrays (N, H, W, C) become the stores: the official test split validates and
    tests, and training batches leave the loader as uint8 with seeds, augmented on transfer."""

    from crate.data import BatchAugmentation

    arrays = cifar_arrays(seed=0, train_size=20, test_size=8)
    data = CIFARDataModule(download=False, batch_size=4, augmentation=BatchAugmentation(padding=2))
    monkeypatch.setattr(data, "_open", lambda train, download: arrays[train])
    data.setup("fit")
    assert len(data.test_set) == len(data.val_set) == 8 and len(data.train_set) == 20
    assert torch.equal(data.test_set.store.images, data.val_set.store.images)  # CIFAR's test split, both
    image, label = data.val_set[3]
    assert data.mean == (0.485, 0.456, 0.406)  # outside a trainer and without a model: ImageNet's statistics
    mean, std = torch.tensor(data.mean)[:, None, None], torch.tensor(data.std)[:, None, None]
    expected = (torch.from_numpy(arrays[False].data[3]).permute(2, 0, 1).float() / 255 - mean) / std
    torch.testing.assert_close(image, expected)
    assert int(label) == arrays[False].targets[3]
    images, labels, seeds = next(iter(data.train_dataloader()))
    assert images.dtype == torch.uint8 and images.shape == (4, 3, 32, 32) and seeds.shape == (4,)
    augmented, same_labels = data.on_after_batch_transfer(SeededBatch(images, labels, seeds), 0)
    assert augmented.dtype == torch.float32 and torch.equal(same_labels, labels)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(scale=(0.5, 0.2)), "scale"),
        (dict(scale=(0.0, 1.0)), "scale"),
        (dict(ratio=(2.0, 1.0)), "ratio"),
        (dict(padding=4, scale=(0.5, 1.0)), "exclude each other"),
        (dict(hflip=1.5), "hflip"),
        (dict(re_prob=-0.1), "re_prob"),
        (dict(auto_augment="randaugment9"), "auto_augment"),
        (dict(padding=-1), "padding"),
        (dict(rotate=-5), "rotate"),
        (dict(translate=1.5), "translate"),
        (dict(zoom=(1.2, 0.8)), "zoom"),
    ],
)
def test_bad_augmentation_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Augmentation(**settings)


def test_geometric_augmentation_fills_with_the_given_background() -> None:
    """Geometric augmentation brings in the given fill (digits: the black background), timm's default
    being the normalisation mean (gray here)."""
    black = Image.new("L", (32, 32), 0)
    shifted = Augmentation(padding=6, hflip=0.0)
    turned = Augmentation(scale=(1.0, 1.0), hflip=0.0, rotate=40, translate=0.2, zoom=(0.6, 0.8))
    randaugment = Augmentation(hflip=0.0, auto_augment="rand-m9-n2-mstd0.5")
    for fill, expect in (((0.0,), (0,)), (None, (128,))):
        for geometric in (shifted, turned):
            transform = train_transform(geometric, 32, mean=(0.5,), std=(0.5,), fill=fill)
            torch.manual_seed(0)
            outputs = torch.stack([transform(black) for _ in range(20)])
            assert bool((outputs > -0.99).any()) == (expect != (0,))  # gray borders only with the mean as fill
        steps = _transform_steps(train_transform(randaugment, 32, mean=(0.5,), std=(0.5,), fill=fill))
        ops = next(step for step in steps if type(step).__name__ == "RandAugment").ops
        assert {op.kwargs["fillcolor"] for op in ops} == {expect}


def test_digits_augmentation_is_off_with_null_and_seeded_per_sample() -> None:
    plain = DigitsDataModule(augmentation=None)
    plain.setup("fit")
    assert plain.train_transform is None
    data = DigitsDataModule()
    data.setup("fit")
    loader = data.train_dataloader()
    first, second = next(iter(loader))[0], next(iter(data.train_dataloader()))[0]
    assert torch.equal(first, second)  # the same (seed, epoch, position), the same augmentation
    image = data.train_set.images[0]
    assert data.train_transform(image).shape == image.shape


def _write_gray_folder(root: Path, per_class: int, colour_at: int | None = None) -> None:
    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for c in range(2):
            folder = root / split / f"class_{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                image = Image.fromarray(rng.integers(0, 256, size=(12, 12), dtype=np.uint8), mode="L")
                if split == "train" and c == 1 and i == colour_at:
                    image = Image.merge("RGB", (image, image.point(lambda v: 255 - v), image))
                image.save(folder / f"{i:03d}.png")


def test_grayscale_folder_stays_one_channel_with_luma_weighted_statistics(tmp_path: Path) -> None:
    from timm.data import IMAGENET_DEFAULT_MEAN

    _write_gray_folder(tmp_path, per_class=4)
    data = ImageFolderDataModule(str(tmp_path), img_size=16, batch_size=4, num_workers=0)
    assert data.in_chans == 1
    data.setup("fit")
    images, _ = next(iter(data.val_dataloader()))
    assert images.shape == (4, 1, 16, 16)
    mean = data.model_data_config()["mean"]
    assert mean == pytest.approx(  # the luma weights of PIL's RGB -> L conversion
        (0.299 * IMAGENET_DEFAULT_MEAN[0] + 0.587 * IMAGENET_DEFAULT_MEAN[1] + 0.114 * IMAGENET_DEFAULT_MEAN[2],)
    )
    # a flat gray file: every output pixel is its value normalised once with the gray statistics
    Image.new("L", (12, 12), 200).save(data.val_set.samples[0][0])
    std = data.model_data_config()["std"][0]
    expected = (200 / 255 - mean[0]) / std
    assert torch.allclose(data.val_set[0][0], torch.full((1, 16, 16), expected), atol=1e-5)
    rgb = ImageFolderDataModule(str(tmp_path), img_size=16, in_chans=3, num_workers=0)
    assert rgb.in_chans == 3
    from_crate = ImageFolderDataModule(str(tmp_path), img_size=16, num_workers=0)
    from_crate.transforms_from(timm.create_model("crate_nano_patch4_32", img_size=16))  # 0.5 on every channel
    assert from_crate.model_data_config()["mean"] == (0.5,)  # exactly: the card and config.json show it


def test_colour_image_in_a_folder_judged_gray_is_an_error_naming_it(tmp_path: Path) -> None:
    _write_gray_folder(tmp_path, per_class=12, colour_at=10)  # beyond the sampled first 8
    data = ImageFolderDataModule(str(tmp_path), img_size=16, batch_size=24, num_workers=0)
    assert data.in_chans == 1
    data.setup("fit")
    with pytest.raises(DataError, match=r"010\.png is a RGB image.*--data.in_chans 3"):
        list(data.train_dataloader())
    asked = ImageFolderDataModule(str(tmp_path), img_size=16, in_chans=1, batch_size=24, num_workers=0)
    asked.setup("fit")
    assert next(iter(asked.train_dataloader()))[0].shape[1] == 1  # asked for gray: converted, no error


def _pgm16(path: Path, values: np.ndarray, maxval: int) -> None:
    """A binary PGM of more than 8 bits, written by hand: the format stores big-endian 16-bit values."""
    height, width = values.shape
    path.write_bytes(f"P5\n{width} {height}\n{maxval}\n".encode() + values.astype(">u2").tobytes())


def test_images_of_more_than_8_bits_are_read_from_their_file_s_full_scale(tmp_path: Path) -> None:
    """A float TIFF of intensities in 0-1 was read as PIL converts it, clipped to whole numbers: a black image.
    A dark 16-bit PGM (every value below 256) was read as if 8-bit, 257 times brighter than its brighter
    neighbours. Each now reads from its file's full scale; values outside it are refused with the range."""
    load = ImageLoader("L")

    def eight_bit(values: np.ndarray, full_scale: float) -> np.ndarray:
        return np.floor(values.astype(np.float64) / full_scale * 255 + 0.5).astype(np.uint8)

    ramp = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    Image.fromarray(ramp).save(tmp_path / "float.tif")
    np.testing.assert_array_equal(np.asarray(load(str(tmp_path / "float.tif"))), eight_bit(ramp, 1.0))
    dark = np.arange(64, dtype=np.uint16).reshape(8, 8) * 4  # 0-252 of 65535
    _pgm16(tmp_path / "dark.pgm", dark, 65535)
    np.testing.assert_array_equal(np.asarray(load(str(tmp_path / "dark.pgm"))), eight_bit(dark, 65535))
    tenths = np.arange(64, dtype=np.uint16).reshape(8, 8) * 15  # 0-945 of 1000
    _pgm16(tmp_path / "tenths.pgm", tenths, 1000)
    read = np.asarray(load(str(tmp_path / "tenths.pgm")), dtype=int)  # PIL rescales 0-1000 to 0-65535: +-1
    np.testing.assert_allclose(read, eight_bit(tenths, 1000), atol=1)
    wide = np.arange(64, dtype=np.int32).reshape(8, 8) * 2000  # 32-bit integers up to 126,000
    Image.fromarray(wide).save(tmp_path / "wide.tif")
    with pytest.raises(DataError, match=r"wide\.tif is an image of mode I with values from 0 to 126000.*8- or 16-bit"):
        load(str(tmp_path / "wide.tif"))
    Image.fromarray(ramp * 2 - 1).save(tmp_path / "signed.tif")
    with pytest.raises(DataError, match=r"signed\.tif is an image of mode F with values from -1 to 1, .* from 0 to 1"):
        load(str(tmp_path / "signed.tif"))


def test_seeded_samples_reproduce_python_numpy_and_torch_draws_and_leave_global_state_alone() -> None:
    from crate.data.resumable import SeededTransformDataset

    def draws(image: torch.Tensor) -> torch.Tensor:  # one draw from each generator timm's transforms use
        return torch.tensor([random.random(), float(np.random.rand()), float(torch.rand(()))])

    dataset = SeededTransformDataset([(torch.zeros(1), 0)] * 3, draws)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    batch = dataset.__getitems__([(0, 11), (1, 12), (2, 11)])
    assert torch.equal(batch[0][0], batch[2][0]) and not torch.equal(batch[0][0], batch[1][0])
    assert torch.equal(dataset[(1, 12)][0], batch[1][0])  # one sample alone draws what it drew in a batch
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == before  # globals untouched


@pytest.mark.parametrize("in_chans", [1, 3])
def test_digits_images_reach_timm_s_augmentation_as_their_own_8_bit_pixels(in_chans: int) -> None:
    from crate.lit.data.digits import _as_pil

    data = DigitsDataModule(in_chans=in_chans, augmentation=None)
    data.setup("fit")
    image = data.train_set.images[5]
    picture = _as_pil(image)
    assert picture.mode == ("L" if in_chans == 1 else "RGB") and picture.size == (32, 32)
    pixels = np.asarray(picture, dtype=np.float64).reshape(32, 32, in_chans).transpose(2, 0, 1) / 255
    expected = image.double().numpy() * 0.5 + 0.5  # the digits' normalisation undone
    assert np.abs(pixels - expected).max() <= 0.5 / 255 + 1e-9


def test_training_batches_are_augmented_for_the_trainer_s_current_epoch(monkeypatch) -> None:
    """With ``policy_epochs``, the batches of a trainer in an earlier epoch get the policy and those of a later
    epoch do not: the DataModule passes the trainer's epoch on (a resumed trainer restores it)."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    from crate.data import BatchAugmentation

    arrays = cifar_arrays(seed=1, train_size=16, test_size=16)
    limited = BatchAugmentation(padding=2, policy="trivial", policy_epochs=2)
    data = CIFARDataModule(download=False, batch_size=16, augmentation=limited)
    monkeypatch.setattr(data, "_open", lambda train, download: arrays[train])
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    images, _, seeds = batch
    with_policy = BatchAugmentation(padding=2, policy="trivial")(images, seeds, data.mean, data.std)
    without = BatchAugmentation(padding=2)(images, seeds, data.mean, data.std)
    assert not torch.equal(with_policy, without)
    for epoch, expected in ((0, with_policy), (1, with_policy), (2, without), (7, without)):
        data.trainer = SimpleNamespace(current_epoch=epoch, precision_plugin=Precision())  # 32-bit: no cast
        augmented, _ = data.on_after_batch_transfer(batch, 0)
        assert torch.equal(augmented, expected), epoch


def test_class_folders_with_their_images_in_subfolders_are_read_as_torchvision_reads_them(tmp_path: Path) -> None:
    """torchvision's ImageFolder finds a class's images in its subfolders too (``cat/batch1/*.png``): both image
    folder modules hold the same files under the same labels, colour images make a colour folder, and a class
    folder whose subfolders hold no image is still refused as empty (once, it was refused while it had images)."""
    from torchvision.datasets import ImageFolder

    from crate.lit.data import StoredImageFolderDataModule

    rng = np.random.default_rng(0)
    for split, per_class in (("train", 3), ("val", 2)):
        for name in ("cat", "dog"):
            for batch in ("batch1", "batch2"):
                folder = tmp_path / "nested" / split / name / batch
                folder.mkdir(parents=True)
                for i in range(per_class):
                    pixels = rng.integers(0, 256, size=(12, 12, 3), dtype=np.uint8)
                    Image.fromarray(pixels).save(folder / f"{i}.png")
    root = tmp_path / "nested"
    expected = ImageFolder(str(root / "val")).samples
    assert len(expected) == 8
    folder_module = ImageFolderDataModule(str(root), img_size=12, batch_size=4, num_workers=0)
    stored = StoredImageFolderDataModule(str(root), img_size=12, batch_size=4)
    for module in (folder_module, stored):
        module.setup("fit")
        assert module.in_chans == 3 and module.classes == ["cat", "dog"]
    assert [(str(path), label) for path, label in folder_module.val_set.samples] == expected
    assert [(str(path), label) for path, label in stored.files("val")] == expected
    assert [int(label) for _, label in folder_module.val_set] == [label for _, label in expected]
    assert [int(label) for _, label in stored.val_set] == [label for _, label in expected]
    (root / "train" / "bird" / "batch1").mkdir(parents=True)
    with pytest.raises(DataError, match=r"class folders without images: .*bird"):
        ImageFolderDataModule(str(root))


def test_a_split_of_loose_images_without_class_folders_is_refused_with_where_they_go(tmp_path: Path) -> None:
    """A split's class is its folder's name: images lying loose in test/ (or val/, train/) have none. The line says
    where they belong and how images of unknown class are classified; an empty split says what it lacks. Both
    modules that read image folders say the same."""
    from crate.lit.data import StoredImageFolderDataModule

    root = write_image_folder(tmp_path / "folder", 2, per_class=2, size=12, suffix=".png", gray=False, seed=0)
    (root / "test").mkdir()
    for index, image in enumerate(sorted((root / "val").rglob("*.png"))):
        shutil.copy(image, root / "test" / f"new_{index}.png")
    for module in (ImageFolderDataModule, StoredImageFolderDataModule):
        with pytest.raises(
            DataError, match=r"test holds images \(new_0.png, ...\) but no class folders: .*test/<class>/"
        ):
            module(str(root))
    shutil.rmtree(root / "test")
    shutil.rmtree(root / "val")
    (root / "val").mkdir()
    with pytest.raises(DataError, match=r"val holds no class folders: a split holds val/<class>/<images>$"):
        ImageFolderDataModule(str(root))


def test_a_training_split_smaller_than_a_batch_with_drop_last_is_refused(tmp_path: Path) -> None:
    """drop_last leaves out an epoch's smaller last batch: with fewer training images than a batch nothing is left,
    and Lightning would end the fit without a step. The module says so, and what to change; a batch of the
    split's size is one whole batch."""
    from crate.lit.data import StoredImageFolderDataModule

    root = write_image_folder(tmp_path / "folder", 2, per_class=3, size=12, suffix=".png", gray=False, seed=0)
    module = StoredImageFolderDataModule(str(root), img_size=12, batch_size=8, drop_last=True)
    module.setup("fit")
    with pytest.raises(
        DataError, match=r"the 6 training images make no whole batch of 8 .*--data.batch_size 6 or less"
    ):
        module.train_dataloader()
    whole = StoredImageFolderDataModule(str(root), img_size=12, batch_size=6, drop_last=True)
    whole.setup("fit")
    assert len(whole.train_dataloader()) == 1


def test_files_of_a_type_that_is_not_read_are_left_out_with_a_word(tmp_path: Path) -> None:
    """A GIF or a HEIC photo in a class folder is not read (as in torchvision's ImageFolder): the module says how
    many files of which types it left out, once; hidden and system files are not counted."""
    root = write_image_folder(tmp_path / "images", classes=2, per_class=3)
    for name in ("a.gif", "b.gif", "c.heic"):
        (root / "train" / "class_0" / name).write_bytes(b"not read")
    (root / "val" / "class_1" / "d.GIF").write_bytes(b"not read")
    for name in (".DS_Store", "Thumbs.db"):
        (root / "train" / "class_1" / name).write_bytes(b"system")
    with pytest.warns(UserWarning, match=r"left out 4 files of the class folders .*\(\.gif 3, \.heic 1\)") as caught:
        data = ImageFolderDataModule(str(root), img_size=16, batch_size=2, num_workers=0)
        data.setup("fit")
    assert len([w for w in caught if "left out" in str(w.message)]) == 1
    assert len(data.train_set) == 6 and len(data.val_set) == 6
    clean = write_image_folder(tmp_path / "clean", classes=2, per_class=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out: no word
        ImageFolderDataModule(str(clean), img_size=16, batch_size=2, num_workers=0).setup("fit")


def test_overfit_batches_trains_on_the_first_batches_in_order_every_epoch() -> None:
    """Lightning's --trainer.overfit_batches put a plain SequentialSampler under the zoo's loaders, which yields no
    sample seeds: the fit stopped at once on a DataLoader error. It trains on the data's first batches, the same in
    every epoch, and validates on the val split's first batches in order, with no sampler replaced."""
    import lightning as L
    from lightning.pytorch.callbacks import Callback

    from crate.lit import ImageClassifier

    class Labels(Callback):
        def __init__(self) -> None:
            self.train: dict[int, list[int]] = {}
            self.val: dict[int, list[int]] = {}

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            self.train.setdefault(trainer.current_epoch, []).extend(batch[1].tolist())

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0) -> None:
            self.val.setdefault(trainer.current_epoch, []).extend(batch[1].tolist())

    data, labels = DigitsDataModule(batch_size=8, img_size=16), Labels()
    trainer = L.Trainer(
        max_epochs=2, overfit_batches=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[labels],
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16), data)
    assert not [w for w in caught if "turning off" in str(w.message)]  # no loader had its sampler replaced
    first = [int(data.train_set[i][1]) for i in range(16)]
    assert labels.train == {0: first, 1: first}
    assert labels.val == {e: [int(data.val_set[i][1]) for i in range(16)] for e in (0, 1)}
