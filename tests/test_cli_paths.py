"""train.py, crate.interpret and crate.export on the paths a user takes: foreign, corrupt and good
checkpoints, predict and test, signals, version folders, config typos and bad dataset files."""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import yaml
from conftest import REPO, run_in_process, write_cifar10_like_folder, write_image_folder
from PIL import Image

from crate.export import main as export_main
from crate.lit.ckpt_path import resolve_checkpoint
from crate.lit.data.folder import DataError, ImageFolderDataModule, load_rgb_image
from crate.models import read_checkpoint

pytestmark = pytest.mark.slow  # trainings and the signal subprocesses: `make test-fast` leaves these out

DEFAULT = str(REPO / "configs" / "crate_nano_digits.yaml")
VIT = str(REPO / "configs" / "vit_nano_digits.yaml")
QUICK = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory) -> Path:
    """A short ViT-twin run (in this process: what the tests read is its files); returns its version folder."""
    root = tmp_path_factory.mktemp("vit")
    _ok(run_in_process("fit", "--config", VIT, *QUICK, *QUIET, "--log_root", str(root)))
    return root / "vit_nano_digits" / "version_0"


def test_a_checkpoint_of_another_architecture_is_refused_not_swapped_in(tmp_path: Path, vit_run: Path) -> None:
    ckpt = str(vit_run / "checkpoints" / "last.ckpt")
    for command in ("validate", "fit"):
        args = (command, "--config", DEFAULT, *QUICK, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", ckpt)
        proc = run_in_process(*args)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "holds vit_nano_patch4_32" in proc.stderr and "this config builds crate_nano_patch4_32" in proc.stderr
        assert "--model.model_name vit_nano_patch4_32" in proc.stderr
    assert not (tmp_path / "crate_nano_digits").exists() or not any((tmp_path / "crate_nano_digits").iterdir())


@pytest.mark.parametrize("how", ["truncated", "not a checkpoint"])
def test_a_corrupt_checkpoint_given_by_path_is_a_one_line_error(tmp_path: Path, vit_run: Path, how: str) -> None:
    bad = tmp_path / "bad.ckpt"
    good = (vit_run / "checkpoints" / "last.ckpt").read_bytes()
    bad.write_bytes(good[:2000] if how == "truncated" else b"hello, not a checkpoint")
    proc = run_in_process("validate", "--config", VIT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", str(bad))
    assert proc.returncode == 2
    assert "corrupt or truncated, or not a torch checkpoint" in proc.stderr
    assert "It was left in place, and no other checkpoint is in its folder." in proc.stderr  # bad.ckpt is alone
    assert "Traceback" not in proc.stderr


def test_validate_logs_into_the_checkpoint_s_own_run_apart_from_its_training_history(
    tmp_path: Path, vit_run: Path, caplog
) -> None:
    """Lightning logs an evaluation at epoch 0, step 0: in the run's metrics.csv (and TensorBoard curve) the
    trained weights' accuracy read as the untrained start's, and the evaluation's hparams.yaml replaced the
    run's. It logs into the run's ``validate/`` folder; the run's own files stay as they were."""
    shutil.copytree(vit_run.parent, tmp_path / "vit_nano_digits")
    run = tmp_path / "vit_nano_digits" / "version_0"
    shutil.rmtree(run / "validate", ignore_errors=True)  # another test's evaluation of the run
    own = {name: (run / name).read_bytes() for name in ("metrics.csv", "hparams.yaml", "config.yaml")}
    ckpt = str(run / "checkpoints" / "last.ckpt")
    lr = ["--model.lr", "0.123", "--trainer.limit_val_batches", "2"]  # lr: a setting the run did not have
    with caplog.at_level(logging.INFO):
        _ok(run_in_process("validate", "--config", VIT, *QUIET, *lr, "--log_root", str(tmp_path), "--ckpt_path", ckpt))
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]
    assert {name: (run / name).read_bytes() for name in own} == own
    with (run / "validate" / "metrics.csv").open() as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("val/acc")]
    with (run / "metrics.csv").open() as handle:
        fit = [row for row in csv.DictReader(handle) if row.get("val/acc")]
    assert len(rows) == 1 and len(fit) == 1  # the fit validated once (one epoch), in its own file
    # the same weights and data: the evaluation reproduces the fit's own last figure
    assert float(rows[0]["val/acc"]) == pytest.approx(float(fit[0]["val/acc"]), abs=1e-6)
    assert list((run / "validate").glob("events.out.tfevents.*"))
    assert yaml.safe_load((run / "validate" / "config.yaml").read_text())["model"]["lr"] == 0.123
    assert f"logged in {run / 'validate'}" in caplog.text


def test_evaluating_a_run_under_the_default_relative_root_does_not_say_it_moved(tmp_path: Path, monkeypatch) -> None:
    """A run trained under ./logs records its checkpoint folder as ``logs/...``; validate and predict name it as
    given (absolute, relative), and Lightning warned that the run moved and dropped its best score. A moved run
    whose files moved with it is read in its new place; one whose best file is gone still gets the warning (the
    check can fail)."""
    import warnings

    monkeypatch.chdir(tmp_path)
    _ok(run_in_process("fit", "--config", VIT, *QUICK, *QUIET))
    checkpoints = "vit_nano_digits/version_0/checkpoints"
    states = torch.load(f"logs/{checkpoints}/last.ckpt", weights_only=False)["callbacks"]
    assert {s["dirpath"] for s in states.values() if "dirpath" in s} == {f"logs/{checkpoints}"}

    def moved_warnings(*args: str) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _ok(run_in_process(*args, "--config", VIT, *QUIET))
        return [str(w.message) for w in caught if "dirpath has changed" in str(w.message)]

    assert moved_warnings("validate", "--ckpt_path", "best") == []
    assert moved_warnings("predict", "--ckpt_path", f"logs/{checkpoints}/last.ckpt") == []
    assert moved_warnings("validate", "--ckpt_path", str(tmp_path / "logs" / checkpoints / "last.ckpt")) == []
    shutil.move("logs", "moved")
    assert moved_warnings("validate", "--ckpt_path", f"moved/{checkpoints}/last.ckpt") == []
    for best in Path("moved", checkpoints).glob("best-*.ckpt"):
        best.unlink()
    assert moved_warnings("validate", "--ckpt_path", f"moved/{checkpoints}/last.ckpt") != []


@pytest.mark.parametrize("where", ["the same folder spelled absolute", "the folder moved"])
def test_a_resume_that_finds_the_run_another_way_keeps_its_best_checkpoint(
    tmp_path: Path, monkeypatch, where: str
) -> None:
    """Trained under ./logs, resumed with --log_root as the same folder's absolute path, or after the run's
    folder moved: Lightning compares the recorded folder as a string, and without SameFolderCheckpoints it forgot
    the best score, so the first epoch after the resume became the run's best file. The recorded best is set to
    1.0 here, which no later epoch beats: the best file must stay the one recorded, and no other may be written."""
    monkeypatch.chdir(tmp_path)
    _ok(run_in_process("fit", "--config", VIT, *QUICK, *QUIET))
    checkpoints = tmp_path / "logs" / "vit_nano_digits" / "version_0" / "checkpoints"
    state = torch.load(checkpoints / "last.ckpt", weights_only=False)
    (best_state,) = [s for s in state["callbacks"].values() if s.get("monitor") == "val/acc"]
    best_state["best_model_score"] = torch.tensor(1.0)
    best_state["best_k_models"] = {best_state["best_model_path"]: torch.tensor(1.0)}
    torch.save(state, checkpoints / "last.ckpt")
    recorded = Path(best_state["best_model_path"]).name
    root = tmp_path / "logs"
    if where == "the folder moved":
        root = tmp_path / "elsewhere" / "runs"
        shutil.move(tmp_path / "logs", root)
        checkpoints = root / "vit_nano_digits" / "version_0" / "checkpoints"
    resumed = run_in_process(
        "fit",
        "--config",
        VIT,
        *QUICK,
        *QUIET,
        "--trainer.max_epochs",
        "2",
        "--log_root",
        str(root),
        "--ckpt_path",
        "last",
    )
    _ok(resumed)
    assert sorted(p.name for p in checkpoints.glob("best-*.ckpt")) == [recorded]
    after = torch.load(checkpoints / "last.ckpt", weights_only=False)["callbacks"]
    assert [Path(s["best_model_path"]).name for s in after.values() if s.get("monitor") == "val/acc"] == [recorded]


def test_ckpt_path_best_takes_the_file_the_run_recorded_as_best_in_a_new_process(tmp_path: Path, vit_run: Path) -> None:
    """Lightning knows "best" only in the process that trained; the run's last checkpoint records it."""
    states = torch.load(vit_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["callbacks"]
    recorded = [Path(s["best_model_path"]) for s in states.values() if s.get("monitor") == "val/acc"]
    assert len(recorded) == 1 and recorded[0].name.startswith("best-")
    root = vit_run.parent.parent
    assert resolve_checkpoint("best", str(root), "vit_nano_digits", "validate") == str(recorded[0])
    copy = tmp_path / "copy"  # a copied run takes its own file, not the original's
    shutil.copytree(vit_run.parent, copy / "vit_nano_digits", symlinks=True)
    best = copy / "vit_nano_digits" / "version_0" / "checkpoints" / recorded[0].name
    assert resolve_checkpoint("best", str(copy), "vit_nano_digits", "test") == str(best)
    by_name = run_in_process("validate", "--config", VIT, *QUIET, "--log_root", str(copy), "--ckpt_path", "best")
    by_path = run_in_process("validate", "--config", VIT, *QUIET, "--log_root", str(copy), "--ckpt_path", str(best))
    _ok(by_name)
    _ok(by_path)
    scores = [re.findall(r"val/acc\s+(\d\.\d+)", proc.stdout) for proc in (by_name, by_path)]
    assert scores[0] and scores[0] == scores[1]


def test_last_and_best_of_a_run_s_own_config_are_that_run_s_not_a_later_version_s(
    tmp_path: Path, vit_run: Path
) -> None:
    """``--config RUN/version_0/config.yaml --ckpt_path best`` names version 0's best, even where a later
    version of the run exists (it took the newest version's, and wrote its predictions there)."""
    runs = tmp_path / "vit_nano_digits"
    shutil.copytree(vit_run, runs / "version_0", symlinks=True)
    shutil.copytree(vit_run, runs / "version_1", symlinks=True)
    for version in ("version_0", "version_1"):  # an earlier test's evaluation of the run
        shutil.rmtree(runs / version / "validate", ignore_errors=True)
    later = runs / "version_1" / "checkpoints" / "last.ckpt"
    os.utime(later.resolve(), (time.time() + 60, time.time() + 60))  # version 1 is the newest
    best = [p.name for p in (runs / "version_0" / "checkpoints").glob("best-*.ckpt")]
    assert len(best) == 1
    own = [str(runs / "version_0" / "config.yaml")]
    assert resolve_checkpoint("best", str(tmp_path), "vit_nano_digits", "test", own) == str(
        runs / "version_0" / "checkpoints" / best[0]
    )
    assert resolve_checkpoint("last", str(tmp_path), "vit_nano_digits", "test", own).startswith(str(runs / "version_0"))
    assert resolve_checkpoint("last", str(tmp_path), "vit_nano_digits", "test", [VIT]) == str(later)  # as before
    # the config an evaluation of version 0 wrote in its validate/ folder names version 0 too
    evaluated = runs / "version_0" / "validate"
    evaluated.mkdir()
    shutil.copy(own[0], evaluated / "config.yaml")
    assert resolve_checkpoint("last", str(tmp_path), "vit_nano_digits", "test", [str(evaluated / "config.yaml")]) == (
        resolve_checkpoint("last", str(tmp_path), "vit_nano_digits", "test", own)
    )
    shutil.rmtree(evaluated)
    plain = tmp_path / "mine"  # a config of the user's own beside a checkpoints/ folder: not a run's own
    shutil.copytree(runs / "version_0", plain, symlinks=True)
    assert resolve_checkpoint("last", str(tmp_path), "vit_nano_digits", "test", [str(plain / "config.yaml")]) == str(
        later
    )
    config = own[0]
    _ok(run_in_process("validate", "--config", config, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", "best"))
    assert (runs / "version_0" / "validate" / "config.yaml").is_file()  # it logged into the run it evaluated
    assert not (runs / "version_1" / "validate").exists()
    # a run moved elsewhere, resumed with its own config alone: it goes on in its folder (it started afresh, in a
    # new version under the log_root its config names)
    moved = tmp_path / "moved" / "vit_nano_digits" / "version_0"
    shutil.copytree(runs / "version_0", moved, symlinks=True)
    resume = ["fit", "--config", str(moved / "config.yaml"), *QUIET, "--trainer.max_epochs", "2"]
    _ok(run_in_process(*resume, "--trainer.limit_train_batches", "3", "--ckpt_path", "last"))
    with (moved / "metrics.csv").open() as handle:
        assert {row["epoch"] for row in csv.DictReader(handle) if row.get("val/acc")} >= {"0", "1"}
    assert sorted(p.name for p in moved.parent.iterdir()) == ["version_0"]


def test_a_resume_from_an_earlier_checkpoint_leaves_one_history_in_metrics_csv(tmp_path: Path, vit_run: Path) -> None:
    """The run goes on to epoch 1, then is resumed from its epoch-0 file: metrics.csv holds epoch 1 once (the
    second continuation's), and the first continuation's rows are in metrics.superseded.csv, not lost."""
    shutil.copytree(vit_run.parent, tmp_path / "vit_nano_digits")
    run = tmp_path / "vit_nano_digits" / "version_0"
    epoch0 = run / "checkpoints" / "epoch0.ckpt"
    shutil.copy(run / "checkpoints" / "last.ckpt", epoch0)

    def val_epochs(name: str) -> list[str]:
        with (run / name).open() as handle:
            return [row["epoch"] for row in csv.DictReader(handle) if row.get("val/acc")]

    before = val_epochs("metrics.csv")  # the fit's epoch 0, and any validate of its file the other tests ran
    assert before and set(before) == {"0"}
    again = ["fit", "--config", VIT, *QUICK[2:], *QUIET, "--log_root", str(tmp_path), "--trainer.max_epochs", "2"]
    _ok(run_in_process(*again, "--ckpt_path", "last"))
    _ok(run_in_process(*again, "--ckpt_path", str(epoch0)))
    assert val_epochs("metrics.csv") == [*before, "1"]
    assert val_epochs("metrics.superseded.csv") == ["1"]


@pytest.mark.parametrize("case", ["no best recorded", "best file gone"])
def test_ckpt_path_best_without_a_best_file_is_one_line(tmp_path: Path, vit_run: Path, case: str) -> None:
    held = torch.load(vit_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    for state in held["callbacks"].values():
        if isinstance(state, dict) and state.get("monitor"):
            state["best_model_path"] = "" if case == "no best recorded" else str(tmp_path / "elsewhere" / "best-x.ckpt")
    folder = tmp_path / "vit_nano_digits" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save(held, folder / "last.ckpt")
    proc = run_in_process("test", "--config", VIT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", "best")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    said = "records no best checkpoint" if case == "no best recorded" else "best checkpoint, and it is gone"
    assert said in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
@pytest.mark.parametrize("which", ["last", "best"])
def test_an_evaluation_of_last_or_best_with_no_run_is_refused_not_run_untrained(
    tmp_path: Path, subcommand: str, which: str
) -> None:
    proc = run_in_process(subcommand, "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", which)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = f"train.py: error: --ckpt_path {which}: no checkpoint of the run under {tmp_path / 'crate_nano_digits'}"
    assert proc.stderr.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in proc.stderr and not list(tmp_path.rglob("*.csv"))


def test_test_refuses_data_without_a_test_split_and_uses_a_real_one(tmp_path: Path, vit_run: Path) -> None:
    ckpt = str(vit_run / "checkpoints" / "last.ckpt")
    proc = run_in_process("test", "--config", VIT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", ckpt)
    assert proc.returncode != 0 and "has no test split" in proc.stderr and "validate" in proc.stderr
    assert not list(tmp_path.glob("vit_nano_digits/version_*"))  # the failed run left no empty folder
    write_image_folder(tmp_path / "images", classes=2, per_class=3)
    assert ImageFolderDataModule(str(tmp_path / "images")).test_set is None
    (tmp_path / "images" / "val").rename(tmp_path / "images" / "test")
    write_image_folder(tmp_path / "other", classes=2, per_class=2)
    (tmp_path / "other" / "val").rename(tmp_path / "images" / "val")
    data = ImageFolderDataModule(str(tmp_path / "images"), img_size=32, num_workers=0)
    data.setup("fit")
    assert len(data.test_set) == 6 and len(data.val_set) == 4


def test_predict_writes_a_readable_file(tmp_path: Path, vit_run: Path) -> None:
    ckpt = str(vit_run / "checkpoints" / "last.ckpt")
    out = tmp_path / "predictions.csv"
    proc = run_in_process(
        "predict", "--config", VIT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", ckpt,
        "--prediction_writer.output", str(out),
    )  # fmt: skip
    _ok(proc)
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 360  # the validation split of digits
    assert {row["label"] for row in rows} == {str(c) for c in range(10)}
    assert all(0.0 <= float(row["probability"]) <= 1.0 and 0 <= int(row["predicted"]) < 10 for row in rows)
    assert all(row["predicted_name"] == row["predicted"] for row in rows)  # the digits' names are the digits
    assert all(row["label_name"] == row["label"] for row in rows)
    for bar in ("false", "true"):  # where it went, on a line of its own (it followed the bar's last state)
        proc = run_in_process(
            "predict", "--config", VIT, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", ckpt,
            "--prediction_writer.output", str(out), "--trainer.enable_progress_bar", bar,
        )  # fmt: skip
        _ok(proc)
        assert f"wrote 360 predictions to {out}" in re.split(r"[\r\n]", proc.stdout), proc.stdout[-500:]


def test_predictions_of_part_of_the_split_say_how_much(tmp_path: Path, capsys) -> None:
    """--trainer.limit_predict_batches 2 wrote 128 of the 360 validation images' predictions, said as "wrote 128
    predictions" alone: the line says of how many, and which setting kept the rest out."""
    from crate.lit import cli_main

    args = ["--config", DEFAULT, *QUIET, "--log_root", str(tmp_path)]
    cli_main(["fit", *args, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1"])
    cli_main(["predict", *args, "--ckpt_path", "last", "--trainer.limit_predict_batches", "2"])
    out = tmp_path / "crate_nano_digits" / "version_0" / "predict" / "predictions.csv"
    with out.open() as handle:
        assert len(list(csv.DictReader(handle))) == 128  # 2 batches of 64
    said = f"wrote 128 predictions to {out} (128 of its 360 images: --trainer.limit_predict_batches)"
    assert said in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("signum, said", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_signal_exits_with_the_shells_status_for_it_after_its_checkpoint(tmp_path: Path, signum, said) -> None:
    """SIGTERM exits 143 and Ctrl-C (SIGINT) 130, as a shell reports a process those signals ended, so a script
    can tell an interrupted run (resumable from its checkpoint) from a failed one."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    args = [sys.executable, str(REPO / "train.py"), "fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path)]
    # a shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored: the child
    # gets the default disposition a terminal's foreground process has
    proc = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("crate_nano_digits/version_0/metrics.csv")):
        time.sleep(0.5)  # metrics.csv appears at the first logged steps: training is under way
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert f"stopped by {said}; resume with --ckpt_path last" in stderr
    assert list(tmp_path.glob("crate_nano_digits/version_0/checkpoints/interrupted-*.ckpt"))


def test_a_fast_dev_run_writes_no_checkpoint_and_names_none(tmp_path: Path, monkeypatch, caplog) -> None:
    """Lightning's fast_dev_run runs one batch with checkpointing off; its save_last would still write
    ./checkpoints/last.ckpt at the end of fit (no logger folder), into whatever folder the command ran from."""
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO):
        _ok(run_in_process("fit", "--config", DEFAULT, *QUIET, "--trainer.fast_dev_run", "true", "--log_root", "logs"))
    assert sorted(p.name for p in tmp_path.rglob("*.ckpt")) == []
    assert "fit ended after 1 epoch, 1 step" in caplog.text  # the run's summary, which names no checkpoint
    assert "last checkpoint" not in caplog.text


def test_trainer_default_root_dir_is_where_the_runs_go_unless_log_root_says_otherwise(
    tmp_path: Path, monkeypatch
) -> None:
    """Lightning's --trainer.default_root_dir is the folder of its runs; the zoo's loggers write under --log_root
    (default ./logs), which took the run there instead, without a word. Both given as two folders: one line."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    fast = [*QUICK, *QUIET, "--baseline.enabled", "false"]
    _ok(run_in_process("fit", "--config", DEFAULT, *fast, "--trainer.default_root_dir", str(root)))
    run = root / "crate_nano_digits" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").exists() and (run / "metrics.csv").exists()
    assert not (tmp_path / "logs").exists()
    _ok(
        run_in_process(
            "validate", "--config", DEFAULT, *QUIET, "--trainer.default_root_dir", str(root), "--ckpt_path", "last"
        )
    )
    assert (run / "validate" / "config.yaml").exists()  # --ckpt_path last was found under the same root
    proc = run_in_process("fit", "--config", DEFAULT, *fast, "--trainer.default_root_dir", str(root), "--log_root", "x")
    assert proc.returncode == 2 and not (tmp_path / "x").exists()
    assert f"--trainer.default_root_dir {root} and --log_root x name two folders for the runs" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_typo_in_a_config_key_is_a_short_error(tmp_path: Path) -> None:
    proc = run_in_process("fit", "--config", DEFAULT, "--model.lrr", "0.1", "--log_root", str(tmp_path))
    assert proc.returncode == 2
    assert "lrr" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 6


@pytest.mark.parametrize(
    "setting, message",
    [
        (["--data.augmentation.hflip", "2"], "hflip must lie in [0, 1], got 2.0"),
        (["--data.augmentation.auto_augment", "randfoo"], "unknown auto_augment policy 'randfoo'"),
        (["--data.in_chans", "2"], "in_chans must be 1 or 3 for digits, got 2"),
        (["--model.ema_decay", "2"], "ema_decay must lie in (0, 1), got 2.0"),
        (["--model.lr", "-1"], "lr must be > 0, got -1.0"),
        (["--model.weight_decay", "-0.1", "--model.layer_decay", "0"], "weight_decay must be >= 0, got -0.1"),
        (["--model.betas", "[0.9, 1.5]"], "betas must be two values in [0, 1), got (0.9, 1.5)"),
        (["--model.label_smoothing", "1.5"], "label_smoothing must lie in [0, 1), got 1.5"),
        (["--model.mixup_alpha", "-1"], "mixup_alpha and cutmix_alpha must be >= 0 (0: off), got -1.0 and 0.0"),
        # the model's settings taken from the data: jsonargparse said "int | None is not callable" of img_size
        (["--model.img_size", "24"], "--model.img_size is taken from the data: set --data.img_size instead"),
        (["--model.in_chans", "3"], "--model.in_chans is taken from the data: set --data.in_chans instead"),
        (["--model.num_classes", "5"], "--model.num_classes is taken from the data (the number of its classes)"),
        # a TypeError traceback: create_classifier() got multiple values for argument 'img_size'
        (["--model.model_kwargs", "{img_size: 24}"], "model_kwargs sets img_size, which the model is built with"),
        ("empty class folder", "class folders without images"),
    ],
)
def test_a_value_a_constructor_refuses_is_one_line_and_exit_2(tmp_path: Path, setting, message: str) -> None:
    """A DataModule's refusal reaches the user as its own message, not jsonargparse's union dump."""
    if setting == "empty class folder":
        write_image_folder(tmp_path / "images", classes=2, per_class=2)
        (tmp_path / "images" / "train" / "class_2").mkdir()
        config = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
        setting = ["--data.root", str(tmp_path / "images")]
    else:
        config = DEFAULT
    proc = run_in_process("fit", "--config", config, *setting, "--log_root", str(tmp_path / "logs"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("train.py: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").rglob("*.ckpt"))


@pytest.mark.parametrize(
    "case, message",
    [
        ("batch size 0", "batch_size must be >= 1"),
        ("endless run", "--trainer.max_epochs -1 trains without an end"),
        ("log root under a file", "is a file, not a folder"),
        ("one class", "a classifier needs two or more classes, and the data has 1"),
        ("no hpc checkpoint", '--ckpt_path: `.fit(ckpt_path="hpc")` is set but no HPC checkpoint was found'),
        ("a file as the model name", "is a file, not a model name: name its architecture (--model.model_name vit_"),
        (
            "a hub folder as the model name",
            "is a hub folder, not a model name: name its architecture and start from its weights",
        ),
    ],
)
def test_former_tracebacks_are_one_line_and_exit_2(tmp_path: Path, case: str, message: str) -> None:
    logs = tmp_path / "logs"
    config, setting = DEFAULT, []
    if case == "batch size 0":
        setting = ["--data.batch_size", "0"]
    elif case == "endless run":
        setting = ["--trainer.max_epochs", "-1"]
    elif case == "log root under a file":
        (tmp_path / "file").write_text("not a folder")
        logs = tmp_path / "file" / "logs"
    elif case == "no hpc checkpoint":  # Lightning's value for a SLURM requeue's checkpoint, with none there
        setting = ["--ckpt_path", "hpc"]
    elif case == "a file as the model name":  # the architecture named is the one the file records
        setting = ["--model.model_name", str(REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors")]
    elif case == "a hub folder as the model name":  # timm's local-dir: the flags that take its architecture and file
        hub = tmp_path / "hub"
        model = timm.create_model("vit_nano_patch4_32", in_chans=1, img_size=16)
        timm.models.save_for_hf(model, str(hub), safe_serialization=True)
        setting = ["--model.model_name", f"local-dir:{hub}"]
        message += f" (--model.model_name vit_nano_patch4_32 --model.pretrained_file {hub / 'model.safetensors'})"
    else:
        write_image_folder(tmp_path / "images", classes=1, per_class=2)
        config, setting = (
            str(REPO / "configs" / "crate_nano_imagefolder.yaml"),
            ["--data.root", str(tmp_path / "images")],
        )
    proc = run_in_process("fit", "--config", config, *setting, *QUIET, "--log_root", str(logs))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: error:") and message in lines[0], lines
    assert not list(tmp_path.rglob("*.ckpt"))


def test_predict_writes_into_the_checkpoint_s_own_run_and_names_every_class(tmp_path: Path) -> None:
    """A checkpoint under another --log_root: its predictions.csv lands in its own run folder's predict/ (which
    keeps the run's own hparams.yaml as it was); a val folder that lacks a class is warned of, and a prediction of
    that class still carries its name."""
    write_image_folder(tmp_path / "images", classes=3, per_class=2)
    for image in (tmp_path / "images" / "val" / "class_2").iterdir():
        image.unlink()
    (tmp_path / "images" / "val" / "class_2").rmdir()
    folder = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
    data = ["--data.root", str(tmp_path / "images"), "--data.num_workers", "0", "--data.img_size", "32"]
    with pytest.warns(UserWarning, match=r"val lacks 1 of train/'s 3 classes \(class_2\)"):
        proc = run_in_process("fit", "--config", folder, *data, *QUICK, *QUIET, "--log_root", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = tmp_path / "runs" / "crate_nano_imagefolder" / "version_0"
    ckpt = str(run / "checkpoints" / "last.ckpt")
    hparams = (run / "hparams.yaml").read_bytes()
    elsewhere = tmp_path / "elsewhere"
    proc = run_in_process(
        "predict", "--config", folder, *data, *QUIET, "--log_root", str(elsewhere), "--ckpt_path", ckpt
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not elsewhere.exists() and (run / "hparams.yaml").read_bytes() == hparams
    predicted = run / "predict"
    with (predicted / "predictions.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and all(row["predicted_name"] == f"class_{row['predicted']}" for row in rows)
    # each row's label names the folder its file lies in
    assert all(row["label_name"] == Path(row["file"]).parent.name for row in rows)
    # the test split's predictions go beside the validation split's, which stay as they were
    shutil.copytree(tmp_path / "images" / "val", tmp_path / "images" / "test")
    before = (predicted / "predictions.csv").read_bytes()
    proc = run_in_process(
        "predict", "--config", folder, *data, *QUIET, "--data.predict_split", "test", "--ckpt_path", ckpt
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (predicted / "predictions.csv").read_bytes() == before
    with (predicted / "predictions_test.csv").open() as handle:
        files = [Path(row["file"]) for row in csv.DictReader(handle)]
    assert sorted(files) == sorted((tmp_path / "images" / "test").glob("*/*.png"))
    # new images without class folders, at any depth: no label, and each predicted as the same file in val/ was
    new = tmp_path / "new_images"
    (new / "deeper").mkdir(parents=True)
    shutil.copy(files[0], new / "first.png")
    shutil.copy(files[-1], new / "deeper" / "last.png")
    proc = run_in_process(
        "predict", "--config", folder, *data, *QUIET, "--data.predict_root", str(new), "--ckpt_path", ckpt
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with (predicted / "predictions_new_images.csv").open() as handle:
        unlabelled = list(csv.DictReader(handle))
    with (predicted / "predictions_test.csv").open() as handle:
        of_file = {Path(row["file"]).relative_to(tmp_path / "images" / "test"): row for row in csv.DictReader(handle)}
    assert [row["file"] for row in unlabelled] == [str(new / "first.png"), str(new / "deeper" / "last.png")]
    for row, same in zip(unlabelled, (files[0], files[-1]), strict=True):
        known = of_file[same.relative_to(tmp_path / "images" / "test")]
        assert row["label"] == row["label_name"] == ""
        assert (row["predicted"], row["probability"]) == (known["predicted"], known["probability"])
    empty = tmp_path / "no_images"
    empty.mkdir()
    proc = run_in_process(
        "predict", "--config", folder, *data, *QUIET, "--data.predict_root", str(empty), "--ckpt_path", ckpt
    )
    assert proc.returncode == 2 and f"--data.predict_root {empty} holds no image files" in proc.stderr


def test_a_prediction_file_under_a_file_is_refused_before_predicting(tmp_path: Path, vit_run: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    output = tmp_path / "file" / "predictions.csv"
    ckpt = str(vit_run / "checkpoints" / "last.ckpt")
    proc = run_in_process(
        "predict", "--config", VIT, *QUIET, "--ckpt_path", ckpt, "--prediction_writer.output", str(output)
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"train.py: error: --prediction_writer.output {tmp_path / 'file'}: {tmp_path / 'file'} is a file, not a "
        "folder; give a folder for predictions.csv"
    ]
    assert (tmp_path / "file").read_text() == "not a folder" and not list(vit_run.rglob("predictions*.csv"))


def test_bad_dataset_files_get_clear_errors(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    (tmp_path / "images" / "train" / "class_2").mkdir()
    with pytest.raises(DataError, match=r"class folders without images: .*class_2"):
        ImageFolderDataModule(str(tmp_path / "images"))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    with pytest.raises(DataError, match=r"cannot read image .*broken.png"):
        load_rgb_image(str(broken))
    deep = np.linspace(0, 65535, 64, dtype=np.uint16).reshape(8, 8)
    Image.fromarray(deep).save(tmp_path / "deep.png")  # a 16-bit grayscale PNG
    pixels = np.asarray(load_rgb_image(str(tmp_path / "deep.png")))[..., 0]
    expected = np.clip(deep / 65535 * 255 + 0.5, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(pixels, expected)  # scaled, not saturated at 255
    assert len(np.unique(pixels)) > 50


def test_a_run_of_timm_s_own_model_exports_to_files_timm_builds_alone(tmp_path: Path, caplog, capsys) -> None:
    """A ResNet trained with train.py was refused by export ("outside the zoo"). Its file and hub folder now
    build through timm alone, with the run's input, statistics and classes (timm's ImageNet cfg of the
    architecture would resize gray 16-px digits to 176 px in three channels), and its card's accuracy is the one
    train.py validate measures."""
    from crate.lit import ImageClassifier

    resnet = ["--model.model_name", "resnet10t", "--log_root", str(tmp_path), "--baseline.enabled", "false"]
    _ok(run_in_process("fit", "--config", DEFAULT, *QUICK, *QUIET, *resnet))
    run = tmp_path / "crate_nano_digits" / "version_0"
    ckpt = run / "checkpoints" / "last.ckpt"
    with caplog.at_level(logging.INFO):
        _ok(run_in_process("validate", "--config", DEFAULT, *QUIET, *resnet, "--ckpt_path", str(ckpt)))
    with (run / "validate" / "metrics.csv").open() as handle:
        validated = float(next(row["val/acc"] for row in csv.DictReader(handle) if row.get("val/acc")))
    out, hub = tmp_path / "resnet.safetensors", tmp_path / "hub"
    export_main([str(ckpt), "--out", str(out), "--hub-dir", str(hub)])
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["val_images"] == 360 and card["val_accuracy"] == pytest.approx(validated, abs=1e-6)
    assert card["input_size"] == [1, 16, 16] and card["load"].startswith("timm.create_model('resnet10t'")
    assert f"- load (after `import timm`): `{card['load']}`" in out.with_suffix(".md").read_text()  # no zoo needed
    module = ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
    x = torch.randn(3, 1, 16, 16)
    for loaded in (
        eval(card["load"], {"timm": timm}),  # the card's line as a user pastes it
        timm.create_model(f"local-dir:{hub}", pretrained=True),
    ):
        loaded.eval()
        with torch.no_grad():  # the weights train.py validated: the moving average where the run kept one
            expected = module.evaluated_model()(x)
            torch.testing.assert_close(loaded(x), expected, rtol=0, atol=1e-6)
        config = timm.data.resolve_data_config({}, model=loaded)
        recorded = read_checkpoint(ckpt).eval_transform  # what the run made of its images
        assert [tuple(config[key]) for key in ("mean", "std")] == [tuple(recorded["mean"]), tuple(recorded["std"])]
        assert tuple(config["input_size"]) == (1, 16, 16) and config["interpolation"] == recorded["interpolation"]
        assert tuple(loaded.pretrained_cfg["label_names"]) == tuple(str(digit) for digit in range(10))
    assert "license" not in json.loads((hub / "config.json").read_text())["pretrained_cfg"]  # ImageNet weights' own
    # a file whose weights are not the architecture its run names: one line, nothing written
    held = torch.load(ckpt, map_location="cpu", weights_only=False)
    held["state_dict"] = {
        f"model.{k}": v for k, v in timm.create_model("resnet14t", num_classes=10).state_dict().items()
    }
    other = tmp_path / "other.ckpt"
    torch.save(held, other)
    with pytest.raises(SystemExit) as exit_info:
        export_main([str(other), "--out", str(tmp_path / "other.safetensors")])
    assert exit_info.value.code == 2 and not list(tmp_path.glob("other.safetensors*"))
    assert "1 input channel, 16px images (lightning file): its weights do not fit resnet10t" in capsys.readouterr().err


def test_interpret_preprocesses_image_folders_as_training_did(tmp_path: Path) -> None:
    import json

    from crate.interpret import load_data, load_model
    from crate.interpret.__main__ import main as interpret_main

    write_image_folder(tmp_path / "images", classes=3, per_class=6)
    config = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
    data = ["--data.root", str(tmp_path / "images"), "--data.num_workers", "0"]
    _ok(
        run_in_process(
            "fit", "--config", config, *data, *QUIET, "--trainer.max_epochs", "1", "--log_root", str(tmp_path)
        )
    )
    run = tmp_path / "crate_nano_imagefolder" / "version_0"
    ckpt = str(run / "checkpoints" / "last.ckpt")
    _ok(run_in_process("validate", "--config", config, *data, *QUIET, "--log_root", str(tmp_path), "--ckpt_path", ckpt))
    with (run / "metrics.csv").open() as handle:
        validated = [float(row["val/acc"]) for row in csv.DictReader(handle) if row.get("val/acc")][-1]
    out = tmp_path / "report"
    interpret_main(
        ["--model", "crate_nano_patch4_32", "--checkpoint", ckpt, "--data", config, *data, "--out", str(out)]
        + ["--count-seeds", "3"]
    )
    reported = json.loads((out / "metrics.json").read_text())["crate_nano_patch4_32"]["val_accuracy"]
    assert reported == pytest.approx(validated, abs=1e-6)
    images = load_data(config, load_model("crate_nano_patch4_32", ckpt), overrides={"root": str(tmp_path / "images")})
    assert images.val_images.min() >= -1 - 1e-6 and images.val_images.max() <= 1 + 1e-6  # mean 0.5, std 0.5


@pytest.mark.parametrize("config", sorted((REPO / "configs" / "zoo").glob("*.yaml")), ids=lambda p: p.stem)
def test_zoo_configs_layer_over_the_default_job_and_build_their_model(config: Path, tmp_path: Path) -> None:
    from crate.lit import cli_main

    cli = cli_main(["--config", DEFAULT, "--config", str(config), "--log_root", str(tmp_path)], run=False)
    assert cli.model.hparams.model_name == config.stem
    assert cli.model.model.pretrained_cfg["architecture"] == config.stem
    assert cli.trainer.max_epochs == 150  # the rest is the default job's recipe
    cli.datamodule.setup("fit")
    images = next(iter(cli.datamodule.train_dataloader()))[0]
    assert cli.model(images[:4]).shape == (4, 10)


CIFAR10 = REPO / "configs" / "cifar10.yaml"
GPU_LAYER = REPO / "configs" / "cifar10" / "gpu.yaml"  # a layer over a recipe, not a recipe
CIFAR10_RECIPES = sorted(p for p in (REPO / "configs" / "cifar10").glob("*.yaml") if p != GPU_LAYER)


@pytest.mark.parametrize("config", CIFAR10_RECIPES, ids=lambda p: p.stem)
def test_cifar10_recipes_build_their_model_on_the_store_path(config: Path, tmp_path: Path) -> None:
    """Every CIFAR-10 recipe parses, builds the model it names and trains on stored, batch-augmented images
    (a small folder of 32-pixel images stands in for CIFAR-10)."""

    from crate.lit import MaskedAutoencoder, StoredImageFolderDataModule, cli_main

    write_cifar10_like_folder(tmp_path / "images")
    pretraining = config.stem.endswith("_pretrain")
    layers = ["--config", str(config)] if pretraining else ["--config", str(CIFAR10), "--config", str(config)]
    args = [*layers, "--data.root", str(tmp_path / "images"), "--log_root", str(tmp_path / "logs")]
    cli = cli_main(args, run=False, **({"model_class": MaskedAutoencoder} if pretraining else {}))
    assert isinstance(cli.datamodule, StoredImageFolderDataModule)
    assert cli.model.hparams.model_name == config.stem.removesuffix("_pretrain").removesuffix("_probe")
    assert cli.config.run_name.startswith(cli.model.hparams.model_name + ".cifar10")
    cli.datamodule.setup("fit")
    batch = cli.datamodule.on_after_batch_transfer(next(iter(cli.datamodule.train_dataloader())), 0)
    assert batch[0].dtype == torch.float32 and batch[0].shape[1:] == (3, 32, 32)
    if not pretraining:
        assert cli.model(batch[0][:2]).shape == (2, 10)


@pytest.mark.parametrize("member", ["crate_micro_patch4_32", "crate_nano_patch4_32", "vit_nano_patch4_32"])
def test_the_gpu_layer_turns_a_cifar10_recipe_into_the_one_gpu_recipe(member: str, tmp_path: Path) -> None:
    """configs/cifar10/gpu.yaml over a member's recipe: batch 512 with fixed shapes, the compiled step under
    CUDA graphs, the member's learning rate read at batch 128 (scaled by sqrt(4) = 2 when it trains), the
    member's other settings kept (here on the CPU: the GPU accelerator overridden)."""

    from crate.lit import cli_main

    write_cifar10_like_folder(tmp_path / "images")
    recipe = REPO / "configs" / "cifar10" / f"{member}.yaml"
    layers = ["--config", str(CIFAR10), "--config", str(recipe), "--config", str(GPU_LAYER)]
    args = [*layers, "--data.root", str(tmp_path / "images"), "--log_root", str(tmp_path / "logs")]
    cli = cli_main([*args, "--trainer.accelerator", "cpu"], run=False)
    alone = cli_main(["--config", str(CIFAR10), "--config", str(recipe), *args[6:]], run=False)
    assert cli.datamodule.batch_size == 512 and cli.datamodule.drop_last
    assert cli.model.hparams.compile and cli.model.hparams.compile_mode == "reduce-overhead"
    assert cli.model.hparams.lr_base_size == 128 and cli.model.hparams.lr_base_scale == "sqrt"
    assert cli.model.hparams.lr == alone.model.hparams.lr  # the member's own, read at batch 128
    assert cli.model.hparams.ema_decay == alone.model.hparams.ema_decay
    assert cli.trainer.max_epochs == 200 and cli.datamodule.augmentation == alone.datamodule.augmentation


def _leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """A nested YAML mapping as dotted keys and their values."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize(
    "layer", sorted((REPO / "configs" / "cifar10" / "gpu_window").glob("*.yaml")), ids=lambda p: p.stem
)
def test_a_gpu_window_layer_sets_what_it_names_and_keeps_the_rest(layer: Path, tmp_path: Path) -> None:
    """A queue job's recipe layer, last over a member's one-GPU recipe: every value the file writes is the run's,
    and every setting it does not write is the recipe's without it."""
    import yaml

    from crate.lit import cli_main

    images = write_cifar10_like_folder(tmp_path / "images")
    recipe = REPO / "configs" / "cifar10" / "crate_cct4_3x2_32.yaml"
    base = ["--config", str(CIFAR10), "--config", str(recipe), "--config", str(GPU_LAYER)]
    rest = ["--data.root", str(images), "--log_root", str(tmp_path / "logs"), "--trainer.accelerator", "cpu"]
    with_layer = cli_main([*base, "--config", str(layer), *rest], run=False).config
    without = cli_main([*base, *rest], run=False).config
    written = _leaves(yaml.safe_load(layer.read_text()))
    assert written
    layered = _leaves(with_layer.as_dict())  # a dict setting's entries too (model_kwargs)
    for key, value in written.items():
        assert layered[key] == value, key
    for key, value in _leaves(without.as_dict()).items():
        if key not in written and key not in ("config", "log_root"):  # the files given, and where logs go
            assert layered.get(key) == value, key


def test_a_path_setting_that_starts_with_a_tilde_is_in_the_home_folder(tmp_path: Path, monkeypatch) -> None:
    """``--data.root=~/images`` and ``--log_root=~/runs`` (no shell expands a ~ after '=', nor in a YAML config)
    name folders in the home folder, as the same words with a space would, not a folder named '~' here."""
    home, work = tmp_path / "home", tmp_path / "work"
    write_image_folder(home / "images", classes=2, per_class=2)
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    proc = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_nano_imagefolder.yaml"), "--data.root=~/images",
        "--log_root=~/runs", "--data.num_workers", "0", "--trainer.max_epochs", "1", *QUIET,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (home / "runs" / "crate_nano_imagefolder" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (work / "~").exists() and list(work.iterdir()) == []
    # the package's own commands and data modules read a ~ the same way
    export_main(["~/runs/crate_nano_imagefolder/version_0/checkpoints/last.ckpt", "--out=~/mine.safetensors"])
    assert (home / "mine.safetensors").is_file() and (home / "mine.md").is_file()
    assert ImageFolderDataModule("~/images").root == home / "images"
    assert list(work.iterdir()) == []


def test_a_whole_number_of_batches_is_that_many_batches(tmp_path: Path) -> None:
    """The Trainer reads an int limit as a number of batches and 1.0 as all of them; LightningCLI parses '1' as 1.0,
    so '--trainer.limit_train_batches 1' trained a whole epoch. A whole number, on the command line or in a YAML
    config, is now that many batches, and '1.0' still all of them. The run's saved config.yaml says so too: given
    back as the config of a new run, it trains as many batches as the run it came from."""
    import yaml

    from crate.lit import cli_main

    layer = tmp_path / "limits.yaml"
    layer.write_text(yaml.safe_dump({"trainer": {"limit_val_batches": 1}}))
    common = ["fit", "--config", DEFAULT, "--trainer.max_epochs", "1", "--log_root", str(tmp_path), *QUIET]
    one = cli_main([*common, "--config", str(layer), "--trainer.limit_train_batches=1", "--run_name", "one"])
    assert one.trainer.num_training_batches == 1 and one.trainer.num_val_batches == [1]
    assert one.trainer.global_step == 1
    every = cli_main([*common, "--trainer.limit_train_batches", "1.0", "--run_name", "all"])
    assert every.trainer.num_training_batches == 23 and every.trainer.num_val_batches == [6]  # 1,437 and 360 images
    saved = yaml.safe_load((tmp_path / "one" / "version_0" / "config.yaml").read_text())["trainer"]
    assert (saved["limit_train_batches"], saved["limit_val_batches"]) == (1, 1)
    assert (
        yaml.safe_load((tmp_path / "all" / "version_0" / "config.yaml").read_text())["trainer"]["limit_train_batches"]
        == 1.0
    )
    again = cli_main(["fit", "--config", str(tmp_path / "one" / "version_0" / "config.yaml"), "--run_name", "again"])
    assert again.trainer.num_training_batches == 1 and again.trainer.num_val_batches == [1]


def test_runs_without_a_logger_keep_their_files_in_their_own_folders(tmp_path: Path, monkeypatch, caplog) -> None:
    """With --trainer.logger false Lightning's root is the working directory: every run put its checkpoints in one
    ./checkpoints folder (in this repository, the shipped weights') and its config.yaml beside it, and the second
    run's last.ckpt replaced the first's. Each run keeps its own version folder under --log_root, as with loggers,
    and a resume, a prediction and an evaluation find it there."""
    from crate.lit import cli_main

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    root = tmp_path / "runs"
    args = ["--config", DEFAULT, *QUIET, "--log_root", str(root), "--trainer.logger", "false"]
    limits = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    cli_main(["fit", *args, *limits, "--trainer.max_epochs", "1"])
    cli_main(["fit", *args, *limits, "--trainer.max_epochs", "2"])
    assert not list(work.iterdir())  # nothing in the working directory
    runs = root / "crate_nano_digits"
    steps = [torch.load(runs / f"version_{n}/checkpoints/last.ckpt", weights_only=False)["global_step"] for n in (0, 1)]
    assert steps == [2, 4] and all((runs / f"version_{n}/config.yaml").is_file() for n in (0, 1))
    cli_main(["fit", *args, *limits, "--trainer.max_epochs", "3", "--ckpt_path", "last"])  # the newest run goes on
    assert torch.load(runs / "version_1/checkpoints/last.ckpt", weights_only=False)["global_step"] == 6
    cli_main(["predict", *args, "--ckpt_path", "last"])
    assert (runs / "version_1/predict/predictions.csv").is_file() and not list(work.iterdir())
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    # an evaluation looked for the run's checkpoint records in its own folder (Lightning warned "The dirpath has
    # changed" and forgot them) and said "logged in" a folder where nothing was logged
    with warnings.catch_warnings(record=True) as warned, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        cli_main(["validate", *args, *limits, "--ckpt_path", "best"])
    assert not [w for w in warned if "dirpath has changed" in str(w.message)]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("val of ")]
    assert len(said) == 1 and "best-epoch" in said[0] and "logged in" not in said[0], said


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (["--trainer.val_check_interval", "0"], "--trainer.val_check_interval 0: give a share of each epoch in (0, 1]"),
        (["--trainer.check_val_every_n_epoch", "0"], "--trainer.check_val_every_n_epoch 0: give a number of epochs"),
        (["--trainer.log_every_n_steps", "0"], "--trainer.log_every_n_steps 0: give a number of steps >= 1"),
        (["--trainer.accumulate_grad_batches", "0"], "--trainer.accumulate_grad_batches 0: give a number of batches"),
        (["--trainer.limit_val_batches", "1.5"], "Lightning's Trainer refused the trainer settings (You have passed"),
        (
            ["--trainer.accelerator", "cpu", "--trainer.devices", "-1"],
            "Lightning's Trainer refused the trainer settings (`de",
        ),
        (["--trainer.barebones", "true"], "--trainer.barebones true refuses the logging every step of the zoo's"),
    ],
    ids=[
        "val-check-interval-0",
        "check-val-every-0",
        "log-every-0",
        "accumulate-0",
        "limit-above-1",
        "cpu-devices-1",
        "barebones",
    ],
)
def test_a_trainer_value_out_of_range_is_one_line_naming_it(tmp_path: Path, capsys, setting: list, said: str) -> None:
    """--trainer.val_check_interval 0 (and check_val_every_n_epoch, log_every_n_steps, accumulate_grad_batches 0)
    was a ZeroDivisionError traceback at the first batch; a value Lightning's Trainer refuses read as a setting
    that "cannot run here", as if the machine lacked something (devices -1 on the CPU was a TypeError traceback);
    barebones mode was refused with the reprs of the run's loggers, and would refuse the module's logging."""
    from crate.lit import cli_main

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), *setting])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err[-1].startswith(f"train.py: error: {said}")
    assert not (tmp_path / "crate_nano_digits").exists()


@pytest.mark.parametrize("logger", ["true", "false"])
def test_runs_started_together_each_get_a_version_folder_of_their_own(tmp_path: Path, monkeypatch, logger: str) -> None:
    """Two fits started at once (a sweep launched with &) both took version_0: Lightning's loggers pick the next
    free number and make its folder only when they first write, so the runs wrote over each other's checkpoints,
    metrics and config.yaml. Each run claims its folder as it is built: the second, built before the first has
    written anything, gets version_1."""
    from crate.lit import CrateCLI, cli_main

    args = ["--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), "--trainer.logger", logger]
    folders = []
    for _ in range(2):
        cli_main(args, run=False)  # built, not yet trained: nothing written
        folders.append(CrateCLI.run_dir)
    runs = tmp_path / "crate_nano_digits"
    assert folders == [runs / "version_0", runs / "version_1"] and all(folder.is_dir() for folder in folders)
    from lightning.pytorch.utilities import rank_zero_only

    from crate.lit.cli import claim_version

    monkeypatch.setattr(rank_zero_only, "rank", 1)  # another process of a distributed run: it writes into rank 0's
    assert claim_version(str(tmp_path), "crate_nano_digits") == (2, None) and not (runs / "version_2").exists()


def test_a_fit_with_checkpointing_off_trains_and_writes_no_checkpoint(tmp_path: Path, caplog) -> None:
    """--trainer.enable_checkpointing false was refused as a setting that "cannot run here" (Lightning's refusal of
    its switch beside the zoo's checkpoint callbacks): the fit trains, logs, and writes no checkpoint, and its
    summary names none."""
    from crate.lit import cli_main

    limits = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    with caplog.at_level(logging.INFO):
        cli = cli_main(
            ["fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), "--trainer.enable_checkpointing", "false"]
            + limits
        )
    assert cli.trainer.global_step == 4
    run = tmp_path / "crate_nano_digits" / "version_0"
    assert (run / "metrics.csv").is_file() and not list(tmp_path.rglob("*.ckpt"))
    assert "val/acc          last" in caplog.text and "checkpoint  " not in caplog.text
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from crate.lit.fault_tolerance import InterruptCheckpoint

    # a SIGTERM or Ctrl-C now (the hook Lightning calls on either) wrote interrupted-*.ckpt and last.ckpt
    interrupt = next(c for c in cli.trainer.callbacks if isinstance(c, InterruptCheckpoint))
    with caplog.at_level(logging.INFO):
        interrupt.on_exception(cli.trainer, cli.model, SIGTERMException())
    assert not list(tmp_path.rglob("*.ckpt"))
    assert "interrupted at step 4: no checkpoint written (checkpointing is off)" in caplog.text


def test_epochs_without_validation_are_saved_and_not_shown_with_an_earlier_epoch_s_figures(
    tmp_path: Path, caplog
) -> None:
    """With --trainer.check_val_every_n_epoch 2 and 3 epochs, Lightning's checkpoint saved after validation only:
    last.ckpt held epoch 1, and the run's final epoch was never saved. The latest state is now saved at every
    epoch's end; the epoch line of an epoch without validation shows no val figures (it showed epoch 1's), and the
    summary says which epoch its last val/acc is from."""
    from crate.lit import cli_main

    args = ["fit", "--config", DEFAULT, "--log_root", str(tmp_path), "--run_name", "sparse", *QUIET]
    limits = ["--trainer.max_epochs", "3", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    with caplog.at_level(logging.INFO):
        cli_main([*args, *limits, "--trainer.check_val_every_n_epoch", "2"])
    last = tmp_path / "sparse" / "version_0" / "checkpoints" / "last.ckpt"
    held = torch.load(last, weights_only=False, map_location="cpu")
    assert held["global_step"] == 6 and held["epoch"] == 2
    lines = {
        found[1]: line for line in caplog.text.splitlines() if (found := re.search(r"(epoch \d) \(\d of 3\)", line))
    }
    assert "val/acc" in lines["epoch 1"] and "val/" not in lines["epoch 2"] and "val/" not in lines["epoch 0"]
    validated = re.search(r"epoch 1 .*val/acc (\d\.\d{4})", lines["epoch 1"]).group(1)
    assert f"val/acc          last {validated} at epoch 1, step 4 of 6, best {validated} at epoch 1" in caplog.text


def test_a_fit_saving_every_n_steps_keeps_its_final_state_and_resumes_from_it_as_from_an_epoch_s_end(
    tmp_path: Path,
) -> None:
    """With --latest_checkpoint.every_n_train_steps 5 and 7 steps, Lightning saved at step 5 only (one trigger: no
    save at the epoch's end): last.ckpt held step 5, an export of it other weights than the run's, and a resume
    trained steps 6 and 7 again. The final state is saved in place of step 5's file, and a resume from it ends
    with the weights of the same run saved at its epoch's end, to the bit."""
    from crate.lit import cli_main

    def fit(root: Path, epochs: int, *extra: str) -> Path:
        limits = ["--trainer.limit_train_batches", "7", "--trainer.limit_val_batches", "1"]
        args = ["fit", "--config", DEFAULT, *QUIET, "--log_root", str(root), "--trainer.deterministic", "true"]
        dropout = ["--model.model_kwargs", '{"proj_drop_rate": 0.1, "drop_rate": 0.1}']  # random states matter
        cli_main([*args, *limits, *dropout, "--trainer.max_epochs", str(epochs), *extra])
        return root / "crate_nano_digits" / "version_0" / "checkpoints"

    every_5 = ["--latest_checkpoint.every_n_train_steps", "5"]
    folder = fit(tmp_path / "every_5", 1, *every_5)
    assert sorted(p.name for p in folder.glob("latest-*")) == ["latest-epoch000-step000007.ckpt"]
    assert (folder / "last.ckpt").resolve() == folder / "latest-epoch000-step000007.ckpt"
    fit(tmp_path / "every_5", 2, *every_5, "--ckpt_path", "last")
    fit(tmp_path / "epoch_end", 1)
    reference = fit(tmp_path / "epoch_end", 2, "--ckpt_path", "last")
    resumed, saved = (torch.load(f / "last.ckpt", weights_only=False) for f in (folder, reference))
    assert resumed["global_step"] == saved["global_step"] == 14
    assert all(torch.equal(resumed["state_dict"][k], v) for k, v in saved["state_dict"].items())


@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigterm_is_said_once_by_rank_zero(tmp_path: Path, monkeypatch, rank: int) -> None:
    """A SIGTERM reaches every process of a distributed run, and each wrote "stopped by SIGTERM": two processes,
    the same line twice. Rank zero says it; every process exits with the shell's status for the signal."""
    from lightning.pytorch.utilities import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 0)  # the helper sets the process's rank; restored after the test
    callback = ["--trainer.callbacks+=helpers.SIGTERMInProcess", "--trainer.callbacks.rank", str(rank)]
    proc = run_in_process("fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), *callback)
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert ("train.py: stopped by SIGTERM; resume with --ckpt_path last" in proc.stderr) == (rank == 0)


def test_a_callback_whose_package_is_missing_is_one_line_and_leaves_no_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """Lightning's DeviceStatsMonitor on a CPU needs psutil, which it looks for when the fit sets it up: without it
    the fit ended in a ModuleNotFoundError traceback. One line with Lightning's hint, exit status 2, no run left
    (psutil is made to look missing here, whether or not this machine has it)."""
    from lightning.pytorch.callbacks import device_stats_monitor

    from crate.lit import cli_main

    missing = type(device_stats_monitor._PSUTIL_AVAILABLE)("psutil-not-a-package")  # a requirement not met
    monkeypatch.setattr(device_stats_monitor, "_PSUTIL_AVAILABLE", missing)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(
            ["fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), "--trainer.callbacks+=DeviceStatsMonitor"]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err[-1].startswith(
        "train.py: error: `DeviceStatsMonitor` cannot log CPU stats"
    )
    assert not (tmp_path / "crate_nano_digits").exists()


def test_a_batch_limit_the_data_cannot_meet_is_one_line_and_leaves_no_run(tmp_path: Path) -> None:
    """``--trainer.limit_train_batches 0.001`` of 23 batches is no batch: Lightning's MisconfigurationException
    was a traceback with exit status 1 and left an empty version folder."""
    for command, key in (("fit", "limit_train_batches"), ("validate", "limit_val_batches")):
        proc = run_in_process(
            command, "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), f"--trainer.{key}", "0.001"
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        lines = [line for line in proc.stderr.splitlines() if "error:" in line]
        assert len(lines) == 1 and f"increase the `{key}` argument" in lines[0]
        assert not (tmp_path / "crate_nano_digits").exists()


def test_a_trainer_setting_that_needs_a_package_not_installed_is_one_line(tmp_path: Path) -> None:
    """``--trainer.precision transformer-engine`` without NVIDIA's package: Lightning's ModuleNotFoundError was a
    traceback with exit status 1."""
    import importlib.util

    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("transformer_engine is installed here")
    proc = run_in_process(
        "fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), "--trainer.precision", "transformer-engine"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "train.py: error: Lightning's Trainer refused the trainer settings (Requirement 'transformer_engine"
        in proc.stderr
    )
    assert not (tmp_path / "crate_nano_digits").exists()


@pytest.mark.parametrize(
    "callback, said",
    [
        ("LearningRateFinder", "LearningRateFinder sets the learning rate after the run's config.yaml recorded"),
        ("BatchSizeFinder", "BatchSizeFinder sets the batch size after the run's config.yaml recorded"),
        ("StochasticWeightAveraging", "StochasticWeightAveraging puts its average in the model only after the last"),
        ("GradientAccumulationScheduler", "GradientAccumulationScheduler changes the batches of an update between"),
    ],
)
def test_lightning_callbacks_that_change_the_run_after_its_records_are_one_line(
    tmp_path: Path, callback: str, said: str
) -> None:
    """The finders trained a run whose config.yaml named another rate or batch (batch 2048 recorded as 64), and
    LearningRateFinder's ramp, like StochasticWeightAveraging's SWALR, was an AttributeError traceback: one line,
    exit status 2, nothing written."""
    settings = {"StochasticWeightAveraging": ["--trainer.callbacks.swa_lrs", "0.01"]}
    settings["GradientAccumulationScheduler"] = ["--trainer.callbacks.scheduling", "{2: 4}"]
    extra = settings.get(callback, [])
    proc = run_in_process(
        "fit", "--config", DEFAULT, *QUIET, "--log_root", str(tmp_path), f"--trainer.callbacks+={callback}", *extra
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"train.py: error: {said}")
    assert not (tmp_path / "crate_nano_digits").exists()


def test_a_stock_vit_exports_with_the_image_size_and_settings_it_was_built_with(tmp_path: Path) -> None:
    """timm's ViT takes an image size (a ResNet does not): the load line and the hub folder build it at the run's
    16 px with its patch size and depth, and give the module's own outputs."""
    from crate.lit import ImageClassifier

    torch.manual_seed(0)
    kwargs = {"patch_size": 4, "depth": 2}
    module = ImageClassifier("vit_tiny_patch16_224", num_classes=3, in_chans=1, img_size=16, model_kwargs=kwargs)
    ckpt = tmp_path / "vit.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, ckpt)
    out, hub = tmp_path / "vit.safetensors", tmp_path / "hub"
    export_main([str(ckpt), "--out", str(out), "--hub-dir", str(hub)])
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["input_size"] == [1, 16, 16] and card["val_accuracy"] is None  # the file records no data
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        expected = module.evaluated_model().eval()(x)
        for loaded in (eval(card["load"], {"timm": timm}), timm.create_model(f"local-dir:{hub}", pretrained=True)):
            assert loaded.patch_embed.img_size == (16, 16) and len(loaded.blocks) == 2
            torch.testing.assert_close(loaded.eval()(x), expected, rtol=0, atol=1e-6)
