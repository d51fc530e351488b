"""A CSV logger that continues a run's ``metrics.csv`` instead of deleting it.

Lightning's CSV writer removes an existing ``metrics.csv`` when its folder is not empty. A run resumed,
validated or tested in its own folder (``train.py --ckpt_path``) must keep its curves: this writer reads
the existing columns and appends to the file.
"""

from __future__ import annotations

import csv
import os

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

__all__ = ["ContinuingCSVLogger"]


class _ContinuingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
                self.metrics_keys = list(csv.DictReader(handle).fieldnames or [])


class ContinuingCSVLogger(CSVLogger):
    """``CSVLogger`` whose ``metrics.csv`` grows across the runs that share its version folder."""

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            os.makedirs(self.log_dir, exist_ok=True)
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment
