"""The Trainer's batch limits given as whole numbers: that many batches, in the run and in the config it saves.

The Trainer reads an int limit as a number of batches and a float as a share of them (``1.0``: all of them).
LightningCLI parses ``--trainer.limit_train_batches 1`` (and ``1`` in a YAML config) as ``1.0`` and saves it so,
so a one-batch smoke test trained a whole epoch, and its saved ``config.yaml`` did again when reused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.cli import SaveConfigCallback

from .config_program import config_files, config_section

__all__ = ["BATCH_LIMITS", "WholeBatchCountsConfig", "whole_batch_counts"]

BATCH_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")


def whole_batch_counts(config: Any, argv: list[str]) -> dict[str, int]:
    """The batch limits given as whole numbers, on the command line or in a YAML config, as the ints the Trainer is
    to take. A limit written with a point (``1.0``) stays a share."""
    given: dict[str, str] = {}
    for file in config_files(argv):  # the command line's later values win, as in the parse
        trainer = config_section(file, "trainer")
        given.update({key: str(trainer[key]) for key in BATCH_LIMITS if key in trainer})
    for index, arg in enumerate(argv):
        key, equals, value = arg.removeprefix("--trainer.").partition("=")
        if arg.startswith("--trainer.") and key in BATCH_LIMITS:
            given[key] = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
    trainer = config.get("trainer") or {}
    return {key: int(text) for key, text in given.items() if text.isdigit() and trainer.get(key) == int(text)}


class WholeBatchCountsConfig(SaveConfigCallback):
    """Lightning's ``SaveConfigCallback`` whose saved config writes a batch limit the Trainer counts in batches as
    that int (jsonargparse writes ``1`` as ``1.0``, which a run started from that config reads as every batch).
    ``fast_dev_run`` sets the limits itself; its config is left as parsed."""

    _log_dir: str | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.already_saved and self.save_to_log_dir:
            # Trainer.log_dir broadcasts rank zero's folder, so every process reads it here: save_config runs on
            # rank zero only, and a broadcast there alone left the processes of a DDP run waiting on each other
            self._log_dir = trainer.log_dir
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        counts = {key: getattr(trainer, key) for key in BATCH_LIMITS if type(getattr(trainer, key, None)) is int}
        if not counts or trainer.fast_dev_run or not self.save_to_log_dir or self._log_dir is None:
            return
        path = str(Path(self._log_dir) / self.config_filename)
        fs = get_filesystem(path)
        with fs.open(path, "r") as file:
            lines = file.read().split("\n")
        for index, line in enumerate(lines):
            key, colon, _ = line.strip().partition(":")
            if colon and key in counts and line.startswith("  ") and not line.startswith("   "):
                lines[index] = f"  {key}: {counts[key]}"  # a key of the trainer section, at its indent
        with fs.open(path, "w") as file:
            file.write("\n".join(lines))
