"""Tensor stores: the decoded images equal PIL's decoding, the cache is reused and rebuilt when the folder
changes, the evaluation form equals timm's own transform, and bad stores and folders are one clear error."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import write_image_folder
from PIL import Image
from timm.data import create_transform, resolve_data_config

import crate  # noqa: F401 - registers the zoo
from crate.lit.data import StoredImageFolderDataModule
from crate.lit.data.base import DataError

# the store's folder: colour JPEGs (lossy, so PIL's decoding is what a store must equal), 8 px, 3 classes of 4
STORE_FOLDER = dict(classes=3, per_class=4, size=8, suffix=".jpg", gray=False, seed=1)


def _setup(root: Path, **kwargs) -> StoredImageFolderDataModule:
    data = StoredImageFolderDataModule(str(root), img_size=kwargs.pop("img_size", 8), batch_size=5, **kwargs)
    data.setup("fit")
    return data


def test_store_holds_exactly_pil_s_decoding_of_every_image_with_its_label(tmp_path: Path) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    data = _setup(tmp_path)
    for split, stored in (("train", data.train_set), ("val", data.val_set)):
        files = sorted((tmp_path / split).glob("*/*.jpg"))
        assert len(stored) == len(files) == 12
        for i, file in enumerate(files):
            expected = np.asarray(Image.open(file).convert("RGB")).transpose(2, 0, 1)
            assert np.array_equal(stored.store.images[i].numpy(), expected)
            assert stored.store.labels[i] == int(file.parent.name.split("_")[1])
        assert [(Path(path), label) for path, label in stored.samples] == [
            (file, int(file.parent.name.split("_")[1])) for file in files
        ]  # what names each prediction's file
    assert data.store_path("train").is_file() and data.store_path("val").is_file()


def test_store_is_reused_and_rebuilt_when_the_folder_changes(tmp_path: Path, capsys) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    _setup(tmp_path)
    assert "decoding 12 images" in capsys.readouterr().out
    written = data_mtime = _setup(tmp_path).store_path("train").stat().st_mtime_ns
    assert "decoding" not in capsys.readouterr().out  # read back, not decoded again
    changed = tmp_path / "train" / "class_1" / "2.jpg"
    Image.fromarray(np.full((8, 8, 3), 7, dtype=np.uint8)).save(changed)
    os.utime(changed, ns=(data_mtime + 10**9, data_mtime + 10**9))
    data = _setup(tmp_path)
    assert "changed since" in capsys.readouterr().out
    assert data.store_path("train").stat().st_mtime_ns != written
    index = sorted((tmp_path / "train").glob("*/*.jpg")).index(changed)
    assert np.array_equal(
        data.train_set.store.images[index].numpy(), np.asarray(Image.open(changed)).transpose(2, 0, 1)
    )


def test_a_store_decoded_by_another_reader_revision_is_rebuilt(tmp_path: Path, monkeypatch, capsys) -> None:
    """A store keeps the pixels its reader gave: after the reader changed how files become pixels (16-bit and
    float images read from their full scale), a store decoded before would have kept the old pixels."""
    from crate.lit.data.folder import ImageLoader

    write_image_folder(tmp_path, **STORE_FOLDER)
    _setup(tmp_path)
    _setup(tmp_path)
    assert "decoding 12 images" in capsys.readouterr().out  # once: the second setup read the store back
    monkeypatch.setattr(ImageLoader, "revision", ImageLoader.revision + 1)
    _setup(tmp_path)
    assert "(or how its images are read) changed since its tensor store was built" in capsys.readouterr().out


def test_evaluation_batches_equal_timm_s_transform_from_the_model_s_cfg(tmp_path: Path) -> None:
    """What a shipped cfg must reproduce: timm's eval transform of a 32-pixel PNG (resize and centre crop
    at crop_pct 1.0, ToTensor, the cfg's mean and std) gives the very tensor the store path validated on."""
    write_image_folder(tmp_path, **{**STORE_FOLDER, "size": 32, "suffix": ".png"})
    model = timm.create_model("crate_nano_patch4_32", num_classes=3)
    data = StoredImageFolderDataModule(str(tmp_path), img_size=32, batch_size=5)
    data.transforms_from(model)
    data.setup("fit")
    transform = create_transform(**resolve_data_config({}, model=model))
    files = sorted((tmp_path / "val").glob("*/*.png"))
    images, labels = next(iter(data.val_dataloader()))
    for i in range(5):
        expected = transform(Image.open(files[i]).convert("RGB"))
        torch.testing.assert_close(images[i], expected, atol=1e-6, rtol=0)
    assert data.mean == tuple(model.pretrained_cfg["mean"]) and data.std == tuple(model.pretrained_cfg["std"])


def test_new_images_of_any_size_are_predicted_in_timm_s_evaluation_form(tmp_path: Path) -> None:
    """``predict_root`` (it was not a setting of the tensor-store module, so a CIFAR-10 run could not classify new
    images): a copy of a validation image reads as the very tensor the store validated on; a photograph of another
    size and mode gets timm's evaluation transform of the module's settings; labels are unknown (-1); the loader
    reads the new images, not the split; a folder without images is one error."""
    import shutil

    from crate.lit.predictions import default_file

    write_image_folder(tmp_path / "data", **{**STORE_FOLDER, "size": 32, "suffix": ".png"})
    val_files = sorted((tmp_path / "data" / "val").glob("*/*.png"))
    new = tmp_path / "new_images"
    (new / "deeper").mkdir(parents=True)
    shutil.copy(val_files[4], new / "copy.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 45, 4), dtype=np.uint8), "RGBA").save(
        new / "deeper" / "photo.png"
    )
    model = timm.create_model("crate_nano_patch4_32", num_classes=3)
    data = StoredImageFolderDataModule(str(tmp_path / "data"), img_size=32, batch_size=5, predict_root=str(new))
    data.transforms_from(model)
    data.setup("predict")
    images, labels = next(iter(data.predict_dataloader()))
    assert images.shape == (2, 3, 32, 32) and labels.tolist() == [-1, -1]
    torch.testing.assert_close(images[0], data.val_set[4][0], atol=1e-6, rtol=0)
    settings = {**resolve_data_config({}, model=model), **data.eval_transform()}
    photo = Image.open(new / "deeper" / "photo.png").convert("RGB")
    torch.testing.assert_close(images[1], create_transform(**settings)(photo), atol=1e-6, rtol=0)
    assert default_file(data) == "predictions_new_images.csv"
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no image files"):
        StoredImageFolderDataModule(str(tmp_path / "data"), predict_root=str(tmp_path / "empty"))


def test_a_corrupt_store_is_one_error_that_says_to_delete_it(tmp_path: Path) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    path = _setup(tmp_path).store_path("train")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DataError, match=r"unreadable .*delete it and it is rebuilt") as caught:
        _setup(tmp_path)
    assert "\n" not in str(caught.value)
    path.unlink()
    assert len(_setup(tmp_path).train_set) == 12  # deleted: rebuilt


def test_missing_folder_mixed_sizes_and_unreadable_images_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"lacks .*train.*: the data root must be a folder holding train/<class>/<images>"
    ):
        StoredImageFolderDataModule(str(tmp_path / "nowhere"))
    write_image_folder(tmp_path, **STORE_FOLDER)
    odd = tmp_path / "val" / "class_0" / "big.jpg"
    Image.fromarray(np.zeros((9, 8, 3), dtype=np.uint8)).save(odd)
    with pytest.raises(DataError, match=r"big.jpg is 8x9 pixels .*one size.*ImageFolderDataModule"):
        _setup(tmp_path)
    from crate.data import MultiCrop

    views = MultiCrop(global_crops=2, local_crops=2, global_size=8, local_size=4)
    with pytest.raises(DataError, match=r"one size; resize its images to one size first: self-distillation") as told:
        _setup(tmp_path, multi_crop=views)  # the image-by-image module has no views: it is not named
    assert "ImageFolderDataModule" not in str(told.value)
    odd.write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"cannot read image .*big.jpg.*replace or remove"):
        _setup(tmp_path)


def test_an_unwritable_store_folder_says_to_set_store_dir(tmp_path: Path) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DataError, match=r"--data.store_dir"):
        _setup(tmp_path, store_dir=str(blocker / "stores"))


def test_a_refused_folder_keeps_no_empty_store_folder(tmp_path: Path) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    (tmp_path / "train" / "class_0" / "0.jpg").write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"cannot read image"):
        _setup(tmp_path)
    assert not (tmp_path / ".tensor_store").exists()  # the user's data folder is as it was


def test_a_fit_leaves_the_test_split_unread_and_the_test_stage_reads_it(tmp_path: Path) -> None:
    write_image_folder(tmp_path, **STORE_FOLDER)
    shutil.copytree(tmp_path / "val", tmp_path / "test")
    bad = tmp_path / "test" / "class_0" / "0.jpg"
    bad.write_bytes(b"not an image")
    data = _setup(tmp_path)  # a fit reads train/ and val/ only: the unreadable test image stops nothing
    assert data.test_set is None and not data.store_path("test").exists()
    with pytest.raises(DataError, match=r"cannot read image .*0.jpg"):
        data.setup("test")
    Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8)).save(bad)
    train_set, val_set = data.train_set, data.val_set
    data.setup("test")
    assert data.train_set is train_set and data.val_set is val_set  # the fit's splits are not decoded again
    files = sorted((tmp_path / "test").glob("*/*.jpg"))
    assert len(data.test_set) == len(files) == 12 and data.store_path("test").is_file()
    index = files.index(bad)
    expected = np.asarray(Image.open(bad).convert("RGB")).transpose(2, 0, 1)
    assert np.array_equal(data.test_set.store.images[index].numpy(), expected)


@pytest.mark.parametrize("precision", ["64-true", "bf16-true"])
def test_augmented_mixed_and_viewed_batches_take_a_true_precision_s_dtype(tmp_path: Path, precision: str) -> None:
    """Lightning casts a batch for a "-true" precision before it reaches the device; a stored folder's training
    images are made after that (augmentation, mixing, multi-crop views) and reached the float64 or bfloat16 weights
    as float32: LayerNorm's "mixed dtype" RuntimeError in the first step (a SimDINO run's k-NN bank too). The
    steps now see the weights' dtype, and both fits train to their end."""
    import lightning as L
    from lightning.pytorch.callbacks import Callback

    from crate.data import BatchMixing, MultiCrop
    from crate.lit import ImageClassifier, SelfDistillation

    dtype = {"64-true": torch.float64, "bf16-true": torch.bfloat16}[precision]
    seen: list[torch.dtype] = []

    class _Dtypes(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:  # noqa: ANN001
            seen.extend(t.dtype for t in torch.utils._pytree.tree_leaves(batch[0]) if t.is_floating_point())

    write_image_folder(tmp_path, classes=2, per_class=6, size=16, suffix=".png", gray=False, seed=1)
    settings = dict(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    supervised = StoredImageFolderDataModule(str(tmp_path), img_size=16, batch_size=4, mixing=BatchMixing())
    classifier = ImageClassifier("crate_nano_patch4_32", num_classes=2, img_size=16, model_kwargs={"depth": 1})
    L.Trainer(precision=precision, callbacks=[_Dtypes()], **settings).fit(classifier, supervised)
    views = StoredImageFolderDataModule(
        str(tmp_path), img_size=16, batch_size=4, multi_crop=MultiCrop(global_size=16, local_size=8, local_crops=2)
    )
    distilled = SelfDistillation(
        "crate_nano_patch4_32", num_classes=2, img_size=16, model_kwargs={"depth": 1}, head_hidden_dim=16,
        head_dim=8, knn_bank=8, warmup_epochs=0,
    )  # fmt: skip
    trainer = L.Trainer(precision=precision, callbacks=[_Dtypes()], limit_val_batches=1, **settings)
    trainer.fit(distilled, views)
    assert classifier.trainer.global_step == 3 and trainer.global_step == 3  # 12 training images, batches of 4
    assert "val/knn_acc" in trainer.callback_metrics  # the bank's features, in the weights' dtype
    assert len(seen) >= 4 and set(seen) == {dtype}
