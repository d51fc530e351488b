"""A CSV logger that continues a run's ``metrics.csv`` instead of deleting it.

Lightning's CSV writer removes an existing ``metrics.csv`` when its folder is not empty. A run resumed,
validated or tested in its own folder (``train.py --ckpt_path``) must keep its curves: this writer reads
the existing columns and appends to the file.

A run resumed from a checkpoint older than its last rows (``--ckpt_path best``, an earlier file, or a crash
after the last save) trains those steps again. The rows logged after the checkpoint belong to the continuation
it abandons, so they leave ``metrics.csv`` for ``metrics.superseded.csv`` beside it (TensorBoard's
``purge_step`` hides such events the same way): the file then holds one history, and a reader that takes an
epoch's last value, or the last epoch, reads the run that went on.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info

__all__ = ["SUPERSEDED_FILE", "ContinuingCSVLogger", "set_aside_rows_after"]

SUPERSEDED_FILE = "metrics.superseded.csv"


def _steps_done(row: dict[str, str]) -> int:
    """How many optimizer steps the weights had taken when the row was logged: Lightning's own rows (they carry
    the epoch) give the index of the step they followed, rows logged with ``step=trainer.global_step`` (the
    coding-rate monitor's) the count."""
    step = int(float(row["step"]))
    return step + 1 if row.get("epoch") else step


def _write(path: Path, fields: list[str], rows: list[dict[str, str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def set_aside_rows_after(metrics_file: Path, step: int) -> int:
    """Move the rows of ``metrics_file`` logged after ``step`` optimizer steps into ``metrics.superseded.csv``
    in its folder (appended to any set aside before); returns how many moved."""
    with open(metrics_file, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = list(reader.fieldnames or []), list(reader)
    if "step" not in fields:
        return 0
    later = [row for row in rows if row.get("step") and _steps_done(row) > step]
    if not later:
        return 0
    superseded = metrics_file.with_name(SUPERSEDED_FILE)
    before: list[dict[str, str]] = []
    if superseded.is_file():
        with open(superseded, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            fields = list(dict.fromkeys([*(reader.fieldnames or []), *fields]))
            before = list(reader)
    _write(superseded, fields, before + later)
    kept = [row for row in rows if not (row.get("step") and _steps_done(row) > step)]
    with open(metrics_file, encoding="utf-8", newline="") as handle:
        own_fields = list(csv.DictReader(handle).fieldnames or [])
    _write(metrics_file, own_fields, kept)
    return len(later)


class _ContinuingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
                self.metrics_keys = list(csv.DictReader(handle).fieldnames or [])


class ContinuingCSVLogger(CSVLogger):
    """``CSVLogger`` whose ``metrics.csv`` grows across the runs that share its version folder.

    Args:
        resumed_step: the optimizer steps of the checkpoint a resumed run starts from; the rows logged after
            them are set aside first (:func:`set_aside_rows_after`). None: nothing is resumed.
    """

    def __init__(self, *args: Any, resumed_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resumed_step = resumed_step

    @property
    @rank_zero_experiment  # as Lightning's own: the other processes of a distributed run write nothing
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            os.makedirs(self.log_dir, exist_ok=True)
            metrics = Path(self.log_dir, ExperimentWriter.NAME_METRICS_FILE)
            if self.resumed_step is not None and metrics.is_file():
                if moved := set_aside_rows_after(metrics, self.resumed_step):
                    rank_zero_info(
                        f"resumed at step {self.resumed_step}: the {moved} rows metrics.csv logged after it (the "
                        f"continuation this run replaces) are moved to {SUPERSEDED_FILE} beside it"
                    )
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment
