"""What a person reads of a run: a line per epoch with the bar off, and where the run left its files."""

from __future__ import annotations

import csv
import logging
import re
import time
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from lightning.pytorch.loggers import CSVLogger

from crate.lit import DigitsDataModule, ImageClassifier
from crate.lit.run_summary import RunSummary


def _trainer(tmp_path: Path, **settings) -> tuple[L.Trainer, ModelCheckpoint]:
    best = ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="val/acc", mode="max", save_last=True)
    settings = {"max_epochs": 3, "limit_train_batches": 2, "limit_val_batches": 1, **settings}
    trainer = L.Trainer(
        logger=CSVLogger(tmp_path, name="run"), enable_model_summary=False, callbacks=[best, RunSummary()], **settings
    )
    return trainer, best


def test_fit_prints_a_line_per_epoch_and_a_summary_of_the_run(tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    trainer, best = _trainer(tmp_path, enable_progress_bar=False)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=3e-3)
    with caplog.at_level(logging.INFO):
        trainer.fit(module, DigitsDataModule(batch_size=8))
    text = caplog.text
    epochs = re.findall(r"epoch (\d) \((\d) of 3\)  val/acc (\d\.\d{4}) \(best (\d\.\d{4})\)", text)
    assert [e[:2] for e in epochs] == [("0", "1"), ("1", "2"), ("2", "3")]  # numbered from 0, as Lightning does
    epochs = [e[1:] for e in epochs]
    values = [float(e[1]) for e in epochs]
    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:  # what the logger wrote for each epoch
        logged = [float(row["val/acc"]) for row in csv.DictReader(handle) if row.get("val/acc")]
    assert values == [round(v, 4) for v in logged]
    assert [float(e[2]) for e in epochs] == [max(values[: i + 1]) for i in range(3)]  # the best so far
    assert "fit ended after 3 epochs, 6 steps" in text
    assert f"run folder       {Path(trainer.log_dir).relative_to(tmp_path)}" in text
    top = max(values)
    assert f"val/acc          last {values[-1]:.4f}, best {top:.4f} at epoch {values.index(top)}" in text
    assert Path(best.best_model_path).name.startswith(f"epoch={values.index(top)}-")  # the file says the same
    assert f"best checkpoint  {Path(best.best_model_path).relative_to(tmp_path)}" in text
    assert "last checkpoint  checkpoints/last.ckpt (resume with --ckpt_path last)" in text

    caplog.clear()
    with caplog.at_level(logging.INFO):
        trainer.validate(module, DigitsDataModule(batch_size=8), ckpt_path=best.best_model_path)
    assert re.search(rf"val of checkpoints/{Path(best.best_model_path).name}: val/acc {top:.4f}", caplog.text)


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"limit_train_batches": 0}, "--trainer.limit_train_batches 0 (no training batches)"),
        ({"max_epochs": 0}, "--trainer.max_epochs 0"),
        ({"max_steps": 0}, "--trainer.max_steps 0"),
    ],
    ids=["no-batches", "no-epochs", "no-steps"],
)
def test_a_new_fit_that_trains_nothing_says_which_setting_stopped_it(
    tmp_path: Path, caplog, settings: dict, why: str
) -> None:
    """Not a resumed checkpoint's limit, as the summary said of every fit without a step."""
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False, **settings)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
    with caplog.at_level(logging.INFO):
        trainer.fit(module, DigitsDataModule(batch_size=8))
    said = [line for line in caplog.text.splitlines() if "nothing trained" in line]
    assert len(said) == 1 and said[0].endswith(f"nothing trained  {why}"), said


def test_a_metric_logged_at_the_epoch_end_is_the_best_of_its_own_epoch(tmp_path: Path, caplog) -> None:
    """A module may log its monitored figure in its own epoch-end hook (SimDINO's val/knn_acc), which runs after
    the callbacks' ones: the summary's best value and epoch are those of the logged figures and of the best
    checkpoint (it read the epoch before's value, and never the last epoch's)."""

    class EpochEndScore(ImageClassifier):
        checkpoint_monitor = ("val/score", "max")

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:  # a figure that rises, falls back and rises to its top at the end
                self.log("val/score", (0.2, 0.5, 0.4, 0.6, 0.7)[self.current_epoch])

    best = ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="val/score", mode="max", save_last=True)
    trainer = L.Trainer(
        max_epochs=5,
        limit_train_batches=1,
        limit_val_batches=1,
        logger=CSVLogger(tmp_path, name="run"),
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=[best, RunSummary()],
    )
    with caplog.at_level(logging.INFO):
        trainer.fit(EpochEndScore("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:
        logged = [round(float(row["val/score"]), 4) for row in csv.DictReader(handle) if row.get("val/score")]
    assert len(logged) == 5
    top = max(logged)
    epoch = logged.index(top)
    assert f"val/score        last {logged[-1]:.4f}, best {top:.4f} at epoch {epoch}" in caplog.text
    assert Path(best.best_model_path).name.startswith(f"epoch={epoch}-")  # the checkpoint says the same
    shown = [float(b) for _, b in re.findall(r"val/score (\d\.\d{4}) \(best (\d\.\d{4})\)", caplog.text)]
    assert shown == [max(logged[: i + 1]) for i in range(5)]  # each epoch line's best so far
    held = torch.load(best.best_model_path, weights_only=False)["callbacks"]
    record = next(state for key, state in held.items() if key.startswith("RunSummary"))
    assert record["best"] == [pytest.approx(top), epoch]  # what a resumed run reports


@pytest.mark.parametrize(
    ("max_steps", "said"),
    [
        (5, "2 epochs and 1 of the next one's 2 steps (5 steps)"),
        (4, "2 epochs, 4 steps"),
        (1, "1 of the first epoch's 2 steps"),
    ],
    ids=["inside-an-epoch", "at-an-epoch-end", "inside-the-first-epoch"],
)
def test_a_fit_stopped_inside_an_epoch_says_how_much_of_it_trained(
    tmp_path: Path, caplog, max_steps: int, said: str
) -> None:
    """Lightning counts the epoch a fit stopped in (max_steps, max_time) as trained: 5 steps of 2 an epoch read
    "3 epochs"."""
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False, max_epochs=10, max_steps=max_steps)
    with caplog.at_level(logging.INFO):
        trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    assert trainer.global_step == max_steps
    assert f"fit ended after {said}, " in caplog.text
    from crate.models import read_checkpoint
    from crate.run.record import read_record

    trainer.save_checkpoint(tmp_path / "end.ckpt")  # the state it ended in, as the CLI's latest checkpoint holds
    record = read_record(read_checkpoint(tmp_path / "end.ckpt"))  # what a card says of the file
    assert (record.epochs_trained, record.batches_into_epoch) == divmod(max_steps, 2)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"limit_train_batches": 3, "val_check_interval": 2, "max_epochs": 2}, "at epoch 1, step 5 of 6"),
        ({"max_epochs": 10, "max_steps": 5}, "at epoch 1, step 4 of 5"),
    ],
    ids=["validated-before-the-epoch-s-last-batch", "stopped-inside-an-epoch"],
)
def test_a_fit_that_trained_on_after_its_last_validation_says_which_step_its_figure_is_of(
    tmp_path: Path, caplog, settings: dict, said: str
) -> None:
    """With --trainer.val_check_interval 2 of an epoch's 3 batches Lightning validates after its second batch
    only, so the last batch of each epoch trains after the last validation (on digits, 0.5 of 23 batches: step
    68 of 69); a max_steps inside an epoch stops with no validation. "last" val/acc is of earlier weights than the
    last checkpoint's: the summary says at which step, and the figure is the last one the logger wrote."""
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False, **settings)
    with caplog.at_level(logging.INFO):
        trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:
        logged = [row for row in csv.DictReader(handle) if row.get("val/acc")]
    step = int(said.split("step ")[1].split(" of")[0])
    assert int(logged[-1]["step"]) == step - 1  # the logger's row of that validation (its step counts from 0)
    assert f"val/acc          last {float(logged[-1]['val/acc']):.4f} {said}, best " in caplog.text


def test_no_epoch_lines_where_a_progress_bar_shows(tmp_path: Path, caplog) -> None:
    trainer, _ = _trainer(tmp_path, enable_progress_bar=True)
    with caplog.at_level(logging.INFO):
        trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    assert "(1 of 3)" not in caplog.text and "fit ended after 3 epochs" in caplog.text


@pytest.mark.parametrize("value", [float("nan"), None])
def test_a_missing_or_non_finite_metric_is_left_out_not_printed_as_nan(value) -> None:
    from crate.lit.run_summary import _number

    assert _number(torch.tensor(value) if value is not None else None) is None
    assert _number(torch.tensor(0.25)) == 0.25


def test_the_first_epoch_after_a_mid_epoch_resume_is_timed_from_the_resume(caplog) -> None:
    """Lightning skips on_train_epoch_start for an epoch resumed part-way: the line then times from fit start,
    not from the clock's zero (the machine's uptime)."""
    from types import SimpleNamespace

    summary = RunSummary()
    trainer = SimpleNamespace(
        callbacks=[], progress_bar_callback=None, callback_metrics={}, current_epoch=4, max_epochs=30
    )
    module = SimpleNamespace(checkpoint_monitor=("val/acc", "max"))
    summary.on_fit_start(trainer, module)
    with caplog.at_level(logging.INFO):
        summary.on_train_epoch_end(trainer, module)
    line = caplog.text.strip().splitlines()[-1]
    seconds = re.search(r"(\d+\.\d) s$", line)
    assert "epoch 4 (5 of 30)" in line and seconds is not None and float(seconds.group(1)) < 60, line


def test_known_noise_is_dropped_by_its_exact_text_and_nothing_else() -> None:
    import warnings

    from crate.lit.known_noise import quiet_known_noise

    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")

    def kept(message: str) -> bool:
        record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, message, (), None)
        return all(f.filter(record) for f in logger.filters)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_noise()
        for message in ("`isinstance(treespec, LeafSpec)` is deprecated, use ...", "another deprecation"):
            warnings.warn_explicit(message, FutureWarning, "x.py", 1, module="lightning.pytorch.utilities._pytree")
        warnings.warn_explicit(
            "`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, "y.py", 1, module="mine"
        )
    assert [str(w.message) for w in caught] == ["another deprecation", "`isinstance(treespec, LeafSpec)` is deprecated"]
    assert not kept("💡 Tip: For seamless cloud logging and experiment tracking, try installing ...")
    assert kept("GPU available: False, used: False")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_noise()
        for message in (
            "The number of training batches (8) is smaller than the logging interval Trainer(log_every_n_steps=10).",
            "Checkpoint directory /r/version_0/checkpoints exists and is not empty.",
            "LightningCLI's args parameter is intended to run from within Python like if it were from the command "
            "line. To prevent mistakes ...",
            "The dirpath has changed from '/a' to '/b', therefore `best_model_score` ... won't be reloaded.",
        ):
            warnings.warn(message, UserWarning, stacklevel=1)
    assert [str(w.message)[:21] for w in caught] == ["The dirpath has chang"]  # what a moved run forgets stays


def _summary_lines(text: str) -> dict[str, str]:
    """The summary's best line and its per-epoch "(best ...)" figures, from the log."""
    best = re.search(r"val/acc          last (\d\.\d{4}), best (\d\.\d{4}) at epoch (\d+)", text)
    return {"best": best.group(0) if best else "", "epochs": re.findall(r"\(best (\d\.\d{4})\)", text)}


def test_a_resumed_run_reports_the_best_and_the_wall_time_of_the_whole_run(tmp_path: Path, caplog) -> None:
    """Stopped after 2 of 4 epochs and resumed from last.ckpt, the summary names the same best value and epoch
    as the run that went through, and its wall time counts on from the checkpoint's."""

    class StopAfter(L.Callback):  # the interruption: the run stops after this epoch, as a Ctrl-C there would
        def __init__(self, epoch: int | None) -> None:
            self.epoch = epoch

        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            trainer.should_stop = trainer.should_stop or trainer.current_epoch == self.epoch

    def fit(folder: Path, stop_after: int | None = None, ckpt_path: str | None = None) -> str:
        torch.manual_seed(0)
        trainer, _ = _trainer(folder, enable_progress_bar=False, max_epochs=4, limit_train_batches=4)
        trainer.callbacks.append(StopAfter(stop_after))
        module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=3e-3, warmup_epochs=0)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            trainer.fit(module, DigitsDataModule(batch_size=32), ckpt_path=ckpt_path)
        return caplog.text

    through = _summary_lines(fit(tmp_path / "through"))
    first = fit(tmp_path / "parts", stop_after=1)
    held = torch.load(tmp_path / "parts" / "checkpoints" / "last.ckpt", weights_only=False)
    record = next(state for key, state in held["callbacks"].items() if key.startswith("RunSummary"))
    assert record["best"] is not None and record["elapsed_s"] > 0
    resumed_text = fit(tmp_path / "parts", ckpt_path=str(tmp_path / "parts" / "checkpoints" / "last.ckpt"))
    resumed = _summary_lines(resumed_text)
    assert resumed["best"] and resumed["best"] == through["best"]
    # each epoch's "(best ...)" (Lightning ends the epoch a checkpoint was saved in again on resume: its line twice)
    assert _summary_lines(first)["epochs"] + resumed["epochs"][1:] == through["epochs"]
    total = re.search(r"fit ended after 4 epochs, 16 steps, (\d+\.\d) s \((\d+\.\d) s since the resume\)", resumed_text)
    assert total is not None and float(total.group(1)) >= record["elapsed_s"] - 0.05 + float(total.group(2)) - 0.1
    assert "nothing trained" not in first + resumed_text
    # resumed once more with the same 4 epochs: Lightning trains nothing, and the summary says so and why
    again = fit(tmp_path / "parts", ckpt_path=str(tmp_path / "parts" / "checkpoints" / "last.ckpt"))
    assert "  nothing trained  the checkpoint had already trained 4 epochs of --trainer.max_epochs 4; raise " in again
    value, epoch = re.search(r"best (\d\.\d{4}) at epoch (\d+)", through["best"]).groups()
    assert f"val/acc          best {value} at epoch {epoch} (recorded in the checkpoint)" in again


def test_the_epoch_training_loss_is_the_mean_of_the_epochs_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False, log_every_n_steps=1, limit_train_batches=3)
    trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    with (Path(trainer.log_dir) / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for epoch in range(3):
        steps = [float(r["train/loss"]) for r in rows if r.get("train/loss") and int(r["epoch"]) == epoch]
        means = [float(r["train/loss_epoch"]) for r in rows if r.get("train/loss_epoch") and int(r["epoch"]) == epoch]
        assert len(steps) == 3 and means == [pytest.approx(sum(steps) / 3, rel=1e-5)], (epoch, steps, means)


def test_the_baseline_line_says_when_the_difference_is_within_the_validation_noise() -> None:
    from crate.lit.run_summary import _noise

    # 0.72 against 0.70 on 150 images: 3 images apart; two standard errors of the difference are about 0.10
    assert _noise(0.72, {"rbf_svm": 0.70, "logistic": 0.60, "val_images": 150}) == (
        "; +3 images of 150 against the better baseline, within noise"
    )
    assert _noise(0.82, {"rbf_svm": 0.40, "logistic": 0.41, "val_images": 5000}).endswith(
        "+2050 images of 5,000 against the better baseline, beyond noise"
    )
    assert _noise(0.5, {"rbf_svm": 0.4, "logistic": 0.4}) == ""  # an older record without the split's size


def test_a_run_that_validated_part_of_its_split_is_not_set_against_the_baselines(tmp_path: Path) -> None:
    """The baselines score every validation image; a run whose validation read fewer batches
    (--trainer.limit_val_batches, fast_dev_run) measured other images, so the summary does not count the images
    between them, and says how much of the split the run read."""
    import math

    from crate.lit.run_summary import _baseline_line, _partial_validation

    data = DigitsDataModule(batch_size=64)
    data.setup("fit")
    batches = math.ceil(len(data.val_set) / 64)  # 360 validation images in batches of 64
    scores = {"rbf_svm": 0.70, "logistic": 0.60, "train_images": 1437, "val_images": len(data.val_set)}
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
    lines = {}
    for limit in (1, None):
        trainer, _ = _trainer(tmp_path / str(limit), max_epochs=1, limit_val_batches=limit, enable_progress_bar=False)
        trainer.fit(module, DigitsDataModule(batch_size=64))
        lines[limit] = _baseline_line(0.5, scores, _partial_validation(trainer))
    assert lines[1].endswith(
        f"not set against this run's 0.5000, which read 1 of the {batches} validation batches "
        "(--trainer.limit_val_batches or fast_dev_run)"
    )
    assert "scored on all 360 validation images" in lines[1] and "against the better baseline" not in lines[1]
    assert "this run 0.5000" in lines[None] and "-72 images of 360 against the better baseline" in lines[None]


def test_an_evaluation_without_a_checkpoint_says_which_weights_it_measured(tmp_path: Path, caplog) -> None:
    """A new process's validate without --ckpt_path scores the model as built: chance, for an untrained one."""
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
    with pytest.warns(UserWarning, match="validate without --ckpt_path uses the untrained model"):
        with caplog.at_level(logging.INFO):
            trainer.validate(module, DigitsDataModule(batch_size=8))
    assert "val of the untrained model (random initialization): val/acc" in caplog.text
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False)  # a tag names weights; timm loads them if asked
    tagged = ImageClassifier("crate_nano_patch4_32.digits", in_chans=1, img_size=32)
    with pytest.warns(UserWarning, match=r"--model.model_kwargs '\{pretrained: true\}' the weights of the tag"):
        trainer.validate(tagged, DigitsDataModule(batch_size=8))

    caplog.clear()
    shipped = Path(__file__).resolve().parents[1] / "checkpoints" / "crate_nano_patch4_32.digits.safetensors"
    built = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, pretrained_file=str(shipped))
    trainer, _ = _trainer(tmp_path, enable_progress_bar=False)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        trainer.validate(built, DigitsDataModule(batch_size=8))
    assert f"val of the weights it was built from ({shipped}): val/acc" in caplog.text
    assert not [w for w in caught if "untrained" in str(w.message)]


def test_an_evaluation_of_a_checkpoint_is_not_said_to_be_untrained(tmp_path: Path, caplog, monkeypatch) -> None:
    """Lightning restores ``ckpt_path`` after the callbacks' ``setup``: validate and predict of a run's file name
    that file, and no warning calls their model untrained (it did, read at ``setup``)."""
    monkeypatch.chdir(tmp_path)  # the summary names a file relative to the working folder
    trainer, best = _trainer(tmp_path, max_epochs=1, enable_progress_bar=False)
    trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    for run in ("validate", "predict"):
        caplog.clear()
        evaluator, _ = _trainer(tmp_path / run, enable_progress_bar=False)
        fresh = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
            warnings.simplefilter("always")
            getattr(evaluator, run)(fresh, DigitsDataModule(batch_size=8), ckpt_path=best.last_model_path)
        assert not [w for w in caught if "untrained" in str(w.message)], run
        if run == "validate":
            assert "val of checkpoints/last.ckpt: val/acc" in caplog.text


def test_a_run_that_validates_on_cifar_s_test_split_says_so_in_its_summary_and_card(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    """torchvision's CIFAR files hold a train and a test split only, so CIFARDataModule validates on the official
    test split: the best checkpoint is chosen on test images. The run summary, a validation of it and its export
    card say so instead of calling the figure a held-out validation figure; the image-folder data does not."""
    from helpers import cifar_arrays

    from crate.export import export_checkpoint
    from crate.lit import CIFARDataModule, cli_main

    arrays = cifar_arrays(seed=0, train_size=24, test_size=12)
    monkeypatch.setattr(CIFARDataModule, "_open", lambda self, train, download: arrays[train])
    monkeypatch.chdir(tmp_path)
    config = Path(__file__).resolve().parents[1] / "configs" / "crate_tiny_cifar10.yaml"
    args = ["--config", str(config), "--model.model_name", "crate_nano_patch4_32", "--model.model_kwargs", "{depth: 1}"]
    args += ["--data.download", "false", "--data.num_workers", "0", "--data.batch_size", "8"]
    args += ["--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false", "--log_root", "logs"]
    note = (
        "is read on the data's official test split, so a checkpoint chosen by it has no unbiased test figure: "
        "torchvision's CIFAR files hold a training and a test split only"
    )
    with caplog.at_level(logging.INFO):
        cli_main(["fit", *args, "--trainer.max_epochs", "1"])
    assert f"note             val/acc {note}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cli_main(["validate", *args, "--ckpt_path", "last"])
    assert f"note             val {note}" in caplog.text
    run = tmp_path / "logs" / "crate_tiny_cifar10" / "version_0"
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "tiny.safetensors")
    assert card["val_images"] == 12 and "make cifar10-data" in card["val_split_note"]
    text = (tmp_path / "tiny.md").read_text()
    line = next(line for line in text.splitlines() if "measured on this file" in line)
    assert "on the 12 images of the data's official test split, which its run validated on" in line
    assert "validation images its run held out" not in text
    assert "- no unbiased test figure: the run validated on its data's official test split and chose its" in text

    caplog.clear()  # the digits hold out images of their own: no note
    trainer, _ = _trainer(tmp_path / "digits", max_epochs=1, enable_progress_bar=False)
    with caplog.at_level(logging.INFO):
        trainer.fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8))
    assert "fit ended" in caplog.text and "note" not in caplog.text


def test_a_fit_stopped_by_early_stopping_says_so_and_one_that_ran_its_epochs_does_not(tmp_path: Path, caplog) -> None:
    """A fit given 6 epochs that ended after 2 said only "fit ended after 2 epochs": the reason was Lightning's
    EarlyStopping, whose own account is now a line of the summary."""
    from lightning.pytorch.callbacks import EarlyStopping

    for patience, min_delta in ((1, 2.0), (10, 0.0)):  # no accuracy rises by 2: stopped at the second check
        trainer, _ = _trainer(tmp_path / str(patience), enable_progress_bar=False, max_epochs=4)
        stopper = EarlyStopping(monitor="val/acc", mode="max", patience=patience, min_delta=min_delta)
        trainer.callbacks.append(stopper)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            trainer.fit(
                ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8)
            )
        said = [line for line in caplog.text.splitlines() if "stopped early" in line]
        if patience == 1:
            assert trainer.current_epoch == 2 and "fit ended after 2 epochs, 4 steps" in caplog.text
            assert len(said) == 1 and said[0].endswith(
                "stopped early    EarlyStopping (its own account: Monitored metric val/acc did not improve in the "
                f"last 1 records. Best score: {stopper.best_score:.3f}. Signaling Trainer to stop.)"
            )
        else:
            assert trainer.current_epoch == 4 and not said


def test_a_resume_given_another_early_stopping_patience_says_the_checkpoint_s_is_kept(tmp_path: Path) -> None:
    """Lightning restores EarlyStopping's patience with its counters: a resume given patience 5 after a run of
    patience 1 stopped kept 1 and stopped again at once, without a word. It is said; the same patience says
    nothing."""
    from lightning.pytorch.callbacks import EarlyStopping

    def run(patience: int, epochs: int, ckpt: Path | None = None) -> L.Trainer:
        trainer, _ = _trainer(tmp_path, enable_progress_bar=False, max_epochs=epochs)
        trainer.callbacks.append(EarlyStopping(monitor="val/acc", mode="max", patience=patience, min_delta=2.0))
        module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
        trainer.fit(module, DigitsDataModule(batch_size=8), ckpt_path=ckpt)
        return trainer

    first = run(1, 4)
    first.save_checkpoint(tmp_path / "stopped.ckpt")
    assert first.current_epoch == 2
    with pytest.warns(UserWarning, match=r"EarlyStopping keeps the checkpoint's patience 1 \(and its 1 validations "):
        resumed = run(5, 6, tmp_path / "stopped.ckpt")
    assert resumed.early_stopping_callback.patience == 1  # Lightning's restore, now said
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="EarlyStopping keeps")
        run(1, 6, tmp_path / "stopped.ckpt")


def test_a_figure_read_on_part_of_its_split_says_how_much(tmp_path: Path, caplog) -> None:
    """``--trainer.limit_val_batches 2`` of 6: the summary gave the figure of 2 batches as the split's, in the fit's
    summary and in validate's line; read whole, nothing is added."""
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
    data = DigitsDataModule(batch_size=64)  # 360 validation images: 6 batches
    trainer, best = _trainer(tmp_path, enable_progress_bar=False, max_epochs=1, limit_val_batches=2)
    with caplog.at_level(logging.INFO):
        trainer.fit(module, data)
    assert re.search(
        r"val/acc +last \d\.\d{4}, best .* \(on 2 of its 6 batches: --trainer.limit_val_batches", caplog.text
    )
    for limit, said in ((3, "(on 3 of its 6 batches: --trainer.limit_val_batches or fast_dev_run)"), (1.0, None)):
        caplog.clear()
        evaluator = L.Trainer(
            limit_val_batches=limit, logger=False, callbacks=[RunSummary()], enable_progress_bar=False
        )
        with caplog.at_level(logging.INFO):
            evaluator.validate(module, data, ckpt_path=best.last_model_path)
        line = next(line for line in caplog.text.splitlines() if "val of " in line)
        assert (said in line) if said else "batches" not in line


class _SlowStep(L.Callback):
    def on_train_batch_end(self, *args) -> None:
        time.sleep(0.4)


def test_a_fit_ended_by_its_time_limit_says_so_and_how_far_its_schedule_went(tmp_path: Path, caplog) -> None:
    """--trainer.max_time ended a 10-epoch fit after its first steps with nothing said but "fit ended after 1 of the
    first epoch's 2 steps": the learning-rate schedule, planned over 20 steps, stopped near its start. A limit of
    0 trains nothing and says that limit (it said max_epochs); a limit the run stays within says nothing."""
    for limit, epochs in (("00:00:00:01", 10), ("00:00:00:00", 10), ("00:01:00:00", 2)):
        folder = tmp_path / limit.replace(":", "")
        trainer, _ = _trainer(folder, enable_progress_bar=False, max_epochs=epochs, max_time=limit)
        trainer.callbacks.append(_SlowStep())  # 0.4 s a step: a one-second limit ends the run early in its 20
        caplog.clear()
        with caplog.at_level(logging.INFO):
            trainer.fit(
                ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32), DigitsDataModule(batch_size=8)
            )
        said = [line for line in caplog.text.splitlines() if "stopped early" in line or "nothing trained" in line]
        if limit == "00:00:00:01":
            timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
            assert 1 <= trainer.global_step < 20 and len(said) == 1, caplog.text
            assert said[0] == (
                f"  stopped early    --trainer.max_time reached after {timer.time_elapsed():.1f} s of "
                f"training, at step {trainer.global_step} of the 20 its learning-rate schedule planned (resume with "
                "--ckpt_path last and a longer --trainer.max_time)"
            )
        elif limit == "00:00:00:00":
            assert trainer.global_step == 0 and said == [
                "  nothing trained  --trainer.max_time reached before the first step"
            ]
        else:
            assert trainer.global_step == 4 and not said


def test_a_monitor_whose_mode_reverses_its_metric_is_said_before_the_first_step() -> None:
    """Lightning's EarlyStopping and ModelCheckpoint default to mode "min": on val/acc the digits run stopped after 4
    of 8 epochs as "not improving" while its accuracy rose from 0.22 to 0.92. Said for an accuracy under "min" and a
    loss under "max", and not for the modes that fit them or a metric of no known direction."""
    from lightning.pytorch.callbacks import EarlyStopping

    from crate.lit.run_summary import _warn_of_reversed_monitors

    reversed_ = [EarlyStopping(monitor="val/acc"), ModelCheckpoint(monitor="val/loss", mode="max")]
    fitting = [EarlyStopping(monitor="val/acc", mode="max"), ModelCheckpoint(monitor="val/loss"), EarlyStopping("x")]
    with pytest.warns(UserWarning) as caught:
        _warn_of_reversed_monitors(L.Trainer(callbacks=reversed_ + fitting, logger=False))
    said = [str(w.message) for w in caught if "monitors" in str(w.message)]
    assert said == [
        "EarlyStopping monitors val/acc with mode 'min', which takes a higher val/acc for no improvement, though "
        "higher is better: it would stop a run that is still learning; give it mode 'max' (--trainer.callbacks.mode "
        "max)",
        "ModelCheckpoint monitors val/loss with mode 'max', which takes a lower val/loss for no improvement, though "
        "lower is better: it would keep the worst checkpoints; give it mode 'min' (--trainer.callbacks.mode min)",
    ]
