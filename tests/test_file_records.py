"""A file builds the model it was trained as: its input channels, image size, class names and evaluation transform
travel with it, through a run's .ckpt, an exported safetensors file and a hub folder; other sizes asked for are
adapted with a warning, never silently."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import timm
import torch
from conftest import write_image_folder
from PIL import Image
from safetensors import safe_open
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import crate  # noqa: F401
from crate.data.digits import load_digits_tensors
from crate.export import export_checkpoint
from crate.lit import DigitsDataModule, ImageClassifier, ImageFolderDataModule
from crate.lit.data import StoredImageFolderDataModule
from crate.results import shipped_tags


def _fit_and_save(module: ImageClassifier, data: L.LightningDataModule, path: Path) -> Path:
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, data)
    path.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> tuple[Path, ImageClassifier]:
    """The default job's shape: crate_nano on the digits at 16 pixels, one channel."""
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=16, warmup_epochs=0)
    data = DigitsDataModule(img_size=16, batch_size=64)
    ckpt = _fit_and_save(module, data, tmp_path_factory.mktemp("digits") / "checkpoints" / "last.ckpt")
    return ckpt, module.eval()


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory) -> tuple[Path, tuple[str, ...]]:
    """A three-class colour folder at 24 pixels, classes named as a user would."""
    root = tmp_path_factory.mktemp("photos")
    names = ("heron", "egret", "stork")
    generator = torch.Generator().manual_seed(0)
    for split in ("train", "val"):
        for name in names:
            (root / split / name).mkdir(parents=True)
            for index in range(4):
                pixels = torch.randint(0, 256, (24, 24, 3), generator=generator, dtype=torch.uint8).numpy()
                Image.fromarray(pixels).save(root / split / name / f"{index}.png")
    module = ImageClassifier("crate_nano_patch4_32", num_classes=3, in_chans=3, img_size=24, warmup_epochs=0)
    data = ImageFolderDataModule(str(root), img_size=24, batch_size=4, num_workers=0)
    data.data_config = {
        "class_path": "crate.lit.ImageFolderDataModule",
        "init_args": {"root": str(root), "img_size": 24},
    }
    ckpt = _fit_and_save(module, data, tmp_path_factory.mktemp("folder") / "checkpoints" / "last.ckpt")
    return ckpt, tuple(sorted(names))


def test_a_run_file_loaded_the_readme_way_is_built_as_trained(digits_run) -> None:
    ckpt, module = digits_run
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # built as recorded: nothing adapted, nothing to warn about
        model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=dict(file=str(ckpt)))
    model.eval()
    assert model.patch_embed.img_size == (16, 16) and model.patch_embed.proj.in_features == 16
    assert timm.data.resolve_data_config({}, model=model)["input_size"] == (1, 16, 16)
    val = load_digits_tensors(img_size=16, in_chans=1)[1]
    with torch.no_grad():
        ours, theirs = model(val.images).argmax(-1), module.model(val.images).argmax(-1)
    # the same predictions as the trained module on every validation image: the score validate gives
    assert torch.equal(ours, theirs)
    assert model.pretrained_cfg["label_names"] == tuple(str(digit) for digit in range(10))


def test_another_size_or_channel_count_than_the_file_is_adapted_with_one_warning(digits_run) -> None:
    ckpt, _ = digits_run
    overlay = dict(file=str(ckpt))
    with pytest.warns(UserWarning, match=r"trained with img_size=16; building .* img_size=32") as caught:
        model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=overlay, img_size=32)
    assert len(caught) == 1 and model.pos_embed.shape[1] == 65
    assert timm.data.resolve_data_config({}, model=model)["input_size"] == (1, 32, 32)
    with pytest.warns(UserWarning, match=r"trained with in_chans=1; building .* in_chans=3 .*folded"):
        model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=overlay, in_chans=3)
    assert timm.data.resolve_data_config({}, model=model)["input_size"] == (3, 16, 16)


@pytest.mark.parametrize("way", ["out", "hub"])
def test_class_names_travel_with_an_exported_folder_run(folder_run, tmp_path: Path, way: str) -> None:
    ckpt, names = folder_run
    if way == "out":
        out = tmp_path / "birds.safetensors"
        card = export_checkpoint(ckpt, out, measure=False)
        with safe_open(str(out), framework="pt") as handle:
            assert json.loads(handle.metadata()["label_names"]) == list(names)
        assert json.loads(out.with_suffix(".json").read_text())["label_names"] == list(names)
        rows = [line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith("| ")]
        assert [f"| {index} | {name} |" for index, name in enumerate(names)] == [
            row for row in rows if row.split("|")[1].strip().isdigit()
        ]
        # the folder is gone on another machine: the file alone names the classes, and is built at 24 px
        model = timm.create_model(card["model_name"], pretrained=True, pretrained_cfg_overlay=dict(file=str(out)))
    else:
        hub = tmp_path / "birds"
        export_checkpoint(ckpt, hub_dir=hub, measure=False)
        model = timm.create_model(f"local-dir:{hub}", pretrained=True)
    assert tuple(model.pretrained_cfg["label_names"]) == names  # a hub folder's config.json gives a list
    assert timm.data.resolve_data_config({}, model=model)["input_size"] == (3, 24, 24)


def test_a_run_checkpoint_through_timm_names_its_classes(folder_run) -> None:
    ckpt, names = folder_run
    model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=dict(file=str(ckpt)))
    assert model.pretrained_cfg["label_names"] == names


def test_a_head_reset_drops_the_files_class_names(folder_run) -> None:
    ckpt, _ = folder_run
    model = timm.create_model(
        "crate_nano_patch4_32",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(ckpt), num_classes=3),
        num_classes=5,
    )
    assert model.num_classes == 5 and not model.pretrained_cfg.get("label_names")


def test_a_head_reset_on_a_shipped_tag_drops_the_tags_class_names() -> None:
    """timm's rule for a tag with another ``num_classes`` (the backbone loaded, the head new): the tag's class
    names no longer name the outputs, so they go; with the tag's own count they stay."""
    kept = timm.create_model("crate_nano_patch4_32.digits", pretrained=True, num_classes=10)
    assert kept.pretrained_cfg["label_names"] == tuple(str(digit) for digit in range(10))
    reset = timm.create_model("crate_nano_patch4_32.digits", pretrained=True, num_classes=5)
    assert reset.num_classes == 5 and not reset.pretrained_cfg.get("label_names")
    assert torch.equal(reset.patch_embed.proj.weight, kept.patch_embed.proj.weight)  # the backbone still loaded


@pytest.mark.parametrize(
    "tag", ["crate_nano_patch4_32.digits", "vit_cct4_3x2_32.cifar10", "tost_nano_patch4_32.cifar10"]
)
def test_a_tag_built_without_its_weights_names_only_a_head_of_its_own_class_count(tag: str) -> None:
    """A tag built without pretrained (a fine-tuned run's checkpoint is loaded into such a model) with another
    ``num_classes``: the tag's class names do not name that head's outputs, so they go; with the tag's count, or
    no ``num_classes``, they stay as timm gives them."""
    names = timm.models.get_pretrained_cfg(tag).label_names
    assert len(names) == 10
    assert timm.create_model(tag).pretrained_cfg["label_names"] == names
    assert timm.create_model(tag, num_classes=10).pretrained_cfg["label_names"] == names
    for classes in (3, 0):
        model = timm.create_model(tag, num_classes=classes)
        assert model.num_classes == classes and not model.pretrained_cfg.get("label_names")


@pytest.mark.parametrize("tag", ["crate_nano_patch4_32.digits", "vit_nano_patch4_32.digits"])
def test_reset_classifier_drops_the_class_names_of_the_head_it_replaces(tag: str) -> None:
    """``reset_classifier`` puts a new head in place (of any size): the tag's names no longer name its outputs.
    The tag's cfg itself keeps them for the next model created from it."""
    digits = tuple(str(digit) for digit in range(10))
    for num_classes in (5, 10):
        model = timm.create_model(tag, pretrained=True)
        assert model.pretrained_cfg["label_names"] == digits
        model.reset_classifier(num_classes)
        assert model.num_classes == num_classes and model(torch.zeros(1, 1, 32, 32)).shape == (1, num_classes)
        assert not model.pretrained_cfg.get("label_names") and not model.default_cfg.get("label_names")
    assert timm.create_model(tag, pretrained=True).pretrained_cfg["label_names"] == digits


class _StopAfter(L.Callback):
    """Stops the fit after ``steps`` optimizer steps, as ``--trainer.max_time`` or an interruption would."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        trainer.should_stop = trainer.should_stop or trainer.global_step >= self.steps


def test_a_card_says_when_its_run_stopped_before_its_schedule(digits_run, tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=16, warmup_epochs=0.5)
    data = DigitsDataModule(img_size=16, batch_size=64)
    trainer = L.Trainer(
        max_epochs=2, callbacks=[_StopAfter(3)], logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, data)
    ckpt = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    trainer.save_checkpoint(ckpt)
    planned = 2 * len(data.train_dataloader())  # the two epochs the schedule was laid out for
    export_checkpoint(ckpt, tmp_path / "stopped.safetensors", measure=False)
    card = json.loads((tmp_path / "stopped.json").read_text())
    assert (card["global_step"], card["planned_steps"]) == (3, planned)
    assert (
        f"3 optimizer steps of the {planned} its learning-rate schedule planned"
        in (tmp_path / "stopped.md").read_text()
    )
    whole, _ = digits_run  # a run that did every step it planned says nothing more
    export_checkpoint(whole, tmp_path / "whole.safetensors", measure=False)
    whole_card = json.loads((tmp_path / "whole.json").read_text())
    assert whole_card["global_step"] == whole_card["planned_steps"] == 3
    assert "planned" not in (tmp_path / "whole.md").read_text().split("## Classes")[0]


def test_a_card_of_a_best_checkpoint_says_so_instead_of_saying_its_run_stopped(tmp_path: Path) -> None:
    """The run summary points at the best file, written before the schedule's end: its card says it is the best
    by the monitored metric. The same run's state saved at the stop (not the best file) keeps the stop's words."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=16, warmup_epochs=0.5)
    data = DigitsDataModule(img_size=16, batch_size=64)
    best = ModelCheckpoint(dirpath=tmp_path / "run" / "checkpoints", monitor="val/acc", mode="max")
    trainer = L.Trainer(
        max_epochs=2,
        callbacks=[_StopAfter(3), best],
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        val_check_interval=1,  # a validation, and a best file, after every step
        limit_val_batches=1,
    )
    trainer.fit(module, data)
    trainer.save_checkpoint(tmp_path / "run" / "checkpoints" / "stopped.ckpt")
    cards = {}
    for name, path in (("best", best.best_model_path), ("stopped", tmp_path / "run" / "checkpoints" / "stopped.ckpt")):
        export_checkpoint(path, tmp_path / f"{name}.safetensors", measure=False)
        card = json.loads((tmp_path / f"{name}.json").read_text())
        assert card["global_step"] < card["planned_steps"]
        cards[name] = (tmp_path / f"{name}.md").read_text().split("## Classes")[0]
    assert "the run's best checkpoint by val/acc, written before the schedule's end" in cards["best"]
    assert "stopped early" not in cards["best"]
    assert "best checkpoint" not in cards["stopped"] and "the run stopped early" in cards["stopped"]


def _timm_tensors(model: torch.nn.Module, images: list[Image.Image]) -> torch.Tensor:
    """What a timm user feeds the model: the images through ``create_transform(**resolve_data_config(model))``."""
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    return torch.stack([transform(image) for image in images])


def _validation_digits(split_seed: int = 0, val_fraction: float = 0.2) -> list[Image.Image]:
    """The validation digits as a user holds them: scikit-learn's 8x8 values 0..16 as 8-bit gray images, split
    as the data module says it splits them (stratified, ``random_state=split_seed``)."""
    digits = load_digits()
    _, val = train_test_split(
        np.arange(len(digits.target)), test_size=val_fraction, stratify=digits.target, random_state=split_seed
    )
    return [Image.fromarray(np.round(digits.images[i] * 255 / 16).astype(np.uint8), "L") for i in val]


# 8-bit rounding and PIL's fixed-point resize move a normalised pixel by at most about 0.01; resizing by the
# architectures' default bicubic instead of the bilinear training used moves them by up to 0.38
PIXEL_TOLERANCE = 0.02


@pytest.mark.parametrize("tag", [tag for tag in shipped_tags() if tag.split(".")[1].startswith("digits")])
def test_timm_s_transform_of_a_digit_gives_the_tensor_and_the_accuracy_of_its_card(tag: str) -> None:
    model = timm.create_model(tag, pretrained=True).eval()
    val = load_digits_tensors(img_size=model.pretrained_cfg["input_size"][-1], in_chans=1)[1]
    timm_view = _timm_tensors(model, _validation_digits())
    torch.testing.assert_close(timm_view, val.images, atol=PIXEL_TOLERANCE, rtol=0)
    with torch.no_grad():
        correct = int((model(timm_view).argmax(-1) == val.labels).sum())
    card = json.loads(Path(model.pretrained_cfg["file"]).with_suffix(".json").read_text())
    assert correct / len(val) == pytest.approx(card["val_accuracy"], abs=1e-9)  # what the card says, through timm


@pytest.mark.parametrize("way", ["ckpt", "out", "hub"])
def test_a_digits_run_s_file_carries_the_transform_its_run_validated_with(digits_run, tmp_path: Path, way: str) -> None:
    """The digits are resized bilinearly and normalised with 0.5 whatever the architecture's own cfg says
    (bicubic): the file says so, so timm's transform of a digit gives what the run validated on."""
    ckpt, _ = digits_run
    if way == "ckpt":
        model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=dict(file=str(ckpt)))
    elif way == "out":
        card = export_checkpoint(ckpt, tmp_path / "digits.safetensors", measure=False)
        overlay = dict(file=str(tmp_path / "digits.safetensors"))
        model = timm.create_model(card["model_name"], pretrained=True, pretrained_cfg_overlay=overlay)
    else:
        export_checkpoint(ckpt, hub_dir=tmp_path / "digits", measure=False)
        model = timm.create_model(f"local-dir:{tmp_path / 'digits'}", pretrained=True)
    config = timm.data.resolve_data_config({}, model=model)
    assert (config["interpolation"], config["crop_pct"]) == ("bilinear", 1.0)
    validated = load_digits_tensors(img_size=16, in_chans=1)[1].images
    torch.testing.assert_close(_timm_tensors(model, _validation_digits()), validated, atol=PIXEL_TOLERANCE, rtol=0)


def test_a_stored_run_at_another_size_records_the_resize_its_store_made(tmp_path: Path) -> None:
    """A tensor store of 40x32 images trained at 16 pixels squeezes each whole into 16x16, bilinearly: the run's
    file gives timm that transform, not the architecture's bicubic resize of the short side and centre crop."""
    photos = dict(per_class=2, size=(32, 40), suffix=".png", gray=False, seed=3)
    write_image_folder(tmp_path / "photos", ("a", "b", "c"), **photos)
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=3, in_chans=3, img_size=16, warmup_epochs=0)
    data = StoredImageFolderDataModule(str(tmp_path / "photos"), img_size=16, batch_size=6)
    ckpt = _fit_and_save(module, data, tmp_path / "run" / "last.ckpt")
    model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=dict(file=str(ckpt)))
    files = sorted((tmp_path / "photos" / "val").glob("*/*.png"))
    images, _ = next(iter(data.val_dataloader()))
    timm_view = _timm_tensors(model, [Image.open(file).convert("RGB") for file in files])
    torch.testing.assert_close(timm_view, images, atol=PIXEL_TOLERANCE, rtol=0)
    write_image_folder(tmp_path / "squares", ("a", "b", "c"), **dict(photos, size=16))
    at_its_size = StoredImageFolderDataModule(str(tmp_path / "squares"), img_size=16, batch_size=6)
    at_its_size.transforms_from(timm.create_model("crate_nano_patch4_32", num_classes=3))
    at_its_size.setup("fit")  # nothing resized: the architecture's own interpolation (the shipped tags' bicubic)
    assert at_its_size.eval_transform()["interpolation"] == "bicubic"


@pytest.mark.parametrize("way", ["tag", "file", "features"])
def test_a_loaded_model_holds_its_file_s_weights_once(digits_run, way: str) -> None:
    """timm takes a file's weights from the model's pretrained_cfg; the cfg must not keep them after loading (a
    second copy of every weight for the model's life, and a third in an EMA's deep copy)."""
    ckpt, _ = digits_run
    if way == "tag":
        model = timm.create_model("crate_cct4_3x2_32.cifar10", pretrained=True)
    elif way == "file":
        model = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=dict(file=str(ckpt)))
    else:
        model = timm.create_model("crate_nano_patch4_32.digits", pretrained=True, features_only=True)
    assert "state_dict" not in model.pretrained_cfg and "state_dict" not in model.default_cfg
    assert not any(torch.is_tensor(value) or isinstance(value, dict) for value in model.pretrained_cfg.values())


@pytest.mark.parametrize("tag", shipped_tags() + shipped_tags(classifiers=False))
def test_a_shipped_file_read_by_its_path_is_its_tag(tag: str) -> None:
    """A shipped file copied elsewhere and loaded as ``pretrained_cfg_overlay=dict(file=PATH)`` builds what its tag
    builds: the same weights, class names and evaluation transform (an 8x8 digit resized bicubically instead of
    bilinearly is another tensor than the one its card's accuracy was measured on)."""
    by_tag = timm.create_model(tag, pretrained=True).eval()
    path = by_tag.pretrained_cfg["file"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # built at the file's own size and channels: nothing to adapt, nothing said
        by_path = timm.create_model(tag.split(".")[0], pretrained=True, pretrained_cfg_overlay=dict(file=path)).eval()
    assert by_path.pretrained_cfg.get("label_names") == by_tag.pretrained_cfg.get("label_names")
    assert timm.data.resolve_data_config({}, model=by_path) == timm.data.resolve_data_config({}, model=by_tag)
    tagged, read = by_tag.state_dict(), by_path.state_dict()
    assert tagged.keys() == read.keys() and all(torch.equal(tagged[k], read[k]) for k in tagged)


@pytest.mark.parametrize("tag", shipped_tags(classifiers=False))
def test_an_encoder_s_file_given_num_classes_gets_a_new_head_on_its_own_weights(tag: str) -> None:
    """A file without a classifier has no head to mismatch: ``num_classes`` asks for a new one (it was a
    missing-keys error from the state dict), on the encoder's own weights."""
    encoder = timm.create_model(tag, pretrained=True).state_dict()
    path = timm.models.get_pretrained_cfg(tag).file
    model = timm.create_model(tag.split(".")[0], pretrained=True, pretrained_cfg_overlay=dict(file=path), num_classes=7)
    assert model.num_classes == 7 and model(torch.zeros(1, 3, 32, 32)).shape == (1, 7)
    state = model.state_dict()
    assert set(state) - set(encoder) == {"head.weight", "head.bias"}
    assert all(torch.equal(state[k], encoder[k]) for k in encoder)
