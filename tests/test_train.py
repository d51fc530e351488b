"""train.py end to end, through subprocesses as a user runs it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import REPO, run_in_process, run_train, write_image_folder

from crate.metrics import MONITORED

pytestmark = pytest.mark.slow  # train.py subprocesses: `make test-fast` leaves these out

DEFAULT = str(REPO / "configs" / "crate_nano_digits.yaml")


def _last_value(metrics_csv: Path, key: str) -> float:
    with metrics_csv.open() as handle:
        values = [row[key] for row in csv.DictReader(handle) if row.get(key)]
    assert values, f"{key} was never logged in {metrics_csv}"
    return float(values[-1])


def _assert_ok(proc) -> None:
    assert proc.returncode == 0, f"train.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


# Chance is 0.1. The ViT twin starts slower on digits (about 0.35 after 8 epochs, 0.99 after 40).
@pytest.mark.parametrize(
    "config,epochs,floor",
    [("crate_nano_digits.yaml", 8, 0.6), ("vit_nano_digits.yaml", 8, 0.25)],
)
def test_short_fit_on_digits_learns_and_leaves_logs_and_checkpoints(
    tmp_path: Path, config: str, epochs: int, floor: float
) -> None:
    proc = run_train(
        "fit",
        "--config",
        str(REPO / "configs" / config),
        "--trainer.max_epochs",
        str(epochs),
        "--model.warmup_epochs",
        "1",
        "--log_root",
        str(tmp_path),
        "--run_name",
        "short",
    )
    _assert_ok(proc)
    run_dir = tmp_path / "short" / "version_0"
    accuracy = _last_value(run_dir / "metrics.csv", "val/acc")
    assert accuracy >= floor, f"val/acc {accuracy:.3f} after {epochs} epochs is not well above chance (0.1)"
    assert _last_value(run_dir / "metrics.csv", "train/loss") > 0
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard events next to the CSV log"
    with (run_dir / "metrics.csv").open() as handle:
        columns = set(csv.DictReader(handle).fieldnames)
    quantities = [q for q in MONITORED if q != "sparsity_of_code" or config.startswith("crate")]
    expected = {f"rate/{q}/layer_{layer}" for q in quantities for layer in range(4)}  # nano: 4 layers
    assert expected <= columns, f"the CodingRateMonitor did not log {sorted(expected - columns)}"
    assert not any("sparsity_of_code" in c for c in columns) or config.startswith("crate")
    checkpoints = {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert "last.ckpt" in checkpoints and any(name.startswith("best-") for name in checkpoints)


def test_print_config_prints_the_full_config() -> None:
    proc = run_train("fit", "--config", DEFAULT, "--print_config")
    _assert_ok(proc)
    for key in (
        "trainer:",
        "model:",
        "model_name: crate_nano_patch4_32",
        "class_path: crate.lit.DigitsDataModule",
        "checkpoint:",
        "monitor: val/acc",
        "run_name: crate_nano_digits",
    ):
        assert key in proc.stdout


def test_image_folder_config_trains_on_a_user_folder(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "images", classes=3, per_class=4)
    proc = run_train(
        "fit",
        "--config",
        str(REPO / "configs" / "crate_nano_imagefolder.yaml"),
        "--data.root",
        str(tmp_path / "images"),
        "--data.num_workers",
        "0",
        "--trainer.max_epochs",
        "1",
        "--log_root",
        str(tmp_path / "logs"),
    )
    _assert_ok(proc)
    metrics = tmp_path / "logs" / "crate_nano_imagefolder" / "version_0" / "metrics.csv"
    assert 0.0 <= _last_value(metrics, "val/acc") <= 1.0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model.bogus_key", "1"], "bogus_key"),
        (["--model.model_name", "crate_nanoo_patch4_32"], "Unknown model 'crate_nanoo_patch4_32'"),
    ],
)
def test_bad_command_line_gets_a_clear_error(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_in_process("fit", "--config", DEFAULT, "--trainer.max_epochs", "1", "--log_root", str(tmp_path), *args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not (tmp_path / "crate_nano_digits").exists() or not list(tmp_path.rglob("*.ckpt"))


def test_unknown_key_in_yaml_gets_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(Path(DEFAULT).read_text().replace("optimizer: adamw", "optimiser: adamw"))
    proc = run_in_process("fit", "--config", str(config), "--log_root", str(tmp_path))
    assert proc.returncode != 0
    assert "optimiser" in proc.stderr


def test_missing_image_folder_root_on_the_command_line(tmp_path: Path) -> None:
    proc = run_in_process(
        "fit",
        "--config",
        str(REPO / "configs" / "crate_nano_imagefolder.yaml"),
        "--data.root",
        str(tmp_path / "missing"),
        "--log_root",
        str(tmp_path),
    )
    assert proc.returncode != 0
    assert "lacks" in proc.stderr and "--data.root" in proc.stderr


def _one_line_error(proc, tmp_path: Path) -> str:
    """The error's line: status 2, the last line of stderr starts with ``train.py: error:``, no run left."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("version_*")), "a failed run left its folder"
    return last


_DATA_CLASS = "Parser key \"data\": Problem with given class_path 'crate.lit.DigitsDataModule': "
_DATA_HELP = "train.py: the accepted keys: python train.py fit --data.help crate.lit.DigitsDataModule"


@pytest.mark.parametrize(
    ("args", "message", "keys"),
    [
        (  # no prefix match, and the key meant named
            ["--trainer.max_epoch", "2"],
            "unrecognized arguments: --trainer.max_epoch",
            "fit --help (or --print_config); did you mean --trainer.max_epochs?",
        ),
        (["--model.lr_base_scale", "cubic"], "lr_base_scale must be 'sqrt' or 'linear'", None),
        # a key of the data module (chosen by class_path) fails as a union with None: the line names the key
        (["--data.init_args.no_such_key", "1"], _DATA_CLASS + "Option 'no_such_key' is not accepted", _DATA_HELP),
        (
            ["--data.batch_size", "abc"],
            _DATA_CLASS + "Parser key \"batch_size\": Expected a <class 'int'>. Got value: abc",
            _DATA_HELP,
        ),
        (
            ["--trainer.max_epochs", "x"],
            "Parser key \"trainer.max_epochs\": Expected a <class 'int'> Given value: x",
            "fit --help",
        ),
        (
            ["--config", str(REPO / "no_such.yaml")],
            f"--config {REPO / 'no_such.yaml'}: no such file; check the path",
            None,
        ),
    ],
    ids=[
        "abbreviated-key",
        "bad-lr-scale",
        "unknown-data-key",
        "bad-data-value",
        "bad-trainer-value",
        "missing-config",
    ],
)
def test_mistakes_in_settings_are_one_line_with_status_2(
    tmp_path: Path, args: list[str], message: str, keys: str | None
) -> None:
    proc = run_in_process("fit", "--config", DEFAULT, "--log_root", str(tmp_path), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not list(tmp_path.rglob("version_*"))
    assert "Union subtypes" not in proc.stderr  # jsonargparse's lead line, which names no cause
    if keys is not None:  # the line after the error says where the accepted keys are listed
        assert keys in proc.stderr.strip().splitlines()[-1]
    else:  # the error line is the last: no list of keys answers a value or a path
        assert proc.stderr.strip().splitlines()[-1].startswith("train.py: error: ")


def test_a_gpu_asked_for_on_a_machine_without_one_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = run_in_process("fit", "--config", DEFAULT, "--trainer.accelerator", "gpu", "--log_root", str(tmp_path))
    assert "no GPU that PyTorch can use" in _one_line_error(proc, tmp_path)


@pytest.mark.slow
def test_an_unreadable_image_met_by_a_loader_worker_is_one_line(tmp_path: Path) -> None:
    """A worker process's error reaches the CLI as its own message, not the worker's traceback."""

    write_image_folder(tmp_path / "folder", 2, per_class=6, size=16, suffix=".png", gray=False, seed=1)
    broken = sorted((tmp_path / "folder" / "train").rglob("*.png"))[3]
    broken.write_bytes(b"not an image")
    proc = run_train(
        "fit", "--config", str(REPO / "configs" / "crate_nano_imagefolder.yaml"), "--data.root",
        str(tmp_path / "folder"), "--data.num_workers", "1", "--trainer.max_epochs", "1",
        "--log_root", str(tmp_path / "logs"),
    )  # fmt: skip
    line = _one_line_error(proc, tmp_path / "logs")
    assert f"cannot read image {broken}" in line and "replace or remove the file" in line


@pytest.mark.parametrize("section", ["model: 3", "model: null", "trainer: 3", "rate_monitor: null", "baseline: [1, 2]"])
def test_a_config_section_given_a_value_instead_of_settings_is_one_line(tmp_path: Path, section: str) -> None:
    """``model: 3`` reached a constructor as a traceback (``'int' object has no attribute 'get'``, ``argument after
    ** must be a mapping``)."""
    config = tmp_path / "section.yaml"
    config.write_text(section + "\n")
    proc = run_in_process("fit", "--config", DEFAULT, "--config", str(config), "--log_root", str(tmp_path))
    name, _, value = section.partition(": ")
    assert _one_line_error(proc, tmp_path) == (
        f"train.py: error: the config's `{name}:` is {value}, not settings: give it `key: value` lines under it "
        "(python train.py fit --print_config lists them)"
    )
