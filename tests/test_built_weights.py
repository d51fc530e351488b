"""A run built from weights (a pretrained tag here) is checked against its data before it runs: an evaluation of a
head trained on other classes is refused, one of a new head says that the head is untrained, and one of the
tag's own classes scores what timm scores."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from conftest import run_in_process, write_cifar10_like_folder, write_image_folder

import crate  # noqa: F401
from crate.export import main as export_main
from crate.interpret.__main__ import main as interpret_main
from crate.models.shipped import CIFAR10_CLASSES

TAG = "crate_nano_patch4_32.cifar10"
FOLDER = "configs/crate_nano_imagefolder.yaml"
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _run(subcommand: str, root: Path, logs: Path, *extra: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = run_in_process(
            subcommand, "--config", FOLDER, "--data.root", str(root), "--model.model_name", TAG,
            "--model.model_kwargs", "{pretrained: true}", "--log_root", str(logs), *QUIET, *extra,
        )  # fmt: skip
    return done, [str(w.message) for w in caught]


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_an_evaluation_of_a_head_trained_on_other_class_names_is_refused_before_anything_is_written(
    tmp_path: Path, subcommand: str
) -> None:
    # CIFAR-10's ten classes with two folders named otherwise: the label order (sorted names) moves as well
    names = ["plane", "car", *CIFAR10_CLASSES[2:]]
    root = write_image_folder(tmp_path / "data", names, per_class=1, size=32, gray=False)
    (write_image_folder(tmp_path / "extra", names, per_class=1, size=32, gray=False) / "train").rename(root / "test")
    done, _ = _run(subcommand, root, tmp_path / "logs")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and TAG in lines[0], lines
    assert "missing ['airplane', 'automobile']" in lines[0] and "new ['car', 'plane']" in lines[0], lines[0]
    assert not (tmp_path / "logs").exists()


def _summary(caplog) -> str:
    return next(line for line in caplog.text.splitlines() if " val of " in line)


def test_an_evaluation_of_the_tag_s_own_classes_scores_what_timm_scores(tmp_path: Path, caplog) -> None:
    root = write_cifar10_like_folder(tmp_path / "data", per_class=3)
    with caplog.at_level(logging.INFO):
        done, messages = _run("validate", root, tmp_path / "logs")
    assert done.returncode == 0, done.stderr
    assert not [m for m in messages if "head" in m], messages
    summary = _summary(caplog)
    assert f"the pretrained weights it was built with ({TAG}):" in summary, summary
    # the same weights through timm, on the same files with the tag's own evaluation transform
    model = timm.create_model(TAG, pretrained=True).eval()
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    images = torchvision.datasets.ImageFolder(root / "val", transform=transform)
    x = torch.stack([image for image, _ in images])
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x), torch.tensor(images.targets)).item()
    assert f"val/loss {loss:.4f}" in summary, (summary, loss)


def test_an_evaluation_under_a_new_head_says_the_head_is_untrained(tmp_path: Path, caplog) -> None:
    root = write_image_folder(tmp_path / "data", ["cat", "dog"], per_class=2, size=32, gray=False)
    with caplog.at_level(logging.INFO):
        done, messages = _run("validate", root, tmp_path / "logs")
    assert done.returncode == 0, done.stderr
    said = [m for m in messages if "new, untrained head" in m]
    assert len(said) == 1 and "10 classes and the data 2" in said[0], messages
    summary = _summary(caplog)
    assert f"({TAG}) under a new, untrained head:" in summary, summary


@pytest.mark.slow
def test_a_fit_that_keeps_a_head_of_other_class_names_says_what_its_outputs_now_stand_for(tmp_path: Path) -> None:
    names = ["plane", "car", *CIFAR10_CLASSES[2:]]
    root = write_image_folder(tmp_path / "data", names, per_class=1, size=32, gray=False)
    done, messages = _run("fit", root, tmp_path / "logs", "--trainer.max_epochs", "1")
    assert done.returncode == 0, done.stderr
    said = [m for m in messages if "the head is kept" in m]
    assert len(said) == 1 and "trained as 10 classes [airplane, automobile, bird, ...]" in said[0], messages
    assert "stand for 10 classes [bird, car, cat, ...]" in said[0], said


def test_a_fit_that_names_a_tag_without_loading_it_says_it_starts_from_random_weights(
    tmp_path: Path, caplog, capsys
) -> None:
    """timm's create_model builds a tag's architecture without its weights unless pretrained is set: a fit named
    after the tag alone starts from random initialization, and says so once; with pretrained it says that the
    data's 2 classes get a new head in place of the tag's 10."""
    root = write_image_folder(tmp_path / "data", ["cat", "dog"], per_class=2, size=32, gray=False)
    quick = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1", "--baseline.enabled", "false"]
    said = {}
    for label, extra in (("alone", []), ("pretrained", ["--model.model_kwargs", "{pretrained: true}"])):
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
            warnings.simplefilter("always")
            caplog.clear()
            done = run_in_process(
                "fit", "--config", FOLDER, "--data.root", str(root), "--model.model_name", TAG, *extra,
                "--log_root", str(tmp_path / "logs"), "--run_name", label, *QUIET, *quick,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        said[label] = [str(w.message) for w in caught if "random initialization" in str(w.message)]
        said[label] += [line for line in caplog.text.splitlines() if "new head" in line]
    assert len(said["alone"]) == 1 and f"--model.model_name {TAG} names the weights" in said["alone"][0]
    assert "--model.model_kwargs '{pretrained: true}'" in said["alone"][0]
    assert len(said["pretrained"]) == 1, said
    head_line = said["pretrained"][0]
    assert (
        f"the pretrained weights of {TAG}: a new head for the data's 2 classes (the weights' head has 10" in head_line
    )
    # the fine-tuned run exports with its own classes: the tag's ten names no longer name its two outputs
    out = tmp_path / "tuned.safetensors"
    export_main([str(tmp_path / "logs" / "pretrained" / "version_0" / "checkpoints" / "last.ckpt"), "--out", str(out)])
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["label_names"] == ["cat", "dog"] and card["num_classes"] == 2
    assert card["model_name"] == TAG.split(".")[0]  # the run's own weights, not the tag's
    assert f"starting from the weights of the tag `{TAG}`" in out.with_suffix(".md").read_text()
    tuned = timm.create_model(TAG, pretrained=True, pretrained_cfg_overlay=dict(file=str(out)))
    assert tuned.pretrained_cfg["label_names"] == ("cat", "dog")
    # its checkpoint records the tag's name; the report names the architecture, since the file gives the weights
    ckpt = str(tmp_path / "logs" / "pretrained" / "version_0" / "checkpoints" / "last.ckpt")
    with pytest.raises(SystemExit) as refused:
        interpret_main(["--model", ckpt, "--out", str(tmp_path / "report")])
    assert refused.value.code == 2 and f"(--model {TAG.split('.')[0]} --checkpoint {ckpt})" in capsys.readouterr().err
    quick = ["--sample-images", "4", "--probe-images", "4", "--count-seeds", "2", "--images", "2"]
    interpret_main(["--model", TAG, "--checkpoint", ckpt, "--out", str(tmp_path / "report"), *quick])
    assert list(json.loads((tmp_path / "report" / "metrics.json").read_text())) == [TAG.split(".")[0]]
