"""A user's own folder: the recipe chosen from what it holds (small grayscale, colour photos, imbalanced
classes), a value given on the command line kept over the choice, and a classical baseline on the run's own pixels
that equals scikit-learn called directly, printed in the run's summary and written on its card."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, run_in_process
from PIL import Image

from crate.lit import Augmentation, ImageFolderDataModule
from crate.lit.data.folder_recipe import FolderSurvey, choose_recipe

FOLDER = str(REPO / "configs" / "crate_nano_imagefolder.yaml")


def _survey(train: int, side: int, channels: int, counts: list[int] | None = None) -> FolderSurvey:
    counts = counts or [train // 10] * 10
    return FolderSurvey(train, train // 4, {f"c{i}": n for i, n in enumerate(counts)}, channels, side, False)


def test_the_recipe_line_gives_the_images_size_as_it_is(tmp_path: Path) -> None:
    """Images of 56x40 (width x height) are said to be 56x40, not a square of their shorter side; sizes that
    vary are said to vary, with the median shorter side the input is chosen from."""
    from benchmarks.common import write_image_folder
    from crate.lit.data.folder_recipe import survey_folder

    write_image_folder(tmp_path / "wide", ("cat", "dog"), per_class=6, size=(40, 56), suffix=".png", gray=False)
    data = ImageFolderDataModule(str(tmp_path / "wide"), batch_size=4)
    survey = survey_folder(data.layout.samples("train"), data.classes, 12, 3)
    recipe = choose_recipe(survey)
    assert recipe.describe(40, 4, 3, recipe.augmentation, None).startswith("12 colour images of 56x40 in 2 classes")
    Image.fromarray(np.zeros((30, 70, 3), dtype=np.uint8)).save(tmp_path / "wide" / "train" / "cat" / "odd.png")
    varied = survey_folder(ImageFolderDataModule(str(tmp_path / "wide"), batch_size=4).layout.samples("train"),
                           data.classes, 12, 3)  # fmt: skip
    assert "images of sizes that vary (median shorter side 40) in 2" in choose_recipe(varied).describe(
        40, 4, 3, recipe.augmentation, None
    )


def test_small_grayscale_images_are_seen_at_their_side_with_small_shifts_and_no_flips() -> None:
    recipe = choose_recipe(_survey(8000, 28, 1))
    assert (recipe.img_size, recipe.batch_size, recipe.max_epochs) == (28, 64, 100)  # 800,000 / 8,000
    assert recipe.augmentation.padding == 2 and recipe.augmentation.hflip == 0 and recipe.class_weights is None
    text = recipe.describe(28, 64, 60, recipe.augmentation, None)
    assert text.startswith("8,000 grayscale images of 28x28 in 10 classes") and "crops +-2 px, no flips" in text
    assert "objects: --data.augmentation.padding 2 --data.augmentation.hflip 0.5" in text  # how to undo the guess
    given = recipe.describe(28, 64, 60, Augmentation(padding=2, hflip=0.0), None)
    assert "objects:" in given  # the same settings given on the command line: the same hint
    assert "objects:" not in recipe.describe(28, 64, 60, Augmentation(scale=(0.6, 1.0), hflip=0.0), None)


def test_colour_photos_keep_the_photo_recipe_at_32_pixels() -> None:
    recipe = choose_recipe(_survey(45_000, 375, 3))
    assert (recipe.img_size, recipe.batch_size, recipe.max_epochs) == (32, 128, 20)  # 17.8 epochs, rounded to 5
    assert recipe.augmentation == Augmentation()  # the photo recipe: 60-100% crops below 128 px, flips
    assert "random-resized crops of 60%-100%, horizontal flips" in recipe.describe(32, 128, 20, Augmentation(), None)
    assert "60%-100%, the trivial policy, horizontal" in recipe.describe(
        32, 128, 20, Augmentation(policy="trivial"), None
    )
    small_colour = choose_recipe(_survey(1000, 32, 3))
    assert small_colour.img_size == 32 and small_colour.augmentation.hflip == 0.5 and small_colour.max_epochs == 100


def test_strongly_imbalanced_classes_are_weighed_by_inverse_frequency_with_mean_one() -> None:
    counts = [400, 100, 50, 50]
    recipe = choose_recipe(_survey(600, 28, 1, counts))
    expected = np.array([1 / n for n in counts])
    expected /= expected.mean()
    np.testing.assert_allclose(recipe.class_weights, expected, rtol=1e-5)
    assert "imbalanced 8.0:1" in recipe.describe(28, 64, 100, recipe.augmentation, recipe.class_weights)
    assert choose_recipe(_survey(600, 28, 1, [200, 200, 100, 100])).class_weights is None  # 2:1 is not strong


def _gray_folder(root: Path, side: int = 12, per_class: tuple[int, ...] = (6, 6, 6)) -> None:
    rng = np.random.default_rng(0)
    for split, scale in (("train", 1), ("val", 1)):
        for c, count in enumerate(per_class):
            folder = root / split / f"c{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count * scale):
                pixels = rng.integers(0, 60, size=(side, side), dtype=np.uint8)
                pixels[c * 3 : c * 3 + 4, :] += 150  # a class-dependent stripe: learnable from pixels
                Image.fromarray(pixels, mode="L").save(folder / f"{i}.png")


def test_the_data_module_chooses_what_is_left_open_and_keeps_what_is_given(tmp_path: Path) -> None:
    _gray_folder(tmp_path, side=12, per_class=(16, 4, 4))
    chosen = ImageFolderDataModule(str(tmp_path), num_workers=0)
    assert chosen.img_size == 12 and chosen.in_chans == 1 and chosen.augmentation.padding == 2
    assert chosen.recipe.survey.class_counts == {"c0": 16, "c1": 4, "c2": 4} and chosen.class_weights is not None
    given = ImageFolderDataModule(str(tmp_path), img_size=16, batch_size=5, class_weights=None, num_workers=0)
    assert (given.img_size, given.batch_size, given.class_weights) == (16, 5, None)
    assert given.augmentation == chosen.augmentation  # left open: still chosen


@pytest.mark.slow  # two short train.py runs in this process
def test_a_run_on_a_folder_says_its_recipe_records_it_and_carries_its_baseline_to_the_card(
    tmp_path: Path, caplog
) -> None:
    import logging

    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    from crate.export import export_checkpoint

    _gray_folder(tmp_path / "images", side=12, per_class=(12, 12, 12))
    args = ["fit", "--config", FOLDER, "--data.root", str(tmp_path / "images"), "--data.num_workers", "0"]
    args += ["--log_root", str(tmp_path / "logs"), "--trainer.enable_progress_bar", "false"]
    with caplog.at_level(logging.INFO):
        proc = run_in_process(*args, "--trainer.max_epochs", "2", "--data.batch_size", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = caplog.text
    assert "folder recipe: 36 grayscale images of 12x12 in 3 classes (36 to validate): input 12, crops +-2 px" in text
    assert "batch 8, 2 epochs" in text  # the values given win over the chosen ones (64, 100)
    run = tmp_path / "logs" / "crate_nano_imagefolder" / "version_0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["data"]["init_args"]["img_size"] == 12 and config["data"]["init_args"]["batch_size"] == 8
    assert config["data"]["init_args"]["augmentation"]["padding"] == 2 and config["trainer"]["max_epochs"] == 2

    # the baseline, computed independently: PIL's pixels in [0, 1], scikit-learn's models fitted directly
    def pixels(split: str) -> tuple[np.ndarray, np.ndarray]:
        files = sorted((tmp_path / "images" / split).glob("*/*.png"))
        x = np.stack([np.asarray(Image.open(f), dtype=np.float32).reshape(-1) / 255.0 for f in files])
        return x, np.array([int(f.parent.name[1:]) for f in files])

    (train_x, train_y), (val_x, val_y) = pixels("train"), pixels("val")
    svm = SVC().fit(train_x, train_y).score(val_x, val_y)
    logistic = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(train_x, train_y)
    held = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["classical_baseline"]
    assert held["rbf_svm"] == svm and held["logistic"] == logistic.score(val_x, val_y) and held["train_images"] == 36
    assert f"RBF SVM on pixels {svm:.4f} · logistic {held['logistic']:.4f}" in text  # the end-of-run summary
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "mine.safetensors")
    assert card["classical_baseline"] == held
    assert f"RBF SVM {svm:.4f}" in (tmp_path / "mine.md").read_text()
    # the folder moved: the data root finds it and the card's figure is the same; a folder of other images (one
    # more in val/) is not the run's data, and its accuracy is not put on a card as the run's held-out figure
    import shutil

    from crate.lit.data.base import DataError

    shutil.copytree(tmp_path / "images", tmp_path / "moved")
    moved = {"root": str(tmp_path / "moved")}
    assert export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "moved.safetensors", data_overrides=moved)[
        "val_accuracy"
    ] == pytest.approx(card["val_accuracy"], abs=0)
    shutil.copy(tmp_path / "moved" / "val" / "c0" / "0.png", tmp_path / "moved" / "val" / "c0" / "extra.png")
    with pytest.raises(
        DataError, match=r"holds other images than the run trained and held out \(images of val 36 -> 37\)"
    ):
        export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "other.safetensors", data_overrides=moved)
    assert not list(tmp_path.glob("other.*"))

    caplog.clear()
    with caplog.at_level(logging.INFO):
        proc = run_in_process(*args, "--trainer.max_epochs", "1", "--baseline.enabled", "false")
    assert proc.returncode == 0 and "classical baseline" not in caplog.text and "against pixels" not in caplog.text


def test_the_baseline_s_subsample_keeps_each_class_share_within_its_caps() -> None:
    from crate.lit.classical_baseline import _subsample, baseline_scores

    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], [300, 150, 50])  # 500 images, imbalanced
    features = rng.normal(size=(500, 40)).astype(np.float32) + labels[:, None]
    scores = baseline_scores(features, labels, features[:30], labels[:30], max_train=100)
    assert scores["train_images"] == 100 and scores["pixels"] == 40
    scores = baseline_scores(features, labels, features[:30], labels[:30], max_values=40 * 60)
    assert scores["train_images"] == 60  # the pixel-value cap: 2,400 values of 40 each
    assert np.bincount(labels[_subsample(labels, 100)]).tolist() == [60, 30, 10]  # the shares of 300:150:50
    everything = baseline_scores(features, labels, features[:30], labels[:30])
    assert everything["train_images"] == 500  # under both caps: every training image


@pytest.mark.slow  # three one-step train.py runs in this process
def test_a_run_from_pretrained_weights_takes_their_input_size_and_channels_unless_given(tmp_path: Path, caplog) -> None:
    """As timm fine-tunes a pretrained model at its own input size and in its channels: 40 px images are read at
    the 32 px the shipped file was trained at (its position embedding kept), gray ones as RGB (its first layer
    kept, not folded), and the recipe line says why; a size given is kept, with the resampling warned of."""
    import logging
    import warnings

    from benchmarks.common import write_image_folder
    from crate.models import read_checkpoint

    shipped = REPO / "checkpoints" / "crate_nano_patch4_32.cifar10.safetensors"
    trained = read_checkpoint(shipped)
    assert (trained.img_size(), trained.in_chans()) == (32, 3)  # what the file records, not the folders' images
    args = ["fit", "--config", FOLDER, "--data.num_workers", "0", "--baseline.enabled", "false"]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.max_steps", "1"]
    args += ["--model.pretrained_file", str(shipped)]
    for given, gray, expected in ((None, False, 32), (40, False, 40), (None, True, 32)):
        caplog.clear()
        images = write_image_folder(tmp_path / f"images_{given}_{gray}", classes=3, per_class=4, size=40, gray=False)
        for image in images.rglob("*.png") if gray else ():  # every image gray: a gray folder
            Image.open(image).convert("L").save(image)
        logs = tmp_path / f"logs_{given}_{gray}"
        extra = ["--data.img_size", str(given)] if given else []
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
            warnings.simplefilter("always")
            proc = run_in_process(*args, "--data.root", str(images), *extra, "--log_root", str(logs))
        assert proc.returncode == 0, proc.stderr[-2000:]
        run = logs / "crate_nano_imagefolder" / "version_0"
        config = yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"]
        built = read_checkpoint(run / "checkpoints" / "last.ckpt")
        assert config["img_size"] == built.hparams["img_size"] == expected
        assert built.zoo_state_dict["pos_embed"].shape[1] == 1 + (expected // 4) ** 2
        assert config["in_chans"] == built.in_chans() == 3  # gray images replicated, the file's RGB layer kept
        # the augmentation follows what the images are, whatever they are read in: a gray folder's glyph recipe
        assert (config["augmentation"]["hflip"] == 0.0) == gray
        assert ("12 grayscale images" in caplog.text) == gray
        taken = "input 32, RGB" if given is None else "RGB"  # what was left open
        assert f"({taken}: as --model.pretrained_file {shipped} was trained)" in caplog.text
        resampled = [w for w in caught if "was trained with img_size=32" in str(w.message)]
        assert bool(resampled) == (given is not None)  # a resampling is warned of
        assert not [w for w in caught if "was trained with in_chans" in str(w.message)]  # nothing folded


@pytest.mark.parametrize("how", ["pretrained_file", "overlay"])
def test_a_run_from_a_file_takes_the_file_s_size_and_channels_whichever_way_it_is_given(how: str) -> None:
    """``--model.pretrained_file F`` and timm's ``pretrained_cfg_overlay: {file: F}`` start from the same file: a
    folder run with its size and channels open takes the file's (the digits file: 32 px, gray), not the
    architecture's default cfg (3 channels)."""
    from jsonargparse import Namespace

    from crate.lit.cli import start_as_trained
    from crate.models import read_checkpoint

    shipped = str(REPO / "checkpoints" / "crate_nano_patch4_32.digits.safetensors")
    held = read_checkpoint(shipped)
    model = Namespace(model_name="crate_nano_patch4_32", pretrained_file=None, model_kwargs={})
    if how == "pretrained_file":
        model.pretrained_file = shipped
    else:
        model.model_kwargs = {"pretrained": True, "pretrained_cfg_overlay": {"file": shipped}}
    data = Namespace(class_path="crate.lit.ImageFolderDataModule", init_args=Namespace(img_size=None, in_chans=None))
    said = start_as_trained(Namespace(data=data, model=model))
    assert (data.init_args.img_size, data.init_args.in_chans) == (held.img_size(), held.in_chans()) == (32, 1)
    assert said.startswith(" (input 32, gray: as ") and said.endswith(f"{shipped} was trained)")


def test_an_evaluation_or_a_resume_reads_a_folder_at_the_size_and_channels_of_its_checkpoint(
    tmp_path: Path, caplog
) -> None:
    """ToST has no table of the input's size, so its weights load at any size: validating a run trained on 32 px
    images on a folder of 48 px ones read them at 48 without a word. Like a run from pretrained weights, an
    evaluation, or a resume, with its size and channels open now takes the checkpoint's, and says so."""
    import logging

    from benchmarks.common import write_image_folder

    base = ["--config", FOLDER, "--model.model_name", "tost_nano_patch4_32", "--data.num_workers", "0"]
    base += ["--trainer.enable_progress_bar", "false", "--log_root", str(tmp_path / "logs")]
    small = write_image_folder(tmp_path / "small", classes=3, per_class=4, size=32, gray=False)
    large = write_image_folder(tmp_path / "large", classes=3, per_class=4, size=48, gray=False)
    fit = run_in_process(
        "fit", *base, "--data.root", str(small), "--trainer.max_steps", "1", "--baseline.enabled", "false"
    )
    assert fit.returncode == 0, fit.stderr[-2000:]
    run = tmp_path / "logs" / "crate_nano_imagefolder" / "version_0"
    with caplog.at_level(logging.INFO):
        validate = run_in_process("validate", *base, "--data.root", str(large), "--ckpt_path", "last")
    assert validate.returncode == 0, validate.stderr[-2000:]
    read = yaml.safe_load((run / "validate" / "config.yaml").read_text())["data"]["init_args"]
    assert (read["img_size"], read["in_chans"]) == (32, 3)  # the folder's own size would be 48
    assert f"the folder's images are read (input 32, RGB: as --ckpt_path {run / 'checkpoints'}" in caplog.text
    # a resume continues at the size its run was given, not the folder's
    fit = ["fit", *base, "--data.root", str(large), "--baseline.enabled", "false", "--run_name", "given"]
    given = run_in_process(*fit, "--data.img_size", "32", "--trainer.max_steps", "1")
    assert given.returncode == 0, given.stderr[-2000:]
    resumed = run_in_process(*fit, "--trainer.max_steps", "2", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    config = yaml.safe_load((tmp_path / "logs" / "given" / "version_0" / "config.yaml").read_text())
    assert config["data"]["init_args"]["img_size"] == 32
    # a size given is kept, and said to be one the weights never saw
    with pytest.warns(UserWarning, match=r"trained on 32 px images and validate reads them at 48 px"):
        given = run_in_process(
            "validate", *base, "--data.root", str(large), "--ckpt_path", "last", "--data.img_size", "48"
        )
    assert given.returncode == 0, given.stderr[-2000:]


def test_a_classifier_built_apart_from_a_folder_that_weighs_its_classes_is_refused_unless_it_weighs_them_alike(
    tmp_path: Path,
) -> None:
    """In Python, a folder of imbalanced classes chose its class weights and the classifier, built without them,
    trained unweighted without a word (train.py links the two)."""
    import lightning as L
    from helpers import quiet_trainer

    from crate.lit import ImageClassifier

    _gray_folder(tmp_path, side=12, per_class=(16, 4, 4))
    data = ImageFolderDataModule(str(tmp_path), batch_size=8, num_workers=0)
    build = dict(num_classes=3, in_chans=1, img_size=12, warmup_epochs=0)

    def fit(module: ImageClassifier) -> L.Trainer:
        trainer = quiet_trainer(max_steps=1, limit_val_batches=1)
        trainer.fit(module, data)
        return trainer

    with pytest.raises(ValueError, match=r"the data weighs its classes \[.*\] \(imbalanced classes\) .*=None"):
        fit(ImageClassifier("crate_nano_patch4_32", **build))
    weighted = ImageClassifier("crate_nano_patch4_32", class_weights=data.class_weights, **build)
    assert fit(weighted).global_step == 1
    torch.testing.assert_close(weighted.class_weight, torch.tensor(data.class_weights))
