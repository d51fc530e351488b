"""The device input path for JPEG folders (decode "device"), run on the CPU: which files go to the decoder,
decoding against PIL, crop boxes and pixels against timm, per-seed augmentation, fallbacks and corrupt files."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image
from timm.data import create_transform
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision.transforms import InterpolationMode

from crate.data import DeviceImageTransform, crop_box, decode_batch
from crate.data.device_decode import collate_encoded, device_decodable, jpeg_frame
from crate.lit.data import Augmentation, ImageFolderDataModule
from crate.lit.data.base import DataError


def _photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth colour shapes with a little grain: something like a photo, not noise (which JPEG mangles)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    phase = rng.uniform(0, 6, 3)
    channels = [128 + 100 * np.sin(x / (17 + 5 * c) + phase[c]) * np.cos(y / (23 + 3 * c)) for c in range(3)]
    pixels = np.stack(channels, -1) + rng.normal(0, 6, (height, width, 3))
    return pixels.clip(0, 255).astype(np.uint8)


def _encoded(image: Image.Image, **settings) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=settings.pop("format", "JPEG"), **settings)
    return buffer.getvalue()


def test_the_header_sends_sequential_colour_jpegs_to_the_device_and_the_rest_to_the_worker() -> None:
    image = Image.fromarray(_photo(40, 56))
    assert jpeg_frame(_encoded(image, quality=90)) == (0xC0, 3) and device_decodable(_encoded(image, quality=90))
    assert jpeg_frame(_encoded(image, quality=90, progressive=True)) == (0xC2, 3)
    assert not device_decodable(_encoded(image, quality=90, progressive=True))
    assert not device_decodable(_encoded(image.convert("L"), quality=90))  # one component
    assert not device_decodable(_encoded(image.convert("CMYK"), quality=90))  # four components
    assert jpeg_frame(_encoded(image, format="PNG")) is None and jpeg_frame(b"\xff\xd8") is None


def test_the_device_decoder_equals_pil_within_jpeg_tolerance() -> None:
    data = _encoded(Image.fromarray(_photo(375, 500)), quality=90)
    decoded = decode_batch([torch.frombuffer(bytearray(data), dtype=torch.uint8)], ["a.jpg"], "cpu")[0]
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.float64)
    assert decoded.shape == (3, 375, 500) and decoded.dtype == torch.uint8
    assert np.abs(decoded.permute(1, 2, 0).numpy() - reference).mean() <= 2.0


@pytest.mark.parametrize(
    ("height", "width", "scale"), [(240, 320, (0.08, 1.0)), (30, 400, (0.9, 1.0)), (64, 64, (1, 1))]
)
def test_crop_boxes_equal_timm_s_for_the_same_draws(height: int, width: int, scale: tuple[float, float]) -> None:
    picture = Image.new("RGB", (width, height))
    ratio = (3 / 4, 4 / 3)
    for seed in range(200):  # (30, 400) at scale 0.9-1 fits no try: timm's central fallback
        random.seed(seed)
        expected = RandomResizedCropAndInterpolation.get_params(picture, scale, ratio)
        assert crop_box(height, width, scale, ratio, random.Random(seed)) == expected


def test_crops_and_evaluation_pixels_equal_timm_s_within_interpolation_tolerance() -> None:
    pixels = _photo(240, 320, seed=1)
    picture, image = Image.fromarray(pixels), torch.from_numpy(pixels).permute(2, 0, 1).contiguous()
    plain = dict(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), interpolation="bicubic")
    crops = DeviceImageTransform(size=32, hflip=0.0, **plain)
    for seed in range(10):
        random.seed(seed)
        expected = np.asarray(RandomResizedCropAndInterpolation(32, interpolation="bicubic")(picture), np.float64)
        ours = crops.train([image], [seed])[0].permute(1, 2, 0).numpy() * 255  # the same box: the same draws
        assert np.abs(ours - expected).mean() <= 1.0
    evaluation = DeviceImageTransform(size=224, crop_pct=0.9, **plain)
    expected = create_transform(input_size=(3, 224, 224), crop_pct=0.9, **plain)(picture)
    assert (evaluation.evaluate([image])[0] - expected).abs().mean() * 255 <= 1.0


def test_an_image_s_augmentation_depends_on_its_own_seed_alone() -> None:
    images = [
        torch.from_numpy(_photo(h, w, seed=h)).permute(2, 0, 1).contiguous() for h, w in ((50, 70), (64, 48), (90, 90))
    ]
    augment = DeviceImageTransform(size=24, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), re_prob=0.5)
    seeds = [11, 7_000_000_001, 42]
    together = augment.train(images, seeds)
    for i in range(3):  # alone, or in another batch in another order: the same image
        assert torch.equal(together[i], augment.train([images[i]], [seeds[i]])[0])
    assert torch.equal(together[0], augment.train(images[::-1], seeds[::-1])[2])
    assert not torch.equal(together[0], augment.train([images[0]], [12])[0])  # another seed, another crop


def test_the_device_policy_is_torchvision_s_trivial_augment_on_each_crop_by_the_documented_draws() -> None:
    """decode "device" with policy "trivial": each image is its own crop and flip (random.Random(seed)), then the
    TrivialAugmentWide operation and magnitude that the seed's documented draws pick, as torchvision applies it
    to that crop alone, normalised."""
    from test_batch_augmentation import _choice, _hash
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from crate.data.batch_augmentation import POLICY_OPS, normalize

    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    fill = [round(255 * m) for m in mean]
    shapes = [(40 + 7 * (i % 5), 36 + 11 * (i % 3)) for i in range(40)]
    images = [torch.from_numpy(_photo(h, w, seed=i)).permute(2, 0, 1).contiguous() for i, (h, w) in enumerate(shapes)]
    seeds = [5_000 + 13 * i for i in range(len(images))]
    augment = DeviceImageTransform(size=24, mean=mean, std=std, scale=(0.3, 1.0), policy="trivial")
    out = augment.train(images, seeds)
    reference = v2.TrivialAugmentWide(num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=fill)
    names = dict(zip(POLICY_OPS, reference._AUGMENTATION_SPACE, strict=True))
    changed = 0
    for image, seed, augmented in zip(images, seeds, out, strict=True):
        rng = random.Random(seed)
        top, left, height, width = crop_box(image.shape[-2], image.shape[-1], (0.3, 1.0), (3 / 4, 4 / 3), rng)
        crop = TF.resized_crop(image, top, left, height, width, [24, 24], InterpolationMode.BILINEAR, antialias=True)
        crop = crop.flip(-1) if rng.random() < 0.5 else crop
        op, magnitude = _choice([_hash(seed, draw) for draw in range(6)])
        if op == "solarize":  # torchvision's solarize threshold is a fraction of the full scale
            magnitude /= 255.0
        expected = reference._apply_image_or_video_transform(
            tv_tensors.Image(crop), names[op], magnitude, InterpolationMode.NEAREST, {tv_tensors.Image: fill}
        ).as_subclass(torch.Tensor)
        assert torch.equal(augmented, normalize(expected[None], mean, std)[0]), (seed, op, magnitude)
        changed += not torch.equal(expected, crop)
    assert changed >= len(images) // 2  # the policy did something to most crops
    plain = DeviceImageTransform(size=24, mean=mean, std=std, scale=(0.3, 1.0)).train(images, seeds)
    assert not torch.equal(plain, out)


def test_the_policy_setting_is_one_policy_on_either_path() -> None:
    from torchvision.transforms import TrivialAugmentWide

    from crate.lit.data.augmentation import check_device_augmentation, train_transform

    assert Augmentation(policy="none").policy is None
    with pytest.raises(ValueError, match="policy must be 'trivial' or null"):
        Augmentation(policy="randaugment")
    with pytest.raises(ValueError, match="two policies: set one"):
        Augmentation(policy="trivial", auto_augment="rand-m9-mstd0.5")
    check_device_augmentation(Augmentation(policy="trivial"), 224)  # applied on the device: not refused
    with pytest.raises(ValueError, match="for auto_augment: --data.augmentation.policy trivial"):
        check_device_augmentation(Augmentation(auto_augment="rand-m9-mstd0.5"), 224)
    mean = (0.5, 0.4, 0.3)
    steps = train_transform(Augmentation(policy="trivial"), 32, mean, (0.2, 0.2, 0.2)).transforms
    policies = [step for step in steps if isinstance(step, TrivialAugmentWide)]
    assert len(policies) == 1 and policies[0].fill == [128, 102, 76]  # the mean colour, as on the device
    names = [type(step).__name__ for step in steps]
    assert names.index("TrivialAugmentWide") > names.index("RandomHorizontalFlip")  # after the crop and flip
    tensor = train_transform(Augmentation(policy="trivial"), 32, mean, (0.2, 0.2, 0.2))(Image.fromarray(_photo(40, 50)))
    assert tensor.shape == (3, 32, 32)


def _folder(root: Path) -> Path:
    """A folder with every kind of file the path meets: sequential, progressive, gray and CMYK JPEGs, a PNG."""
    kinds = {
        "seq.jpg": lambda im: _encoded(im, quality=90),
        "prog.jpg": lambda im: _encoded(im, quality=90, progressive=True),
        "gray.jpg": lambda im: _encoded(im.convert("L"), quality=90),
        "cmyk.jpg": lambda im: _encoded(im.convert("CMYK"), quality=90),
        "pic.png": lambda im: _encoded(im, format="PNG"),
    }
    for split in ("train", "val"):
        for label, name in enumerate(("a", "b")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i, (file, encode) in enumerate(kinds.items()):
                (folder / file).write_bytes(encode(Image.fromarray(_photo(40 + 4 * i, 52, seed=label * 10 + i))))
    return root


def _device_batches(data: ImageFolderDataModule, loader) -> list[list[torch.Tensor]]:
    return [data.on_before_batch_transfer(batch, 0) for batch in loader]


def test_a_folder_of_mixed_files_trains_and_validates_on_the_device_path(tmp_path: Path) -> None:
    root = _folder(tmp_path / "images")
    settings = dict(img_size=32, in_chans=3, num_workers=0, class_weights=None)
    data = ImageFolderDataModule(str(root), batch_size=4, decode="device", **settings)
    data.setup("fit")
    encoded = data._encoded[id(data.val_set)]
    kinds = {Path(path).name: encoded[i][0].dim() for i, (path, _) in enumerate(encoded.samples)}
    assert kinds["seq.jpg"] == 1 and {kinds[k] for k in ("prog.jpg", "gray.jpg", "cmyk.jpg", "pic.png")} == {3}
    val = _device_batches(data, data.val_dataloader())
    images = torch.cat([batch[0] for batch in val])
    assert images.shape == (10, 3, 32, 32)
    plain = ImageFolderDataModule(str(root), batch_size=4, **settings)  # PIL in the loader, timm's transforms
    plain.setup("fit")
    reference = torch.stack([plain.val_set[i][0] for i in range(10)])
    std = torch.tensor(data.device_transform.std).view(1, 3, 1, 1)
    assert ((images - reference) * std).abs().mean() * 255 <= 2.0  # grey levels: decoders and resampling
    assert torch.equal(torch.cat([batch[1] for batch in val]), torch.tensor([0] * 5 + [1] * 5))
    epochs = []
    policy = Augmentation(policy="trivial", re_prob=0.25)
    for batch_size in (3, 4):  # the same images, in the same order, whatever the batch size (policy included)
        data = ImageFolderDataModule(
            str(root), batch_size=batch_size, decode="device", seed=5, augmentation=policy, **settings
        )
        data.setup("fit")
        epochs.append(torch.cat([batch[0] for batch in _device_batches(data, data.train_dataloader())]))
    assert epochs[0].shape == (10, 3, 32, 32) and torch.equal(epochs[0], epochs[1])


def test_a_corrupt_file_on_the_device_path_is_one_line_naming_it(tmp_path: Path) -> None:
    root = _folder(tmp_path / "images")
    broken = root / "val" / "b" / "seq.jpg"
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) // 2])  # a good header, half a scan: as a copy cut short leaves it
    (root / "train" / "a" / "noise.jpg").write_bytes(b"\xff\xd8 not a jpeg at all")
    settings = dict(img_size=32, in_chans=3, num_workers=0, class_weights=None, batch_size=16, decode="device")
    module = ImageFolderDataModule(str(root), augmentation=Augmentation(), **settings)  # no survey of the folder
    module.setup("fit")
    with pytest.raises(DataError, match=r"cannot decode image .*val/b/seq\.jpg .*replace or remove the file"):
        _device_batches(module, module.val_dataloader())
    with pytest.raises(DataError, match=r"cannot read image .*train/a/noise\.jpg"):
        _device_batches(module, module.train_dataloader())


def test_settings_the_device_path_does_not_apply_are_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path / "images")
    with pytest.raises(ValueError, match="does not apply rotate, auto_augment.*--data.decode cpu"):
        ImageFolderDataModule(
            str(root), decode="device", augmentation=Augmentation(rotate=10, auto_augment="rand-m9-mstd0.5")
        )
    with pytest.raises(ValueError, match="decode must be 'cpu'"):
        ImageFolderDataModule(str(root), decode="gpu")


def test_collated_batches_keep_files_seeds_and_labels() -> None:
    items = [
        (torch.zeros(3, dtype=torch.uint8), 1, "x.jpg", 9),
        (torch.zeros(1, 2, 2, dtype=torch.uint8), 0, "y.png", 4),
    ]
    batch = collate_encoded(items)
    assert (
        batch["paths"] == ["x.jpg", "y.png"]
        and batch["labels"].tolist() == [1, 0]
        and batch["seeds"].tolist() == [9, 4]
    )
