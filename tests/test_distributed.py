"""Distributed training on CPU (DDP over gloo through train.py), trainer presets, bf16."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import torch
from conftest import REPO, run_in_process, run_train

from crate.metrics import MONITORED

pytestmark = pytest.mark.slow  # train.py subprocesses: `make test-fast` leaves these out

DEFAULT = str(REPO / "configs" / "crate_nano_digits.yaml")
DDP = str(REPO / "configs" / "trainer" / "cpu_ddp.yaml")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "3"]
# the digits split 79.5 / 20.5: 369 validation images, which two processes cannot share evenly
ODD = ["--data.val_fraction", "0.205"]


def _rows(run_dir: Path, key: str) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [row for row in csv.DictReader(handle) if row.get(key)]


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The default job on the odd split for 3 epochs with one process (batch 64) and two DDP processes (batch 32
    each)."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    _ok(run_train("fit", "--config", DEFAULT, *ODD, *QUIET, "--log_root", str(one)))
    ddp = ["--config", DDP, "--data.batch_size", "32"]
    _ok(run_train("fit", "--config", DEFAULT, *ddp, *ODD, *QUIET, "--log_root", str(two)))
    return {"one": one / "crate_nano_digits" / "version_0", "two": two / "crate_nano_digits" / "version_0"}


def test_two_process_fit_matches_one_process_fit_within_tolerance(runs: dict[str, Path]) -> None:
    # Both see the same 64 samples (same augmentation) in every step and average the same gradient; only
    # the order of floating-point sums differs, which early training amplifies a little. Tolerance: 0.04
    # validation accuracy (15 of 369 images), 2% validation loss, 1% coding-rate metrics.
    one, two = _rows(runs["one"], "val/acc"), _rows(runs["two"], "val/acc")
    assert [r["step"] for r in one] == [r["step"] for r in two] == ["22", "45", "68"]
    for a, b in zip(one, two, strict=True):
        assert abs(float(a["val/acc"]) - float(b["val/acc"])) <= 0.04
        assert abs(float(a["val/loss"]) / float(b["val/loss"]) - 1) <= 0.02
    rates_one, rates_two = _rows(runs["one"], "rate/R/layer_0")[-1], _rows(runs["two"], "rate/R/layer_0")[-1]
    rate_keys = [k for k in rates_one if k.startswith("rate/")]
    assert len(rate_keys) == len(MONITORED) * 4  # every monitored quantity, nano: 4 layers
    for key in rate_keys:  # 1% relative, or 0.01 absolute for fractions (sparsities) near zero
        a, b = float(rates_one[key]), float(rates_two[key])
        assert abs(a - b) <= 0.01 * max(abs(b), 1.0), key


def test_validation_of_one_checkpoint_is_the_same_on_one_and_two_processes(runs: dict[str, Path], tmp_path) -> None:
    """369 validation images: two processes take 185 each, one of them a padding copy that counts nowhere."""
    ckpt = str(runs["one"] / "checkpoints" / "last.ckpt")
    values = {}
    for label, extra in (("one", []), ("two", ["--config", DDP, "--data.batch_size", "32"])):
        root = tmp_path / label
        _ok(
            run_train(
                "validate", "--config", DEFAULT, *extra, *ODD, *QUIET, "--ckpt_path", ckpt, "--log_root", str(root)
            )
        )
        run = runs["one"]  # validate logs into the checkpoint's own run, whatever --log_root says
        assert not root.exists()
        rates = {k: v for k, v in _rows(run, "rate/R/layer_0")[-1].items() if k.startswith("rate/")}
        values[label] = {**_rows(run, "val/acc")[-1], **rates}
    assert float(values["one"]["val/acc"]) == float(values["two"]["val/acc"])  # exact: synced sum/count states
    assert float(values["one"]["val/loss"]) == pytest.approx(float(values["two"]["val/loss"]), rel=1e-6)
    for key in (k for k in values["one"] if k.startswith("rate/")):
        assert float(values["one"][key]) == pytest.approx(float(values["two"][key]), rel=1e-9), key


def test_predictions_of_one_checkpoint_are_the_same_on_one_and_two_processes(runs: dict[str, Path], tmp_path) -> None:
    """Each process predicts its own share of the split; predictions.csv holds every image once, in the split's
    order, each row beside its own label, as one process writes it."""
    ckpt = str(runs["one"] / "checkpoints" / "last.ckpt")
    rows = {}
    for label, run, extra in (("one", run_in_process, []), ("two", run_train, ["--config", DDP])):
        out = tmp_path / f"{label}.csv"
        _ok(run("predict", "--config", DEFAULT, *extra, *ODD, *QUIET, "--ckpt_path", ckpt,
                "--prediction_writer.output", str(out)))  # fmt: skip
        with out.open() as handle:
            rows[label] = list(csv.DictReader(handle))
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits().target  # the runs' validation split: 20.5 %, stratified, seed 0
    _, val = train_test_split(range(len(digits)), test_size=0.205, stratify=digits, random_state=0)
    truth = [int(digits[i]) for i in val]
    assert [int(r["index"]) for r in rows["two"]] == list(range(len(truth)))
    assert [int(r["label"]) for r in rows["two"]] == [int(r["label"]) for r in rows["one"]] == truth
    assert [r["predicted"] for r in rows["two"]] == [r["predicted"] for r in rows["one"]]
    for a, b in zip(rows["one"], rows["two"], strict=True):
        assert float(a["probability"]) == pytest.approx(float(b["probability"]), abs=2e-6)


def test_a_clean_ddp_run_closes_its_process_group_before_exit(tmp_path, monkeypatch) -> None:
    # left open, gloo's threads can outlive the interpreter and abort a finished run with status -6
    closed, destroy = [], torch.distributed.destroy_process_group
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: closed.append(destroy()))
    ddp_of_one = ["--trainer.strategy", "ddp", "--trainer.devices", "1", "--trainer.max_epochs", "1"]
    _ok(run_in_process("fit", "--config", DEFAULT, *QUIET, *ddp_of_one, "--log_root", str(tmp_path)))
    assert len(closed) == 1  # a group was made (it is closed only where one is open), and closed once
    assert not torch.distributed.is_initialized()
    assert "LOCAL_RANK" not in os.environ  # the run's rank stays with it: a later two-process run launches its own


def test_two_processes_train_with_batch_limits_and_keep_their_final_state(tmp_path: Path) -> None:
    """A batch limit given as a whole number (--trainer.limit_train_batches 7) made rank zero alone ask the Trainer
    for its log folder (a broadcast) while it wrote the limit into config.yaml: the two processes waited on each
    other without end. The run trains, records its limits as counts, and its latest state is its final step
    (saved every 5 steps: step 7 is no multiple)."""
    limits = ["--trainer.limit_train_batches", "7", "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1"]
    ddp = ["--config", DDP, "--data.batch_size", "32", "--latest_checkpoint.every_n_train_steps", "5"]
    _ok(run_train("fit", "--config", DEFAULT, *ddp, *QUIET, *limits, "--log_root", str(tmp_path), timeout=180))
    run = tmp_path / "crate_nano_digits" / "version_0"
    config = (run / "config.yaml").read_text()
    assert "  limit_train_batches: 7\n" in config and "  limit_val_batches: 1\n" in config
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 7
    assert [p.name for p in (run / "checkpoints").glob("latest-*")] == ["latest-epoch000-step000007.ckpt"]


def test_simdino_trains_on_two_processes(tmp_path: Path) -> None:
    """pretrain.py --objective simdino under DDP: the second process is started with the same command line, which
    lost --objective (it started as the masked autoencoder and refused SimDINO's settings)."""
    from conftest import write_image_folder

    root = write_image_folder(tmp_path / "images", ("a", "b"), 8, val_per_class=4, size=32, gray=False)
    config = str(REPO / "configs" / "simdino" / "crate_nano_cifar10.yaml")
    proc = run_train(
        "--objective", "simdino", "fit", "--config", config, "--config", DDP, "--data.root", str(root),
        "--data.batch_size", "4", "--model.model_kwargs", "{depth: 1}", "--model.knn_bank", "16",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--log_root", str(tmp_path / "logs"),
        program="pretrain.py",
    )  # fmt: skip
    _ok(proc)
    run = tmp_path / "logs" / "simdino_crate_nano_cifar10" / "version_0"
    assert len(_rows(run, "val/knn_acc")) == 1
    assert next((run / "checkpoints").glob("best-epoch000-knn_acc*.ckpt"), None) is not None


@pytest.mark.parametrize("preset", ["cpu", "cpu_ddp", "gpu_ddp", "gpu_fsdp", "bf16"])
def test_trainer_presets_parse(preset: str) -> None:
    proc = run_in_process(  # parsing alone: no process of its own needed
        "fit", "--config", DEFAULT, "--config", str(REPO / "configs" / "trainer" / f"{preset}.yaml"), "--print_config"
    )
    _ok(proc)
    expected = {
        "cpu": "accelerator: cpu",
        "cpu_ddp": "strategy: ddp",
        "gpu_ddp": "accelerator: gpu",
        "gpu_fsdp": "class_path: crate.lit.strategies.BlockFSDPStrategy",
        "bf16": "precision: bf16-mixed",
    }
    assert expected[preset] in proc.stdout


def test_strategies_instantiate_without_a_gpu() -> None:
    from lightning.pytorch.strategies import DDPStrategy

    from crate.lit.strategies import BLOCK_CLASSES, BlockFSDPStrategy
    from crate.models import CrateBlock

    assert DDPStrategy(process_group_backend="gloo").process_group_backend == "gloo"
    fsdp = BlockFSDPStrategy(activation_checkpointing=True)
    assert CrateBlock in BLOCK_CLASSES
    assert fsdp.kwargs["auto_wrap_policy"] is not None or fsdp._fsdp_kwargs


def test_bf16_fit_trains_and_rates_stay_float64(tmp_path: Path) -> None:
    from crate.metrics.functional import coding_rate

    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.randn(2, 9, 16) @ torch.randn(16, 16)
    assert z.dtype == torch.bfloat16 and coding_rate(z).dtype == torch.float64
    bf16 = str(REPO / "configs" / "trainer" / "bf16.yaml")
    proc = run_train("fit", "--config", DEFAULT, "--config", bf16, *QUIET[:2], "--trainer.max_epochs", "6",
                     "--log_root", str(tmp_path))  # fmt: skip
    _ok(proc)
    run = tmp_path / "crate_nano_digits" / "version_0"
    assert float(_rows(run, "val/acc")[-1]["val/acc"]) >= 0.5
    assert all(float(v) == float(v) for k, v in _rows(run, "rate/R/layer_0")[-1].items() if k.startswith("rate/"))


def _rebuilt_average(rank: int, average: torch.nn.Module, weights: dict, generator_state: bytes) -> None:
    """In the spawned process: the average arrived whole, its rounding generator in the state it left in."""
    for name, tensor in average.state_dict().items():
        torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0)
    assert bytes(average._sr_generator.get_state().numpy()) == generator_state


def test_the_moving_average_reaches_a_spawned_process() -> None:
    """Lightning's ddp_spawn pickles the module into new processes: timm's moving average holds a torch.Generator
    (stochastic rounding), which torch cannot rebuild there, so the digits recipe (--model.ema_decay) lost a
    process at start and ddp_spawn waited for it without end. The average arrives with its weights and generator."""
    import torch.multiprocessing as mp

    from crate.lit import ImageClassifier

    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16, ema_decay=0.998)
    average = module.model_ema
    average._sr_generator.manual_seed(7)
    torch.rand(3, generator=average._sr_generator)  # a state past its seed
    state = bytes(average._sr_generator.get_state().numpy())
    weights = {name: tensor.clone() for name, tensor in average.state_dict().items()}
    mp.start_processes(_rebuilt_average, args=(average, weights, state), nprocs=1, start_method="spawn")
