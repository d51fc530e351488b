"""The LightningCLI of ``train.py``: YAML configs, data linked to the model, TensorBoard + CSV logs."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from crate.models import CheckpointError

from .data import ImageDataModule
from .fault_tolerance import InterruptCheckpoint, NonFiniteGuard
from .module import ImageClassifier
from .random_state import RandomStateCheckpoint
from .rate_monitor import CodingRateMonitor

__all__ = ["CrateCLI", "cli_main", "resolve_checkpoint", "run_loggers"]

# TensorBoard creates the shared version folder first; the CSV logger's warning about it is noise.
warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")


def run_loggers(log_root: str, run_name: str) -> list[Logger]:
    """TensorBoard and CSV loggers writing into one folder, ``log_root/run_name/version_N``.

    Checkpoints land in that folder's ``checkpoints/``.
    """
    tensorboard = TensorBoardLogger(save_dir=log_root, name=run_name, default_hp_metric=False)
    csv = CSVLogger(save_dir=log_root, name=run_name, version=tensorboard.version)
    return [tensorboard, csv]


def _check_readable(path: Path) -> None:
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:
        others = sorted(str(p) for p in path.resolve().parent.glob("*.ckpt") if p.resolve() != path.resolve())
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated ({type(err).__name__}); it was left in place, and so were "
            f"the other checkpoints of the run: {others or 'none'}. Pass one of them with --ckpt_path."
        ) from err


def resolve_checkpoint(ckpt_path: str | None, log_root: str, run_name: str) -> str | None:
    """``last``: the newest ``last*.ckpt`` of any version of the run (Lightning looks only in the new
    version's folder); a path: checked to exist and to be readable. ``best``/``hpc`` pass through."""
    if ckpt_path is None or ckpt_path in ("best", "hpc", "registry"):
        return ckpt_path
    if ckpt_path == "last":
        found = list(Path(log_root, run_name).glob("version_*/checkpoints/last*.ckpt"))
        found = [p for p in found if p.exists()]
        if not found:
            rank_zero_warn(f"--ckpt_path last: no last checkpoint under {Path(log_root, run_name)}; starting fresh")
            return None
        path = max(found, key=lambda p: p.stat().st_mtime)
    else:
        path = Path(ckpt_path)
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {path} does not exist (--ckpt_path)")
    _check_readable(path)
    return str(path)


class CrateCLI(LightningCLI):
    """``LightningCLI`` over :class:`ImageClassifier` and the zoo's DataModules.

    Adds ``run_name`` and ``log_root`` (logs and checkpoints go to ``log_root/run_name/version_N``),
    ``checkpoint`` (best by ``val/acc``) and ``latest_checkpoint`` (the latest state, linked as
    ``last.ckpt``) sections, ``rate_monitor`` (the :class:`CodingRateMonitor`, on by default),
    ``nonfinite_guard``, ``interrupt_checkpoint`` and ``random_state`` (fault tolerance and exact
    resume); resolves ``--ckpt_path last``
    across the run's versions; and links the data's ``num_classes``, ``in_chans`` and ``img_size`` to
    the model.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_name", type=str, default="run", help="Name of the run's log folder.")
        parser.add_argument("--log_root", type=str, default="logs", help="Folder that holds all runs.")
        # Two checkpoint callbacks: the best by val/acc, and the latest state (last.ckpt links to it).
        # Lightning's save_last refreshes last.ckpt only when a top-k file is written, so with a monitor
        # it would stay at the best epoch; the second callback keeps it current for --ckpt_path last.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "latest_checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/acc",
                "checkpoint.mode": "max",
                "checkpoint.save_last": False,
                "checkpoint.filename": "best-epoch{epoch:03d}-acc{val/acc:.4f}",
                "checkpoint.auto_insert_metric_name": False,
                "latest_checkpoint.monitor": None,
                "latest_checkpoint.save_top_k": 1,
                "latest_checkpoint.save_last": "link",
                "latest_checkpoint.filename": "latest-epoch{epoch:03d}-step{step:06d}",
                "latest_checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_lightning_class_args(CodingRateMonitor, "rate_monitor")
        parser.add_lightning_class_args(NonFiniteGuard, "nonfinite_guard")
        parser.add_lightning_class_args(InterruptCheckpoint, "interrupt_checkpoint")
        parser.add_lightning_class_args(RandomStateCheckpoint, "random_state")
        for key in ("num_classes", "in_chans", "img_size"):
            parser.link_arguments(f"data.{key}", f"model.{key}", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if "ckpt_path" in config:
            config["ckpt_path"] = resolve_checkpoint(config["ckpt_path"], config["log_root"], config["run_name"])

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("logger") in (None, True) and "logger" not in kwargs:
            config = self.config[self.subcommand] if self.subcommand else self.config
            kwargs["logger"] = run_loggers(str(Path(config["log_root"])), config["run_name"])
        return super().instantiate_trainer(**kwargs)


def cli_main(args: list[str] | None = None, run: bool = True) -> CrateCLI:
    return CrateCLI(
        ImageClassifier,
        ImageDataModule,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )
