"""A run's data and module kind travel with its checkpoints: export, interpret and ``train.py validate``
score the same held-out images; checkpoints of another module kind, unavailable subcommands and splits are
one-line errors that leave nothing behind; exports of every zoo classifier load with their card's line."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch
import yaml
from conftest import write_image_folder

import crate  # noqa: F401
from crate.data.digits import load_digits_tensors
from crate.export import main as export_main
from crate.interpret.__main__ import main as interpret_main
from crate.interpret.loading import held_out_accuracy, load_run
from crate.lit import MaskedAutoencoder, cli_main, cpu_precision
from crate.models import CheckpointError, read_checkpoint
from crate.run import read_record
from crate.run.record import UPDATE_BATCH_KEY
from crate.run.resume_check import check_resume_recipe, recipe_changes

REPO = Path(__file__).resolve().parents[1]
DIGITS = str(REPO / "configs" / "crate_nano_digits.yaml")
PRETRAIN = str(REPO / "configs" / "crate_mae_nano_digits.yaml")
PROBE = str(REPO / "configs" / "crate_mae_nano_digits_probe.yaml")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
SHORT = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4", *QUIET]

pytestmark = pytest.mark.slow  # short training runs (in this process)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """last.ckpt of: a CRATE run on digits split 1, a masked-pretraining run, a probe of it, a ToST run."""
    root = tmp_path_factory.mktemp("runs")
    log = ["--log_root", str(root)]
    cli_main(["fit", "--config", DIGITS, "--data.split_seed", "1", "--run_name", "split1", *log, *SHORT])
    cli_main(["fit", "--config", PRETRAIN, "--run_name", "mae", *log, *SHORT], model_class=MaskedAutoencoder)
    mae = root / "mae" / "version_0" / "checkpoints" / "last.ckpt"
    cli_main(["fit", "--config", PROBE, "--model.pretrained_file", str(mae), "--run_name", "probe", *log, *SHORT])
    tost = ["--model.model_name", "tost_nano_patch4_32", "--run_name", "tost"]
    cli_main(["fit", "--config", DIGITS, *tost, *log, *SHORT])
    return {
        name: root / name / "version_0" / "checkpoints" / "last.ckpt" for name in ("split1", "mae", "probe", "tost")
    }


def _validate(config: str, ckpt: Path, *extra: str) -> float:
    args = ["validate", "--config", config, *extra, "--ckpt_path", str(ckpt), "--log_root", str(ckpt.parents[3])]
    cli = cli_main([*args, "--run_name", ckpt.parents[2].name, *QUIET])
    return float(cli.trainer.callback_metrics["val/acc"])


def test_export_interpret_and_validate_score_the_split_the_run_held_out(runs, tmp_path: Path, capsys) -> None:
    ckpt = runs["split1"]
    held = read_checkpoint(ckpt)
    record = read_record(held)
    assert record.data_config["init_args"]["split_seed"] == 1 and record.module == "ImageClassifier"
    validated = _validate(DIGITS, ckpt, "--data.split_seed", "1")
    export_main([str(ckpt), "--out", str(tmp_path / "split1.safetensors")])
    card = json.loads((tmp_path / "split1.json").read_text())
    # the accuracy reads the whole split regardless
    quick = ["--sample-images", "64", "--probe-images", "16", "--count-seeds", "3"]
    interpret_main(
        ["--model", "crate_nano_patch4_32", "--checkpoint", str(ckpt), "--out", str(tmp_path / "report"), *quick]
    )
    interpreted = json.loads((tmp_path / "report" / "metrics.json").read_text())
    reported = next(iter(interpreted.values())) if "val_accuracy" not in interpreted else interpreted
    # the independent count: the module's own weights on split 1's 360 validation images
    model, _ = load_run("crate_nano_patch4_32", ckpt)
    _, val = load_digits_tensors(img_size=16, in_chans=1, seed=1)
    expected = held_out_accuracy(model, val)
    assert card["val_images"] == len(val) == 360 and card["data_config"]["init_args"]["split_seed"] == 1
    assert card["val_accuracy"] == pytest.approx(expected, abs=1e-9)
    assert reported["val_accuracy"] == pytest.approx(expected, abs=1e-9)
    assert validated == pytest.approx(expected, abs=1e-6)
    # asking for the default split of the same data is refused: 80% of its images trained this run
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        args = ["--data", DIGITS, "--data.split_seed", "0", "--out", str(tmp_path / "refused")]
        interpret_main(["--model", "crate_nano_patch4_32", "--checkpoint", str(ckpt), *args])
    assert exit_info.value.code == 2 and "split_seed: run 1, asked 0" in capsys.readouterr().err
    # and so is train.py validate, test and predict on it (the config's default split, seed 0)
    before = _files(ckpt.parents[2])
    for subcommand in ("validate", "predict"):
        with pytest.raises(SystemExit) as exit_info:
            cli_main([subcommand, "--config", DIGITS, "--ckpt_path", str(ckpt), *QUIET])
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and "split otherwise (split_seed 1 -> 0)" in error
        assert f"which {subcommand} would take for held-out ones" in error
    assert _files(ckpt.parents[2]) == before
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        export_main([str(ckpt), "--out", str(tmp_path / "x.safetensors"), "--data-root", "/nowhere"])
    # the digits lie in no folder: refused as such (not with advice to give the --data-root it was given)
    assert exit_info.value.code == 2 and capsys.readouterr().err == (
        "crate-export: error: the checkpoint's run trained on scikit-learn's digits, which lie in no folder: give it "
        "no data root (or check that this is the checkpoint you meant)\n"
    )
    assert not (tmp_path / "x.safetensors").exists()


def test_a_run_from_weights_trained_on_another_split_of_its_data_says_so(runs, tmp_path: Path) -> None:
    """split1's weights trained on 80% of the digits drawn with seed 1: a run from them on seed 0's split
    validates on images some of which trained them, and says so; on seed 1's split it has nothing to say."""
    ckpt = runs["split1"]
    start = ["fit", "--config", DIGITS, "--model.pretrained_file", str(ckpt), "--log_root", str(tmp_path), *SHORT]
    with pytest.warns(UserWarning, match=r"split otherwise \(split_seed 1 -> 0\): some of this run's validation"):
        cli_main([*start, "--run_name", "seed0"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli_main([*start, "--run_name", "seed1", "--data.split_seed", "1"])
    assert not [w for w in caught if "split otherwise" in str(w.message)]


def test_the_card_load_line_builds_the_exported_model(runs, tmp_path: Path) -> None:
    for name in ("split1", "tost", "probe"):
        out = tmp_path / f"{name}.safetensors"
        export_main([str(runs[name]), "--out", str(out)])
        card = json.loads(out.with_suffix(".json").read_text())
        assert f"`{card['load']}`" in out.with_suffix(".md").read_text()
        loaded = eval(card["load"], {"timm": timm}).eval()  # the line as a user pastes it
        model, _ = load_run(card["model_name"], runs[name])
        x = torch.randn(3, *card["input_size"])
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=1e-6)
        assert card["val_images"] == 360 and 0.0 <= card["val_accuracy"] <= 1.0


def test_interpret_builds_the_run_s_model_kwargs(runs, tmp_path: Path) -> None:
    # the probe run: crate_mae_nano_patch4_32 with decoder_depth 0 and global_pool avg
    out = tmp_path / "probe_report"
    quick = ["--sample-images", "64", "--probe-images", "16", "--count-seeds", "3"]
    interpret_main(
        ["--model", "crate_mae_nano_patch4_32", "--checkpoint", str(runs["probe"]), "--out", str(out), *quick]
    )
    model, recorded = load_run("crate_mae_nano_patch4_32", runs["probe"])
    assert model.decoder_depth == 0 and model.global_pool == "avg" and recorded["init_args"]["img_size"] == 16
    reported = json.loads((out / "metrics.json").read_text())
    accuracy = next(v for v in reported.values() if isinstance(v, dict) and "val_accuracy" in v)["val_accuracy"]
    assert accuracy == pytest.approx(_validate(PROBE, runs["probe"]), abs=1e-6)


def test_checkpoints_of_another_module_kind_are_refused_before_anything_is_written(runs, capsys) -> None:
    cases = [
        (["validate", "--config", PROBE, "--ckpt_path", str(runs["mae"])], None, "--model.pretrained_file"),
        (["fit", "--config", PROBE, "--ckpt_path", str(runs["mae"])], None, "pretrain.py (MaskedAutoencoder)"),
        (["fit", "--config", PRETRAIN, "--ckpt_path", str(runs["probe"])], MaskedAutoencoder, "train.py"),
    ]
    for args, module, message in cases:
        folders = {p: _files(p.parents[2]) for p in (runs["mae"], runs["probe"])}
        kwargs = {"model_class": module} if module else {}
        with pytest.raises(SystemExit) as exit_info:
            cli_main([*args, "--log_root", str(runs["mae"].parents[3]), *QUIET], **kwargs)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err and "Traceback" not in err, err
        assert len([line for line in err.splitlines() if "error:" in line]) == 1
        assert {p: _files(p.parents[2]) for p in folders} == folders  # nothing written into either run


def test_a_resume_with_another_recipe_is_refused_and_one_that_changes_no_recipe_resumes(
    runs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume restores the optimizer and the step count, so a changed learning rate would be recorded (and put on
    the card) but hold for part of the run only, as a changed batch, accumulation, augmentation or precision would:
    each is refused in one line naming the recorded and the given value, with nothing written. Settings that do
    not change what is trained (speed, the spelling of the same precision) resume, and keep the run's seed."""
    shutil.copytree(runs["split1"].parents[1], tmp_path / "split1" / "version_0", symlinks=True)
    run = tmp_path / "split1" / "version_0"
    ckpt = next((run / "checkpoints").glob("latest-*.ckpt"))
    recorded = yaml.safe_load(Path(DIGITS).read_text())
    args = ["fit", "--config", DIGITS, "--data.split_seed", "1", "--run_name", "split1", "--log_root", str(tmp_path)]
    args += ["--ckpt_path", str(ckpt), "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "4", *QUIET]
    lr, batch = float(recorded["model"]["lr"]), recorded["data"]["init_args"]["batch_size"]
    hflip = recorded["data"]["init_args"]["augmentation"]["hflip"]
    cases = [
        (["--model.lr", str(lr * 2)], f"model.lr {lr} -> {lr * 2}"),
        (
            ["--data.batch_size", str(batch // 2)],
            f"the images of an optimizer step {batch} images (data.batch_size {batch} x 1 process x 1 accumulated) -> "
            f"{batch // 2} images (data.batch_size {batch // 2} x 1 process x 1 accumulated), which --data.batch_size "
            f"{batch} keeps",
        ),
        (["--data.augmentation.hflip", "0.5"], f"data.augmentation.hflip {hflip} -> 0.5"),
        (["--trainer.precision", "bf16-mixed"], "trainer.precision 32-true -> bf16-mixed"),  # the config sets none
        # two batches to an update: the batch of an update doubles as with the batch size, and the schedule shortens
        (
            ["--trainer.accumulate_grad_batches", "2"],
            f"-> {2 * batch} images (data.batch_size {batch} x 1 process x 2 accumulated), which --data.batch_size "
            f"{batch // 2} keeps",
        ),
    ]
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr(cpu_precision, "cpu_has_native_bf16", lambda: False)  # bf16 would crawl here
    for extra, change in cases:
        with pytest.raises(SystemExit) as exit_info, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cli_main([*args, *extra])
        slow = [str(w.message) for w in caught if "without bf16 instructions" in str(w.message)]
        # the warning's way out for a resume is a new run from its weights, as a resume keeps its precision
        assert len(slow) == ("bf16-mixed" in extra) and all(f"--model.pretrained_file {ckpt} " in m for m in slow)
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert exit_info.value.code == 2 and len(errors) == 1 and "trained with other settings" in errors[0], err
        assert change in errors[0] and "--model.pretrained_file" in errors[0], errors[0]
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    free = ["--trainer.precision", "32", "--model.grad_checkpointing", "true", "--data.num_workers", "0"]
    seed = recorded["seed_everything"]
    cli_main([*args, *free, "--seed_everything", str(seed + 7)])
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1
    # the seed chose the run's initial weights: the run's config (and its card) keeps the one it started with
    assert yaml.safe_load((run / "config.yaml").read_text())["seed_everything"] == seed


def test_a_resume_may_share_a_step_s_images_out_anew_but_not_change_them(runs, tmp_path: Path) -> None:
    """A run of batch 64 on one process resumes on two with batch 32 or with two accumulated batches of 32 (each
    step reads 64 images); on two processes with batch 64 it would read 128 and is refused. A file written before
    the step's images were recorded is held to its batch size and its config's accumulated batches."""
    held = read_checkpoint(runs["split1"])
    record = read_record(held)
    batch = record.update_batch["batch_size"]
    assert record.update_batch == {"batch_size": batch, "processes": 1, "accumulate": 1}

    def resume(held, batch_size: int, processes: int, accumulate: int = 1) -> None:  # noqa: ANN001
        data = json.loads(json.dumps(record.data_config))
        data["init_args"]["batch_size"] = batch_size
        step = {"batch_size": batch_size, "processes": processes, "accumulate": accumulate}
        check_resume_recipe(held, record.hyper_parameters, data, "32-true", step)

    resume(held, batch // 2, 2)
    resume(held, batch // 2, 1, accumulate=2)
    with pytest.raises(CheckpointError, match=rf"step {batch} images .* -> {2 * batch} images .* 2 processes"):
        resume(held, batch, 2)
    loaded = torch.load(runs["split1"], weights_only=True)
    del loaded[UPDATE_BATCH_KEY]
    older = tmp_path / "split1" / "version_0" / "checkpoints" / "older.ckpt"
    shutil.copytree(runs["split1"].parents[1], older.parents[1], symlinks=True)
    torch.save(loaded, older)
    held = read_checkpoint(older)
    assert read_record(held).update_batch is None
    with pytest.raises(CheckpointError, match=rf"data.batch_size {batch} -> {batch // 2}"):
        resume(held, batch // 2, 2)
    with pytest.raises(CheckpointError, match=r"trainer.accumulate_grad_batches 1 -> 2"):
        resume(held, batch, 1, accumulate=2)


def test_recipe_changes_name_each_changed_setting_both_record_and_skip_the_free_ones() -> None:
    """Each changed value by its key (nested sections by their inner keys, a section turned on from None as a
    whole); keys only one side records, and the free ones, pass."""
    recorded = {"lr": 0.002, "betas": [0.9, 0.999], "mixing": None, "num_workers": 4, "old_setting": 1}
    recorded["augmentation"] = {"hflip": 0.5, "padding": 4}
    current = {"lr": 2e-3, "betas": (0.9, 0.99), "mixing": {"mixup_alpha": 0.8}, "num_workers": 0, "new_setting": 2}
    current["augmentation"] = {"hflip": 0.0, "padding": 4}
    assert recipe_changes(recorded, current, frozenset({"num_workers"})) == [
        "betas [0.9, 0.999] -> (0.9, 0.99)",
        "mixing None -> {'mixup_alpha': 0.8}",
        "augmentation.hflip 0.5 -> 0.0",
    ]


def test_export_refuses_a_pretraining_checkpoint(runs, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        export_main([str(runs["mae"]), "--out", str(tmp_path / "mae.safetensors")])
    assert exit_info.value.code == 2 and "probe or fine-tune it first" in capsys.readouterr().err.lower()
    assert not list(tmp_path.iterdir())


def test_pretrain_predict_and_test_without_a_split_are_refused_up_front(runs, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        args = ["predict", "--config", PRETRAIN, "--ckpt_path", str(runs["mae"]), "--log_root", str(tmp_path)]
        cli_main([*args, *QUIET], model_class=MaskedAutoencoder)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "predicts no classes" in err and not list(tmp_path.iterdir())
    run = runs["split1"].parents[1]
    before = _files(run)
    with pytest.raises(SystemExit) as exit_info:
        split1 = ["--data.split_seed", "1", "--ckpt_path", str(runs["split1"])]
        cli_main(["test", "--config", DIGITS, *split1, "--log_root", str(run.parents[1])])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "no test split" in err and "the `validate` subcommand" in err
    assert _files(run) == before  # no config.test.yaml, no events file


def test_a_folder_given_as_a_checkpoint_is_called_a_folder(runs, tmp_path: Path, capsys) -> None:
    with pytest.raises(CheckpointError, match="is a folder, not a checkpoint file"):
        read_checkpoint(runs["split1"].parent)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(
            ["validate", "--config", DIGITS, "--ckpt_path", str(runs["split1"].parent), "--log_root", str(tmp_path)]
        )
    assert exit_info.value.code == 2 and "is a folder" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_corrupt_image_stops_the_run_and_leaves_no_folder(tmp_path: Path, capsys) -> None:

    write_image_folder(tmp_path / "images", classes=2, per_class=4)
    (tmp_path / "images" / "val" / "class_0" / "1.png").write_bytes(b"\x89PNG not really")
    config = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
    args = ["fit", "--config", config, "--data.root", str(tmp_path / "images"), "--data.num_workers", "0"]
    with pytest.raises(SystemExit) as exit_info:
        cli_main([*args, "--log_root", str(tmp_path / "logs"), *SHORT])
    assert exit_info.value.code == 2 and "cannot read image" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())


def test_a_data_line_lists_its_settings_without_an_empty_first_one() -> None:
    from crate.interpret.loading import describe_data

    folder = {"class_path": "crate.lit.ImageFolderDataModule", "init_args": {"root": "data/x", "img_size": 32}}
    assert describe_data(folder) == "ImageFolderDataModule(root=data/x)"


def test_evaluation_settings_that_choose_no_images_are_the_run_s_split_and_leave_the_data_line(
    tmp_path: Path, capsys
) -> None:
    """An evaluation is refused data that holds out other images than its run (the digits' ``split_seed``) and
    takes settings that only read, batch, mix or pad the images otherwise as the run's split (they were refused as
    another split, wrongly); a card's data line names only what chooses the images. A setting the DataModule
    does not take is one line naming it and the ones it takes; data of another image size than the model is
    refused by ``crate.interpret`` before its evaluation."""
    from crate.run.held_out import datamodule_from_config, describe_data, resolve_data

    digits = {"class_path": "crate.lit.DigitsDataModule", "init_args": {"img_size": 16, "split_seed": 0}}
    with pytest.raises(ValueError, match=r"holds out other images .*\(split_seed: run 0, asked 1\)"):
        resolve_data(None, digits, {"split_seed": 1})
    recorded = {"root": "data/x", "img_size": 32, "fixed_eval_shape": False, "drop_last": True, "store_dir": None}
    stored = {"class_path": "crate.lit.StoredImageFolderDataModule", "init_args": dict(recorded, mixing=None)}
    for asked in ({"fixed_eval_shape": True}, {"img_size": 24}, {"drop_last": False}, {"store_dir": "s"}):
        assert resolve_data(None, stored, asked)["init_args"] == {**stored["init_args"], **asked}
    assert describe_data(stored) == "StoredImageFolderDataModule(root=data/x)"
    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    folder = {"class_path": "crate.lit.ImageFolderDataModule", "init_args": {"root": str(tmp_path / "images")}}
    model = timm.create_model("crate_nano_patch4_32", num_classes=2)
    with pytest.raises(ValueError, match=r"^ImageFolderDataModule takes no setting drop_last; its settings: aug"):
        datamodule_from_config({**folder, "init_args": {**folder["init_args"], "drop_last": True}}, model)
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {**folder, "init_args": {**folder["init_args"], "img_size": 24}}}))
    out, weights = tmp_path / "report", tmp_path / "weights.safetensors"
    safetensors.torch.save_file(model.state_dict(), str(weights))  # 32 px, two classes, no class names
    with pytest.raises(SystemExit) as exit_info:
        interpret_main(
            ["--model", "crate_nano_patch4_32", "--checkpoint", str(weights), "--data", str(config), "--out", str(out)]
        )
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and not out.exists() and len(error.splitlines()) == 1
    assert "crate_nano_patch4_32 takes images of (3, 32, 32)" in error and "gives (3, 24, 24)" in error


def test_a_report_of_a_network_without_transformer_blocks_is_one_line_before_its_data(tmp_path: Path, capsys) -> None:
    weights, out = tmp_path / "resnet.safetensors", tmp_path / "report"
    safetensors.torch.save_file(timm.create_model("resnet10t", num_classes=2).state_dict(), str(weights))
    with pytest.raises(SystemExit) as exit_info:
        interpret_main(["--model", "resnet10t", "--checkpoint", str(weights), "--out", str(out)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and not out.exists() and len(error.splitlines()) == 1
    assert "ResNet has no `blocks` sequence of transformer blocks" in error


def test_a_run_s_data_is_rebuilt_without_the_images_it_was_asked_to_predict(tmp_path: Path) -> None:
    """``predict_root`` is what one predict call reads, not the data a run trained on and held out: a data config
    that records one (given at fit) rebuilds the run's data though that folder is gone, and the folder module
    itself refuses a missing one in one line."""
    from crate.lit import ImageFolderDataModule
    from crate.run.held_out import datamodule_from_config

    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    gone = str(tmp_path / "deleted_since")
    init_args = {"root": str(tmp_path / "images"), "img_size": 32, "num_workers": 0, "predict_root": gone}
    config = {"class_path": "crate.lit.ImageFolderDataModule", "init_args": init_args}
    model = timm.create_model("crate_nano_patch4_32", num_classes=2)
    assert len(datamodule_from_config(config, model).val_set) == 4
    with pytest.raises(ValueError, match=f"--data.predict_root {gone} is not a folder"):
        ImageFolderDataModule(**init_args)


def test_a_resume_may_name_other_images_to_predict_but_not_another_recipe() -> None:
    from crate.run.resume_check import _FREE_DATA_SETTINGS

    recorded = {"root": "a", "predict_root": None, "predict_split": "val", "batch_size": 8}
    current = {"root": "b", "predict_root": "new_images", "predict_split": "test", "batch_size": 16}
    assert recipe_changes(recorded, current, _FREE_DATA_SETTINGS) == ["batch_size 8 -> 16"]
