"""The LightningCLI of ``train.py``: YAML configs, data linked to the model, TensorBoard + CSV logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from .data import ImageDataModule
from .module import ImageClassifier
from .rate_monitor import CodingRateMonitor

__all__ = ["CrateCLI", "cli_main", "run_loggers"]


def run_loggers(log_root: str, run_name: str) -> list[Logger]:
    """TensorBoard and CSV loggers writing into one folder, ``log_root/run_name/version_N``.

    Checkpoints land in that folder's ``checkpoints/``.
    """
    tensorboard = TensorBoardLogger(save_dir=log_root, name=run_name, default_hp_metric=False)
    csv = CSVLogger(save_dir=log_root, name=run_name, version=tensorboard.version)
    return [tensorboard, csv]


class CrateCLI(LightningCLI):
    """``LightningCLI`` over :class:`ImageClassifier` and the zoo's DataModules.

    Adds ``run_name`` and ``log_root`` (logs and checkpoints go to ``log_root/run_name/version_N``),
    ``checkpoint`` (best by ``val/acc``) and ``latest_checkpoint`` (the latest state, linked as
    ``last.ckpt``) sections, a ``rate_monitor`` section (the
    :class:`CodingRateMonitor`, on by default), and links the data's ``num_classes``,
    ``in_chans`` and ``img_size`` to the model.
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
        for key in ("num_classes", "in_chans", "img_size"):
            parser.link_arguments(f"data.{key}", f"model.{key}", apply_on="instantiate")

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
