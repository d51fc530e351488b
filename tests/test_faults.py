"""Resume, interrupts and faults of train.py runs, through subprocesses as a user meets them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, run_in_process, run_train, write_image_folder

pytestmark = pytest.mark.slow  # train.py subprocesses: `make test-fast` leaves these out

DEFAULT = str(REPO / "configs" / "crate_nano_digits.yaml")
# 23 batches per epoch on digits; 2 epochs; a checkpoint every 5 steps; dropout on, so that an exact
# resume needs the random state restored as well as the data position
SHORT = [
    "--trainer.max_epochs", "2", "--trainer.deterministic", "true", "--trainer.enable_progress_bar", "false",
    "--latest_checkpoint.every_n_train_steps", "5", "--rate_monitor.every_n_steps", "10",
    "--model.model_kwargs", '{"proj_drop_rate": 0.1, "drop_rate": 0.1}',
]  # fmt: skip


def _extra_config(tmp_path: Path, name: str, callbacks: list[dict]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    return str(path)


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-4000:]


def _run_dir(root: Path, version: int = 0) -> Path:
    return root / "crate_nano_digits" / f"version_{version}" / "checkpoints"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    _ok(run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(root)))
    return _run_dir(root) / "last.ckpt"


def test_sigterm_mid_epoch_writes_a_checkpoint_and_the_resumed_run_ends_bitwise_equal(
    tmp_path: Path, uninterrupted: Path
) -> None:
    kill = _extra_config(tmp_path, "kill", [{"class_path": "helpers.SignalAtStep", "init_args": {"step": 32}}])
    first = run_train("fit", "--config", DEFAULT, "--config", kill, *SHORT, "--log_root", str(tmp_path))
    interrupted = _run_dir(tmp_path) / "interrupted-epoch001-step000032.ckpt"
    assert interrupted.is_file(), first.stderr[-3000:]
    assert (_run_dir(tmp_path) / "last.ckpt").resolve() == interrupted.resolve()
    assert torch.load(interrupted, weights_only=True)["global_step"] == 32  # mid-epoch: 23 steps an epoch

    bare = tmp_path / "bare"  # the same interrupted run, its checkpoint stripped of the epoch metrics' sums
    shutil.copytree(tmp_path / "crate_nano_digits", bare / "crate_nano_digits", symlinks=True)
    stripped = _run_dir(bare) / interrupted.name
    held = torch.load(stripped, weights_only=True)
    assert held["callbacks"]["EpochFiguresOnResume"]["batches"] == 9  # 32 steps: 23 in epoch 0, 9 in epoch 1
    held["callbacks"]["EpochFiguresOnResume"] = {}
    torch.save(held, stripped)

    resumed = run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(tmp_path), "--ckpt_path", "last")
    _ok(resumed)
    assert not (tmp_path / "crate_nano_digits" / "version_1").exists()  # the resumed run continues its folder
    final = _run_dir(tmp_path) / "last.ckpt"
    reference, ours = _weights(uninterrupted), _weights(final)
    assert reference.keys() == ours.keys()
    for key in reference:
        assert torch.equal(reference[key], ours[key]), f"{key} differs after resume"
    # the interrupted epoch's training figures cover all of its 23 batches, as the uninterrupted run's do
    whole, cut = _train_figures(uninterrupted.parent.parent), _train_figures(_run_dir(tmp_path).parent)
    assert sorted(whole) == sorted(cut) == [0, 1]
    assert _rows_with(_run_dir(tmp_path).parent, "time/epoch_s") == [0, 1]  # the epoch resumed into, too
    for epoch in whole:
        assert cut[epoch][0] == whole[epoch][0]  # accuracy: counts of samples, exact
        assert cut[epoch][1] == pytest.approx(whole[epoch][1], rel=1e-6)  # mean loss: a float sum in two parts

    partial = run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(bare), "--ckpt_path", "last")
    _ok(partial)
    assert "resuming 9 batches into epoch 1: the checkpoint holds no sums" in partial.stderr
    assert _train_figures(_run_dir(bare).parent)[1][0] != whole[1][0]  # what it warns of: 14 of 23 batches


def test_ctrl_c_inside_a_step_carries_no_sums_that_would_count_its_batch_twice(tmp_path: Path) -> None:
    """The step's batch was counted by the metrics but not by the loop, which repeats it on resume: the checkpoint
    carries no sums of the epoch's training metrics, and the resume says its figures are partial."""
    stop = _extra_config(tmp_path, "stop", [{"class_path": "helpers.CtrlCBeforeBackward", "init_args": {"step": 30}}])
    first = run_train("fit", "--config", DEFAULT, "--config", stop, *SHORT, "--log_root", str(tmp_path))
    assert first.returncode == 130, first.stderr[-3000:]
    interrupted = _run_dir(tmp_path) / "interrupted-epoch001-step000030.ckpt"
    held = torch.load(interrupted, weights_only=True)
    assert held["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"] == 7  # 30 - 23
    assert not held.get("callbacks", {}).get("EpochFiguresOnResume")
    resumed = run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(tmp_path), "--ckpt_path", "last")
    _ok(resumed)
    assert "resuming 7 batches into epoch 1: the checkpoint holds no sums" in resumed.stderr


def test_a_run_interrupted_before_its_first_checkpoint_links_last_to_its_final_state_after_resume(
    tmp_path: Path, uninterrupted: Path
) -> None:
    """SIGTERM before the run's first regular checkpoint: last.ckpt links to the interrupt checkpoint, and after
    the resumed run it must link to the final state (not stay behind with the final state at last-v1.ckpt,
    where --ckpt_path last and the export would silently take the interrupted weights)."""
    kill = _extra_config(tmp_path, "kill", [{"class_path": "helpers.SignalAtStep", "init_args": {"step": 3}}])
    run_train("fit", "--config", DEFAULT, "--config", kill, *SHORT, "--log_root", str(tmp_path))
    assert (_run_dir(tmp_path) / "last.ckpt").resolve().name == "interrupted-epoch000-step000003.ckpt"
    _ok(run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(tmp_path), "--ckpt_path", "last"))
    final = _run_dir(tmp_path) / "last.ckpt"
    steps = torch.load(uninterrupted, weights_only=True)["global_step"]
    assert torch.load(final, weights_only=True)["global_step"] == steps > 3  # the uninterrupted run's last state
    assert sorted(p.name for p in _run_dir(tmp_path).glob("last*")) == ["last.ckpt"]
    reference, ours = _weights(uninterrupted), _weights(final)
    for key in reference:
        assert torch.equal(reference[key], ours[key]), f"{key} differs after resume"


def test_resume_from_an_epoch_end_checkpoint_with_loader_workers_trains_the_next_epoch_bitwise_equal(
    tmp_path: Path,
) -> None:
    # Lightning makes a resumed run's first training iterator before it sets the sampler's epoch, and a
    # loader with worker processes draws its indices at once: resuming from an epoch-end checkpoint once
    # replayed the finished epoch's position, skipped every batch and trained nothing in the next epoch.
    step_saves = SHORT.index("--latest_checkpoint.every_n_train_steps")  # leave out: save at epoch ends
    every_epoch = [*SHORT[:step_saves], *SHORT[step_saves + 2 :], "--latest_checkpoint.save_top_k", "-1"]
    whole = tmp_path / "whole"
    _ok(run_train("fit", "--config", DEFAULT, *every_epoch, "--log_root", str(whole)))
    epoch_end = _run_dir(whole) / "latest-epoch000-step000023.ckpt"
    assert epoch_end.is_file(), sorted(p.name for p in _run_dir(whole).iterdir())

    resumed = tmp_path / "resumed"
    proc = run_train(
        "fit", "--config", DEFAULT, *every_epoch, "--data.num_workers", "1", "--log_root", str(resumed),
        "--ckpt_path", str(epoch_end),
    )  # fmt: skip
    _ok(proc)
    assert torch.load(_run_dir(resumed) / "last.ckpt", weights_only=True)["global_step"] == 46
    reference, ours = _weights(_run_dir(whole) / "last.ckpt"), _weights(_run_dir(resumed) / "last.ckpt")
    for key in reference:
        assert torch.equal(reference[key], ours[key]), f"{key} differs after resume"


def test_non_finite_weights_stop_the_run_naming_the_step_and_keep_good_checkpoints(tmp_path: Path) -> None:
    poison = _extra_config(
        tmp_path, "poison", [{"class_path": "helpers.PoisonWeightsAtStep", "init_args": {"step": 12}}]
    )
    proc = run_in_process("fit", "--config", DEFAULT, "--config", poison, *SHORT, "--log_root", str(tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr  # one line (it was a traceback), a failed run
    # poisoned before the 13th batch: its loss is nan, and the guard stops the run at step 13
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: error: training stopped at step 13") and "the loss is NaN or infinite" in last
    kept = sorted(_run_dir(tmp_path).glob("latest-*.ckpt"))
    assert [p.name for p in kept] == ["latest-epoch000-step000010.ckpt"]
    assert all(torch.isfinite(v).all() for v in _weights(kept[0]).values() if v.is_floating_point())


def test_corrupt_checkpoint_is_refused_and_the_good_ones_stay(tmp_path: Path, uninterrupted: Path) -> None:
    folder = tmp_path / "crate_nano_digits" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    good = folder / "latest-epoch001-step000040.ckpt"
    good.write_bytes(uninterrupted.read_bytes())
    truncated = folder / "last.ckpt"
    truncated.write_bytes(good.read_bytes()[:1000])
    proc = run_in_process("fit", "--config", DEFAULT, *SHORT, "--log_root", str(tmp_path), "--ckpt_path", "last")
    assert proc.returncode != 0
    assert "corrupt or truncated" in proc.stderr and good.name in proc.stderr
    assert good.is_file() and truncated.is_file()


def test_checkpoint_with_other_classes_is_refused_with_what_to_do(tmp_path: Path, uninterrupted: Path) -> None:

    write_image_folder(tmp_path / "images", classes=3, per_class=2)
    proc = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_nano_imagefolder.yaml"),
        "--data.root", str(tmp_path / "images"), "--data.num_workers", "0", "--trainer.max_epochs", "1",
        "--data.img_size", "32", "--log_root", str(tmp_path), "--ckpt_path", str(uninterrupted),
    )  # fmt: skip
    assert proc.returncode == 2
    # the data check comes first: a resume onto a folder of 3 classes from a run on the 10 digits names the change
    assert "trained on other data" in proc.stderr and "num_classes 10 -> 3" in proc.stderr
    assert "--model.pretrained_file" in proc.stderr


def test_validating_at_another_image_size_is_refused_before_the_run_s_folder_is_touched(uninterrupted: Path) -> None:
    """A checkpoint whose tensors do not fit the model the config builds (here its position embedding: another
    image size) is refused before the evaluation writes its config and logs into the checkpoint's run folder."""
    run_folder = uninterrupted.parent.parent
    before = {path: path.stat().st_mtime_ns for path in run_folder.rglob("*")}
    proc = run_in_process("validate", "--config", DEFAULT, "--ckpt_path", str(uninterrupted), "--data.img_size", "32")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "does not fit this run's model" in proc.stderr and "trained with img_size=16 (this run 32)." in proc.stderr
    assert {path: path.stat().st_mtime_ns for path in run_folder.rglob("*")} == before  # nothing new, nothing changed


def test_missing_checkpoint_and_missing_dataset_get_clear_errors(tmp_path: Path) -> None:
    proc = run_in_process(
        "fit", "--config", DEFAULT, "--log_root", str(tmp_path), "--ckpt_path", str(tmp_path / "x.ckpt")
    )
    assert proc.returncode != 0 and "does not exist" in proc.stderr
    proc = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_tiny_cifar10.yaml"), "--data.root", str(tmp_path / "none"),
        "--data.download", "false", "--log_root", str(tmp_path), "--trainer.max_epochs", "1",
    )  # fmt: skip
    assert proc.returncode != 0 and "cifar-10-batches-py" in proc.stderr


@pytest.mark.parametrize(
    ("drop_last", "extra"),
    [
        (False, []),
        (True, []),
        (True, ["--model.compile", "true", "--model.compile_mode", "reduce-overhead", "--model.ema_decay", "0.9"]),
    ],
    ids=["all-batches", "drop-last", "gpu-recipe-settings-compiled-with-ema"],
)
def test_sigterm_mid_epoch_on_the_tensor_store_path_resumes_bitwise_equal(
    tmp_path: Path, drop_last: bool, extra: list[str]
) -> None:
    """The CIFAR recipe's path: stores of a folder, batches augmented on the device by per-image seeds
    (the policy included); interrupted mid-epoch and resumed, the weights end equal to an uninterrupted run.
    With ``drop_last`` (the GPU recipe's fixed shapes), 44 images make 5 batches of 8 and 4 left out; with the
    GPU recipe's compiled step (``reduce-overhead``, which a CPU runs without CUDA graphs) and a moving
    average, the averaged weights too."""

    write_image_folder(
        tmp_path / "folder", 2, per_class=22 if drop_last else 20, size=32, suffix=".png", gray=False, seed=1
    )
    recipe = [
        "--config", str(REPO / "configs" / "cifar10.yaml"), "--data.root", str(tmp_path / "folder"),
        "--data.batch_size", "8", "--model.model_name", "crate_nano_patch4_32", "--trainer.max_epochs", "2",
        "--trainer.deterministic", "true", "--latest_checkpoint.every_n_train_steps", "3",
        "--rate_monitor.every_n_steps", "4", "--data.augmentation.re_prob", "0.5",
        "--data.drop_last", str(drop_last).lower(), *extra,
    ]  # fmt: skip
    whole = tmp_path / "whole"
    _ok(run_train("fit", *recipe, "--log_root", str(whole)))
    kill = _extra_config(tmp_path, "kill", [{"class_path": "helpers.SignalAtStep", "init_args": {"step": 7}}])
    cut = tmp_path / "cut"
    run_train("fit", *recipe, "--config", kill, "--log_root", str(cut))
    run = cut / "cifar10" / "version_0" / "checkpoints"
    assert torch.load(run / "last.ckpt", weights_only=True)["global_step"] == 7  # 5 batches an epoch
    _ok(run_train("fit", *recipe, "--log_root", str(cut), "--ckpt_path", "last"))
    reference = _weights(whole / "cifar10" / "version_0" / "checkpoints" / "last.ckpt")
    ours = _weights(run / "last.ckpt")
    for key in reference:
        assert torch.equal(reference[key], ours[key]), f"{key} differs after resume"


def test_a_resume_onto_another_folder_is_refused_and_leaves_the_run_untouched(tmp_path: Path) -> None:
    """The run's checkpoints, config and logs are byte for byte what they were; the refusal is one line that
    names what changed and how to train on the new data from the run's weights."""

    first, other = tmp_path / "first", tmp_path / "other"
    write_image_folder(first, classes=2, per_class=4)
    write_image_folder(other, classes=2, per_class=4)
    for image in sorted((other / "val").rglob("*.png"))[:3]:  # other data of the same shape and classes
        image.unlink()
    folder = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
    common = ["--data.num_workers", "0", "--data.img_size", "32", "--data.batch_size", "4", "--log_root", str(tmp_path)]
    common += ["--trainer.enable_progress_bar", "false", "--rate_monitor.every_n_steps", "0"]
    _ok(run_train("fit", "--config", folder, "--data.root", str(first), "--trainer.max_epochs", "1", *common))
    run = tmp_path / "crate_nano_imagefolder" / "version_0"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert any(p.name.startswith("best-") for p in before)
    ckpt = run / "checkpoints" / "last.ckpt"
    proc = run_in_process(
        "fit", "--config", folder, "--data.root", str(other), "--trainer.max_epochs", "2", *common,
        "--ckpt_path", str(ckpt),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "trained on other data" in message[0]
    assert f"root {first.resolve()} -> {other.resolve()}" in message[0] and "--model.pretrained_file" in message[0]
    assert "split_sizes" in message[0]  # 8 val images then, 5 now
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in (tmp_path / "crate_nano_imagefolder").iterdir()) == ["version_0"]
    # the same data resumes (the check does not refuse what it should let through)
    _ok(run_train("fit", "--config", folder, "--data.root", str(first), "--trainer.max_epochs", "2", *common,
                  "--ckpt_path", "last", "--run_name", "crate_nano_imagefolder"))  # fmt: skip
    assert read_epoch(run / "checkpoints" / "last.ckpt") == 1


def read_epoch(ckpt: Path) -> int:
    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["epoch"])


def test_evaluating_on_other_classes_is_refused_and_the_same_classes_elsewhere_are_not(tmp_path: Path, capsys) -> None:
    """``validate`` and the white-box report of a folder run, on a folder whose classes have other names (same
    count, shape and size: every tensor fits), are refused before anything is written, instead of scoring the
    run's labels as the other classes; the same classes in another folder are evaluated."""
    import shutil

    from crate.interpret.__main__ import main as interpret

    first, renamed, moved = tmp_path / "first", tmp_path / "renamed", tmp_path / "moved"
    write_image_folder(first, classes=2, per_class=4)
    shutil.copytree(first, moved)
    shutil.copytree(first, renamed)
    for split in ("train", "val"):
        for index, folder in enumerate(sorted((renamed / split).iterdir())):
            folder.rename(folder.with_name(f"kind_{'ab'[index]}"))
    folder = str(REPO / "configs" / "crate_nano_imagefolder.yaml")
    common = ["--data.num_workers", "0", "--data.img_size", "32", "--data.batch_size", "4", "--log_root", str(tmp_path)]
    common += ["--trainer.enable_progress_bar", "false", "--rate_monitor.every_n_steps", "0"]
    _ok(run_in_process("fit", "--config", folder, "--data.root", str(first), "--trainer.max_epochs", "1", *common))
    run = tmp_path / "crate_nano_imagefolder" / "version_0"
    ckpt = run / "checkpoints" / "last.ckpt"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    proc = run_in_process(
        "validate", "--config", folder, "--data.root", str(renamed), *common, "--ckpt_path", str(ckpt)
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "trained on other classes" in message[0]
    assert "classes ['class_0', 'class_1'] -> ['kind_a', 'kind_b'] (missing ['class_0', 'class_1']; new" in message[0]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before

    with pytest.raises(SystemExit) as exit_info:
        interpret(["--model", "crate_nano_patch4_32", "--checkpoint", str(ckpt), "--data", folder,
                   "--data.root", str(renamed), "--out", str(tmp_path / "report")])  # fmt: skip
    assert exit_info.value.code == 2
    assert "has the classes ['kind_a', 'kind_b'], but the model was trained on ['class_0', 'class_1']" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "report").exists()

    proc = run_in_process("validate", "--config", folder, "--data.root", str(moved), *common, "--ckpt_path", str(ckpt))
    _ok(proc)  # the data moved, its classes did not: evaluated
    assert "val/acc" in proc.stdout


def _train_figures(run_folder: Path) -> dict[int, tuple[str, float]]:
    """Each epoch's logged train/acc (as written) and train/loss_epoch in a run's metrics.csv."""
    import csv

    with open(run_folder / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("train/acc")]
    return {int(row["epoch"]): (row["train/acc"], float(row["train/loss_epoch"])) for row in rows}


def _rows_with(run_folder: Path, key: str) -> list[int]:
    """The epochs of a run's metrics.csv rows that hold ``key``, in order (an epoch logged twice is listed twice)."""
    import csv

    with open(run_folder / "metrics.csv") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f) if row.get(key)]


def _val_figures(run_folder: Path) -> dict[int, str]:
    """Each epoch's logged val/acc in a run's metrics.csv, as written."""
    import csv

    with open(run_folder / "metrics.csv") as f:
        return {int(row["epoch"]): row["val/acc"] for row in csv.DictReader(f) if row.get("val/acc")}


def test_sigterm_while_validating_resumes_into_the_whole_validation_of_that_epoch(
    tmp_path: Path, uninterrupted: Path
) -> None:
    """SIGTERM after the first validation batch of epoch 0: the training batches of that epoch are done and
    its validation is not. Lightning restores such a checkpoint as one saved after validation and would skip
    that epoch's validation (no val/acc for it, and "best" never sees it); the resumed run validates it over
    the whole val split and logs what the uninterrupted run logged, that epoch's training figures and time
    included (no training step of it runs in the resumed process)."""
    kill = _extra_config(tmp_path, "kill", [{"class_path": "helpers.SignalInValidation", "init_args": {"epoch": 0}}])
    first = run_train("fit", "--config", DEFAULT, "--config", kill, *SHORT, "--log_root", str(tmp_path))
    interrupted = _run_dir(tmp_path) / "interrupted-epoch000-step000023.ckpt"
    assert interrupted.is_file(), first.stderr[-3000:]
    _ok(run_train("fit", "--config", DEFAULT, *SHORT, "--log_root", str(tmp_path), "--ckpt_path", "last"))
    reference = _val_figures(uninterrupted.parent.parent)
    assert sorted(reference) == [0, 1]
    assert _val_figures(_run_dir(tmp_path).parent) == reference
    whole, cut = _train_figures(uninterrupted.parent.parent), _train_figures(_run_dir(tmp_path).parent)
    assert sorted(cut) == [0, 1] and _rows_with(_run_dir(tmp_path).parent, "train/acc") == [0, 1]
    for epoch in whole:
        assert cut[epoch][0] == whole[epoch][0]  # accuracy: counts of samples, exact
        assert cut[epoch][1] == pytest.approx(whole[epoch][1], rel=1e-6)
    assert _rows_with(_run_dir(tmp_path).parent, "time/epoch_s") == [0, 1]
    final, whole = _weights(_run_dir(tmp_path) / "last.ckpt"), _weights(uninterrupted)
    for key in whole:
        assert torch.equal(whole[key], final[key]), f"{key} differs after resume"
