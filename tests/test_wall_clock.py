"""The fit's logged wall times (``time/epoch_s``, ``time/elapsed_s``) across a resume, on a clock the test
moves: one second per training batch, ten per validation batch, a hundred while the run is stopped."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from crate.lit.fault_tolerance import InterruptCheckpoint
from crate.lit.wall_clock import WallClock

BATCHES, VAL_BATCHES = 4, 2  # an epoch: 4 seconds of training, 20 of validation


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ticks(Callback):
    """Moves the clock as the loop runs; stops the fit, as SIGTERM does, after a given training batch or at the
    first validation batch."""

    def __init__(self, clock: Clock, stop_after_batch: int | None = None, stop_in_validation: bool = False) -> None:
        self.clock, self.stop_after_batch, self.stop_in_validation = clock, stop_after_batch, stop_in_validation
        self.batches = 0

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.clock.now += 1
        self.batches += 1
        if self.batches == self.stop_after_batch:
            raise SIGTERMException

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.clock.now += 10
        if self.stop_in_validation:
            raise SIGTERMException


def _fit(root: Path, clock: Clock, ticks: Ticks, resume: bool = False, epochs: int = 2) -> L.Trainer:
    """Fit a small model for ``epochs``; the zoo's interrupt checkpoint is ``root/ckpt/last.ckpt``."""
    wall = WallClock()
    wall.clock = clock
    trainer = L.Trainer(
        max_epochs=epochs,
        limit_train_batches=BATCHES,
        limit_val_batches=VAL_BATCHES,
        num_sanity_val_steps=0,
        logger=CSVLogger(root, name="run", version=len(list(root.glob("run/version_*")))),  # one folder a fit
        log_every_n_steps=1,
        callbacks=[wall, ticks, ModelCheckpoint(dirpath=root / "ckpt", save_last=True), InterruptCheckpoint()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    torch.manual_seed(0)
    trainer.fit(BoringModel(), ckpt_path=str(root / "ckpt" / "last.ckpt") if resume else None)
    return trainer


def _epoch_seconds(root: Path) -> dict[int, float]:
    """Each epoch's logged time, over the fits in the order they ran."""
    logged = {}
    for version in range(len(list(root.glob("run/version_*")))):
        log = root / "run" / f"version_{version}" / "metrics.csv"
        if not log.is_file():  # a fit stopped before it logged a row
            continue
        with open(log) as f:
            rows = [r for r in csv.DictReader(f) if r.get("time/epoch_s")]
        for row in rows:
            assert int(row["epoch"]) not in logged, "an epoch's time logged twice"
            logged[int(row["epoch"])] = float(row["time/epoch_s"])
    return logged


def test_an_uninterrupted_fit_logs_each_epoch_s_training_and_validation_time(tmp_path: Path) -> None:
    clock = Clock()
    _fit(tmp_path, clock, Ticks(clock))
    assert _epoch_seconds(tmp_path) == {0: 24.0, 1: 24.0}


@pytest.mark.parametrize("where", ["mid_epoch", "validation"])
def test_an_epoch_resumed_into_logs_its_whole_time_without_the_pause(tmp_path: Path, where: str) -> None:
    clock = Clock()
    stop = Ticks(clock, stop_after_batch=BATCHES + 2) if where == "mid_epoch" else Ticks(clock, stop_in_validation=True)
    with pytest.raises(SIGTERMException):
        _fit(tmp_path, clock, stop)
    clock.now += 100  # stopped
    _fit(tmp_path, clock, Ticks(clock), resume=True)
    if where == "mid_epoch":  # the second epoch: 2 batches before the stop, 2 after, then its validation
        assert _epoch_seconds(tmp_path) == {0: 24.0, 1: 2 + 2 + 20}
    else:  # the first: its 4 batches and one validation batch before the stop, then its whole validation again
        assert _epoch_seconds(tmp_path) == {0: 4 + 10 + 20, 1: 24.0}


def test_a_checkpoint_without_the_epoch_s_seconds_leaves_that_epoch_s_time_out(tmp_path: Path) -> None:
    clock = Clock()
    with pytest.raises(SIGTERMException):
        _fit(tmp_path, clock, Ticks(clock, stop_after_batch=BATCHES + 2))
    ckpt = tmp_path / "ckpt" / "last.ckpt"
    held = torch.load(ckpt, weights_only=False)
    for state in held["callbacks"].values():
        state.pop("epoch_elapsed_s", None)
    ckpt.unlink()  # the link: written over as a file
    torch.save(held, ckpt)
    _fit(tmp_path, clock, Ticks(clock), resume=True)
    assert _epoch_seconds(tmp_path) == {0: 24.0}  # absent, rather than the part after the resume


def test_a_resume_from_an_epoch_s_end_counts_the_next_epoch_alone(tmp_path: Path) -> None:
    clock = Clock()
    _fit(tmp_path, clock, Ticks(clock), epochs=1)
    clock.now += 100
    _fit(tmp_path, clock, Ticks(clock), resume=True)
    assert _epoch_seconds(tmp_path) == {0: 24.0, 1: 24.0}
