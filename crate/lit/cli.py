"""The LightningCLI of ``train.py``: YAML configs, data linked to the model, TensorBoard + CSV logs."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import lightning as L
import timm
import torch
from jsonargparse import ArgumentError, Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from timm.layers import to_2tuple

from crate.errors import innermost_refusal, keys_help, one_line, parser_problem
from crate.models import Checkpoint, CheckpointError, hub_weights, read_checkpoint
from crate.output_paths import OutputPathError, check_output_folder
from crate.run.record import PROGRAMS, run_config
from crate.run.resume_check import check_evaluation_data, check_resume_data, check_resume_recipe

from .batch_limits import WholeBatchCountsConfig, whole_batch_counts
from .built_weights import check_built_head, warn_of_seen_images
from .checkpoint_folder import SameFolderCheckpoints
from .ckpt_path import check_checkpoint_model, check_readable, of_given_run, resolve_checkpoint, run_location
from .classical_baseline import ClassicalBaseline
from .config_program import config_files, program_of_configs
from .cpu_precision import warn_if_slow_bf16
from .csv_log import ContinuingCSVLogger
from .data import ImageDataModule, ImageFolderDataModule
from .data.folder import DataError, DataRootError
from .epoch_figures import EpochFiguresOnResume
from .fault_tolerance import InterruptCheckpoint, NonFiniteError, NonFiniteGuard, saves_checkpoints
from .final_state import FinalStateCheckpoint
from .half_precision import warn_if_float16_weights
from .known_noise import quiet_known_noise
from .module import ImageClassifier
from .predictions import PredictionWriter
from .random_state import RandomStateCheckpoint
from .rate_monitor import CodingRateMonitor
from .run_record import update_batch
from .run_summary import RunSummary
from .snapshots import WeightSnapshots
from .wall_clock import WallClock

__all__ = ["CrateCLI", "cli_main", "run_loggers"]


LOG_ROOT = "logs"  # the folder of the runs when neither --log_root nor --trainer.default_root_dir is given
# trainer settings Lightning takes at 0 and then divides by at the first batch (a ZeroDivisionError traceback)
POSITIVE_TRAINER_SETTINGS = {
    "val_check_interval": "a share of each epoch in (0, 1] or a number of training batches >= 1",
    "check_val_every_n_epoch": "a number of epochs >= 1 (or null: validate every val_check_interval batches)",
    "log_every_n_steps": "a number of steps >= 1 (--trainer.logger false logs nothing)",
    "accumulate_grad_batches": "a number of batches >= 1",
}
SIGTERM_EXIT = 128 + 15  # the shell's status for a process ended by SIGTERM
SIGINT_EXIT = 128 + 2  # and by Ctrl-C (SIGINT)


def run_loggers(
    log_root: str,
    run_name: str,
    version: int | None = None,
    resumed_step: int | None = None,
    evaluation: str | None = None,
) -> list[Logger]:
    """TensorBoard and CSV loggers writing into one folder, ``log_root/run_name/version_N`` (a new N unless
    ``version`` is given: resuming, validating or testing a run's checkpoint logs into that run's folder;
    ``resumed_step``: the steps of the checkpoint a resume starts from, after which ``metrics.csv``'s rows are
    set aside).

    ``evaluation`` (``"validate"``, ``"test"``, ``"predict"``): an evaluation of the run's checkpoint logs (and
    ``predict`` writes its predictions) into ``version_N/<evaluation>/``, apart from the training history.
    Lightning logs an evaluation at epoch 0, step 0 whatever the checkpoint's, so in the run's own
    ``metrics.csv`` and TensorBoard curve it would read as the accuracy of the untrained start (and on other
    data, as the run's); and every subcommand writes the ``hparams.yaml`` of its own settings, which would
    replace the run's.

    Checkpoints land in ``version_N/checkpoints/``.
    """
    tensorboard = TensorBoardLogger(
        save_dir=log_root, name=run_name, default_hp_metric=False, version=version, sub_dir=evaluation
    )
    folder = f"version_{tensorboard.version}" + (f"/{evaluation}" if evaluation else "")
    csv = ContinuingCSVLogger(save_dir=log_root, name=run_name, version=folder, resumed_step=resumed_step)
    return [tensorboard, csv]


def _say_once(line: str) -> None:
    """Write ``line`` to stderr from rank zero only: a signal reaches every process of a distributed run, and each
    wrote the same line."""
    if rank_zero_only.rank == 0:
        sys.stderr.write(line)


def claim_version(log_root: str, run_name: str) -> tuple[int, Path | None]:
    """The number of a new version of the run, its folder made at once, so that runs started together each get a
    folder of their own: Lightning's loggers take the next free number and make its folder only when they first
    write, so two fits started at once both took ``version_0`` and wrote over each other's checkpoints and logs.
    Also the first folder made (``log_root``, the run's or the version's), which a run refused before it writes
    anything removes. Rank zero claims; the other processes of a distributed run write into its folder."""
    version = TensorBoardLogger(log_root, run_name).version
    if rank_zero_only.rank != 0:
        return version, None
    while True:
        folder = Path(log_root, run_name, f"version_{version}")
        made = next(p for p in (*reversed(folder.parents), folder) if not p.exists())
        try:
            folder.mkdir(parents=True, exist_ok=False)
            return version, made
        except FileExistsError:  # another run took it since
            version += 1


class CrateCLI(LightningCLI):
    """``LightningCLI`` over :class:`ImageClassifier` and the zoo's DataModules. What it adds, and why:

    - ``run_name`` and ``log_root``: every run's logs, config and checkpoints in ``log_root/run_name/version_N``,
      so ``validate``, ``test``, ``predict`` and a resume find a run by its name;
    - ``checkpoint`` (best by ``val/acc``) and ``latest_checkpoint`` (the latest state as ``last.ckpt``): with a
      monitor, Lightning's one callback refreshes ``last.ckpt`` only when a best file is written;
    - the zoo's callbacks as sections (``rate_monitor``, ``nonfinite_guard``, ``interrupt_checkpoint``, ``final_state``,
      ``random_state``, ``epoch_figures``, ``wall_clock``, ``prediction_writer``, ``run_summary``,
      ``same_folder_checkpoints``, ``baseline``, ``snapshots``), so
      each is configured, or switched off, from the YAML like the trainer;
    - links from the data's ``num_classes``, ``in_chans``, ``img_size`` (and ``class_weights``) to the model, so
      a folder's classes and channels build the model that fits them;
    - ``--ckpt_path`` read through the zoo's checkpoint reader (``last`` and ``best`` across versions; a missing,
      corrupt or foreign file refused in one line) without letting the file's hyper-parameters replace the config's, and
      the data a run resumes on checked against the data it was trained on: a wrong model or data is refused,
      never swapped in;
    - a constructor's refusal, a subcommand the module cannot serve and trainer settings Lightning refuses (a value
      out of range, a GPU asked for on a CPU) as one-line errors instead of jsonargparse's union reports.
    """

    run_dir: Path | None = None  # the version folder of the run being built (for cleanup after a failure)
    made_dir: Path | None = None  # the first folder this command made for it (log_root, the run's, or the version)
    input_note = ""  # why a folder run's input size or channels are not the folder's (start_as_trained)
    held_checkpoint: Checkpoint | None = None  # what --ckpt_path holds, read once
    progress_bar = False  # whether the run shows a progress bar (an error then starts on a line of its own)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--run_name", type=str, default="run", help="Name of the run's log folder.")
        parser.add_argument(
            "--log_root", type=str, default=LOG_ROOT, help="Folder that holds all runs (default: "
            "--trainer.default_root_dir where given, else logs)."
        )  # fmt: skip
        # Two checkpoint callbacks: the best by val/acc, and the latest state (last.ckpt links to it).
        # Lightning's save_last refreshes last.ckpt only when a top-k file is written, so with a monitor
        # it would stay at the best epoch; the second callback keeps it current for --ckpt_path last.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "latest_checkpoint")
        metric, mode = getattr(self.model_class, "checkpoint_monitor", ("val/acc", "max"))
        short = metric.split("/")[-1]
        parser.set_defaults(
            {
                "checkpoint.monitor": metric,
                "checkpoint.mode": mode,
                "checkpoint.save_last": False,
                "checkpoint.filename": f"best-epoch{{epoch:03d}}-{short}{{{metric}:.4f}}",
                "checkpoint.auto_insert_metric_name": False,
                "latest_checkpoint.monitor": None,
                "latest_checkpoint.save_top_k": 1,
                "latest_checkpoint.save_last": "link",
                "latest_checkpoint.filename": "latest-epoch{epoch:03d}-step{step:06d}",
                "latest_checkpoint.auto_insert_metric_name": False,
                # last.ckpt is always re-linked to the newest state: with Lightning's version counter, a run
                # interrupted before its first save (last.ckpt then links to the interrupt checkpoint) would
                # after resuming link last-v1.ckpt instead, and --ckpt_path last would take the stale state
                "latest_checkpoint.enable_version_counter": False,
                # at every training epoch's end (after its validation, where it has one): Lightning's default
                # saves after validation only, so with --trainer.check_val_every_n_epoch N the epochs after the
                # last validation, the run's final weights among them, were never saved
                "latest_checkpoint.save_on_train_epoch_end": True,
            }
        )
        parser.add_lightning_class_args(CodingRateMonitor, "rate_monitor")
        parser.add_lightning_class_args(NonFiniteGuard, "nonfinite_guard")
        parser.add_lightning_class_args(InterruptCheckpoint, "interrupt_checkpoint")
        parser.add_lightning_class_args(FinalStateCheckpoint, "final_state")
        parser.add_lightning_class_args(RandomStateCheckpoint, "random_state")
        parser.add_lightning_class_args(EpochFiguresOnResume, "epoch_figures")
        parser.add_lightning_class_args(WallClock, "wall_clock")
        parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        parser.add_lightning_class_args(RunSummary, "run_summary")
        parser.add_lightning_class_args(SameFolderCheckpoints, "same_folder_checkpoints")
        for key in ("num_classes", "in_chans", "img_size"):
            parser.link_arguments(f"data.{key}", f"model.{key}", apply_on="instantiate")
        if "class_weights" in inspect.signature(self.model_class).parameters:
            parser.link_arguments("data.class_weights", "model.class_weights", apply_on="instantiate")
        parser.add_lightning_class_args(ClassicalBaseline, "baseline")
        parser.add_lightning_class_args(WeightSnapshots, "snapshots")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        self._refuse_sections_without_settings(config, subcommand)
        expand_home(config)
        argv = sys.argv[1:] if args is None else args if isinstance(args, list) else []
        self.batch_counts = whole_batch_counts(config, argv)
        take_default_root_dir(config)

    # Lightning 2.6: LightningCLI reads --ckpt_path in this private hook, where it also loads the checkpoint's
    # hyper-parameters over the config's; the override keeps the config's and refuses another model's file
    def _parse_ckpt_path(self) -> None:
        """Resolve ``--ckpt_path`` (``last`` and ``best`` across the run's versions), read it through the zoo's
        checkpoint reader (clear errors for missing, corrupt or foreign files) and check that it was trained as the
        architecture the config builds. Unlike Lightning's default, the checkpoint's hyper-parameters never
        replace the config's: a checkpoint of another model is refused, not silently swapped in."""
        subcommand = self.config.get("subcommand")
        if not subcommand or "ckpt_path" not in self.config[subcommand]:
            return
        config = self.config[subcommand]
        path = resolve_checkpoint(
            config["ckpt_path"], config["log_root"], config["run_name"], subcommand, _given_configs(config)
        )
        config["ckpt_path"] = path
        if path is not None and Path(path).is_file():
            module = self.model_class.__name__
            self.held_checkpoint = check_readable(Path(path))
            check_checkpoint_model(self.held_checkpoint, config["model"]["model_name"], module)

    def _refuse_sections_without_settings(self, config: Namespace, subcommand: str | None) -> None:
        """A section of settings given as a value (``model: 3`` or ``rate_monitor: null`` in a config) is one line:
        jsonargparse passed it on to a traceback in a constructor. The data, optimizer and scheduler sections may
        name a class instead."""
        parser = self._parser(subcommand)
        for name in sorted(set(getattr(parser, "groups", {})) - {subcommand, "data", "optimizer", "lr_scheduler"}):
            value = config.get(name)
            if name in config and not isinstance(value, Namespace):  # (a section without settings is None)
                program = PROGRAMS.get(self.model_class.__name__, "train.py")
                raise ConfigError(
                    f"the config's `{name}:` is {'null' if value is None else repr(value)}, not settings: give it "
                    f"`key: value` lines under it (python {program} {subcommand or 'fit'} --print_config lists them)"
                )

    def before_instantiate_classes(self) -> None:
        """Refuse a subcommand the module cannot serve (``pretrain.py predict``) before anything is built."""
        refused = getattr(self.model_class, "refused_subcommands", {})
        if self.subcommand in refused:
            raise ConfigError(f"{self.subcommand} is not available here: {refused[self.subcommand]}")
        config = self.config[self.subcommand] if self.subcommand else self.config
        refuse_file_as_model_name((config.get("model") or {}).get("model_name"))
        check_output_paths(config, self.subcommand)
        if self.subcommand == "fit":
            check_finite_run(config.get("trainer") or {})
        # a resume continues, and an evaluation reads, at the size and channels its checkpoint was trained at
        self.input_note = start_as_trained(config, self.held_checkpoint)

    @property
    def resumed(self) -> Checkpoint | None:
        """The Lightning checkpoint ``fit --ckpt_path`` resumes, else None (a new run, or an evaluation)."""
        held = self.held_checkpoint
        return held if self.subcommand == "fit" and held is not None and held.source == "lightning" else None

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a value a constructor refuses is a one-line error (jsonargparse
        reports a DataModule's refusal buried in its union errors: the constructor's own error is raised).
        The DataModule keeps the data section of the config (checkpoints record it), and a split the
        subcommand needs and the data lacks is refused before the trainer writes anything."""
        try:
            super().instantiate_classes()
        except ValueError as err:
            cause = innermost_refusal(err, final=(CheckpointError, DataError))
            if isinstance(cause, DataRootError):  # train.py's own flag for the root
                raise DataRootError(f"{cause}; --data.root DIR: where it lies") from err
            if isinstance(cause, (CheckpointError, DataError, FileNotFoundError)):
                raise cause from err
            raise ConfigError(str(cause)) from err
        config = self.config[self.subcommand] if self.subcommand else self.config
        recipe = getattr(self.datamodule, "recipe", None)
        if recipe is not None:  # what the folder's recipe chose is said, and recorded in the run's config
            record_folder_recipe(config, self.datamodule, recipe, self.subcommand == "fit", self.input_note)
        if isinstance(self.datamodule, ImageDataModule):
            self.datamodule.data_config = plain_config(config.get("data"))
            if self.subcommand == "fit" and self.held_checkpoint is not None:
                identity = self.datamodule.data_identity()
                check_resume_data(self.held_checkpoint, identity, self.datamodule.data_config)
            elif self.held_checkpoint is not None:
                check_evaluation_data(self.held_checkpoint, self.datamodule.data_identity(), str(self.subcommand))
            if self.held_checkpoint is None:  # the weights the model was built from are the ones a run uses
                identity = self.datamodule.data_identity()
                data = str(identity.get("root") or identity.get("source") or "the data")
                check_built_head(self.model, identity.get("classes"), data, str(self.subcommand))
                if start := (getattr(self.model, "hparams", None) or {}).get("pretrained_file"):
                    warn_of_seen_images(start, identity)
            if self.subcommand == "test":
                self.datamodule.require_split("test")
            if self.subcommand == "predict":
                self.datamodule.require_split(self.datamodule.predict_split)
        if self.resumed is not None:
            data_config = getattr(self.datamodule, "data_config", None)
            check_resume_recipe(
                self.resumed,
                dict(self.model.hparams),
                data_config,
                self.trainer.precision,
                update_batch(self.trainer, self.datamodule),
            )
            keep_run_seed(config, self.resumed.path)
        refuse_misfit = getattr(self.model, "refuse_misfit", None)
        if self.held_checkpoint is not None and self.held_checkpoint.source == "lightning" and refuse_misfit:
            # before the trainer writes into the run's folder (its config, loggers): a checkpoint of other classes
            # or another image size is refused here, not when Lightning restores it after the run has started
            held = self.held_checkpoint
            refuse_misfit({f"model.{k}": v for k, v in held.state_dict.items()}, held.hparams)
        if self.held_checkpoint is not None and self.subcommand != "fit":
            warn_of_other_size(self.held_checkpoint, getattr(self.datamodule, "img_size", None), self.subcommand)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        for key, count in getattr(self, "batch_counts", {}).items():
            kwargs.setdefault(key, count)  # a whole number of batches, not the share 1.0 the parse made of it
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("barebones"):
            # Lightning refuses every self.log in barebones mode, and the module logs its loss at every step
            raise ConfigError(
                "--trainer.barebones true refuses the logging every step of the zoo's modules does; for a lean run "
                "give --trainer.logger false --trainer.enable_checkpointing false --trainer.enable_progress_bar false"
            )
        for key, takes in POSITIVE_TRAINER_SETTINGS.items():
            value = trainer_config.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
                raise ConfigError(f"--trainer.{key} {value}: give {takes}")
        recipe = getattr(self.datamodule, "recipe", None)
        if (
            recipe is not None
            and trainer_config.get("max_epochs") is None
            and trainer_config.get("max_steps", -1) == -1
        ):
            kwargs.setdefault("max_epochs", recipe.max_epochs)  # the folder's recipe, where nothing else was set
        sections = self.config_init[self.subcommand] if self.subcommand else self.config_init
        if trainer_config.get("enable_checkpointing") is False:
            # Lightning refuses its switch beside the zoo's two checkpoint callbacks (a "cannot run" line): they
            # stay, and save nothing
            kwargs["enable_checkpointing"] = True
            for key in ("checkpoint", "latest_checkpoint"):
                sections[key].save_top_k, sections[key].save_last = 0, False
        logger = trainer_config.get("logger")
        if logger in (None, True, False) and "logger" not in kwargs:
            config = self.config[self.subcommand] if self.subcommand else self.config
            log_root, run_name = str(Path(config["log_root"])), config["run_name"]
            # validate, test and predict write into the run they evaluate, and so does a fit given that run's own
            # config.yaml (wherever its folder now lies); another fit from a run's file starts a new version
            anywhere = self.subcommand != "fit" or of_given_run(config.get("ckpt_path"), _given_configs(config))
            log_root, run_name, version = run_location(config.get("ckpt_path"), log_root, run_name, anywhere)
            # an evaluation of a run's checkpoint writes into a folder of its own in the run's folder
            evaluation = self.subcommand if version is not None and self.subcommand != "fit" else None
            if version is None and not trainer_config.get("fast_dev_run"):  # a fast_dev_run writes nothing
                version, CrateCLI.made_dir = claim_version(log_root, run_name)
            if logger is False:
                # no loggers, but the run's checkpoints, config.yaml and predictions still go to its own folder:
                # Lightning's default root, the working directory, put them all in one ./checkpoints folder
                # (in this repository, the shipped weights'), where the next run replaced this one's last.ckpt
                version = TensorBoardLogger(log_root, run_name).version if version is None else version
                run = Path(log_root, run_name, f"version_{version}")
                CrateCLI.run_dir = run / (evaluation or "")
                kwargs["default_root_dir"] = str(CrateCLI.run_dir)
                for key in ("checkpoint", "latest_checkpoint") if evaluation else ():
                    # the run's own checkpoint folder, not one in the evaluation's folder: Lightning warned that
                    # the folder had changed and did not restore the callbacks' records
                    if sections[key].dirpath is None:
                        sections[key].dirpath = str(run / "checkpoints")
            else:
                steps = self.resumed.record.get("global_step") if self.resumed is not None else None
                resumed_step = int(steps) if isinstance(steps, int) and version is not None else None
                kwargs["logger"] = run_loggers(log_root, run_name, version, resumed_step, evaluation)
                CrateCLI.run_dir = Path(kwargs["logger"][0].log_dir)
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except (MisconfigurationException, ModuleNotFoundError, TypeError) as err:  # a value refused, a package missing
            accelerator = str(trainer_config.get("accelerator", "auto"))
            hint = ""
            if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
                hint = " This machine has no GPU that PyTorch can use: train with --trainer.accelerator cpu (or auto)."
            raise ConfigError(
                f"Lightning's Trainer refused the trainer settings ({str(err).rstrip('.!')}).{hint}"
            ) from err
        if trainer.fast_dev_run:
            # a fast_dev_run writes no checkpoint, but ModelCheckpoint's save_last still writes last.ckpt when fit
            # ends, and with the logger off its folder is ./checkpoints (in this repository, the shipped weights')
            for callback in trainer.checkpoint_callbacks:
                callback.save_last = False
        refuse_tuning_callbacks(trainer)
        drop_unscored_best(trainer, self.model, str(self.subcommand))
        warn_if_slow_bf16(trainer, self.resumed.path if self.resumed is not None else None)
        if self.subcommand in ("fit", None):  # None: a trainer built for the caller's own fit (run=False)
            warn_if_float16_weights(trainer)
        CrateCLI.progress_bar = trainer.progress_bar_callback is not None
        return trainer


def _given_configs(config: Any) -> list[str]:
    """The ``--config`` files of the command, in order."""
    return [str(path) for path in config.get("config") or []]


def refuse_tuning_callbacks(trainer: Trainer) -> None:
    """Lightning's LearningRateFinder and BatchSizeFinder set the learning rate or the batch size when the fit starts,
    after the run's ``config.yaml`` recorded the given ones: the run's config would name another rate or batch than
    it trained with, and a resume from it would be refused as another recipe. Found first, they are settings."""
    tuner = "lightning.pytorch.tuner.Tuner(trainer)"
    for callback in trainer.callbacks:
        if isinstance(callback, LearningRateFinder):
            raise ConfigError(
                "LearningRateFinder sets the learning rate after the run's config.yaml recorded --model.lr: find it "
                f"first ({tuner}.lr_find(model, datamodule)) and give it as --model.lr"
            )
        if isinstance(callback, BatchSizeFinder):
            raise ConfigError(
                "BatchSizeFinder sets the batch size after the run's config.yaml recorded --data.batch_size: find it "
                f"first ({tuner}.scale_batch_size(model, datamodule)) and give it as --data.batch_size"
            )


def drop_unscored_best(trainer: Trainer, module: L.LightningModule, subcommand: str) -> None:
    """A fit whose module logs no figure to pick its best checkpoint by (its ``unscored`` says why: SimDINO on
    images of one class) keeps its latest state only, and says so, instead of failing at its first validation;
    an evaluation says why it scores nothing."""
    why = getattr(module, "unscored", None)
    if not why:
        return
    metric = getattr(module, "checkpoint_monitor", ("val/acc", "max"))[0]
    if subcommand != "fit":  # an evaluation of such a run: what it will not score, and why
        rank_zero_info(f"no {metric}: {why}")
        return
    for callback in [c for c in trainer.checkpoint_callbacks if getattr(c, "monitor", None) == metric]:
        trainer.callbacks.remove(callback)
    kept = "its latest state (last.ckpt)" if saves_checkpoints(trainer) else "no checkpoint (checkpointing is off)"
    rank_zero_info(f"no {metric} and no best checkpoint: {why}; the run keeps {kept}")


def keep_run_seed(config: Any, checkpoint_path: str | Path) -> None:
    """A resume keeps the seed its run started with, in the run's ``config.yaml`` (and so on its card): the seed
    chose the run's initial weights, which the resume does not draw again, and the random states of the moment the
    checkpoint was written are restored from it. Another seed (a config that draws a random one at every start,
    or ``--seed_everything N``) would name a seed the run never used; it is replaced by the recorded one and said."""
    recorded = run_config(checkpoint_path).get("seed_everything")
    given = config.get("seed_everything")
    if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded == given:
        return
    rank_zero_info(
        f"resume: the run keeps the seed it started with, {recorded} (seed_everything {given} is not used: the run's "
        "random states are restored from the checkpoint)"
    )
    config["seed_everything"] = recorded
    L.seed_everything(recorded, workers=True)


def refuse_file_as_model_name(model_name: Any) -> None:
    """A weights file, or a hub folder (``local-dir:DIR``), given where the architecture's name belongs is refused
    with the flags that use it: the architecture it records, and the file as the weights to start from or the run
    checkpoint to continue (a run records its architecture by name, not by a folder that may move)."""
    if isinstance(model_name, str) and model_name.startswith("local-dir:"):
        try:
            arch, weights = hub_weights(model_name)
        except (OSError, CheckpointError):
            return  # the model check says what the name lacks
        raise ConfigError(
            f"--model.model_name {model_name} is a hub folder, not a model name: name its architecture and start "
            f"from its weights (--model.model_name {arch} --model.pretrained_file {weights})"
        )
    if not isinstance(model_name, str) or not Path(model_name).is_file():
        return
    try:
        arch = read_checkpoint(model_name).model_name or "ARCHITECTURE"
    except CheckpointError:
        arch = "ARCHITECTURE"
    raise ConfigError(
        f"--model.model_name {model_name} is a file, not a model name: name its architecture "
        f"(--model.model_name {arch}) and give the file as --model.pretrained_file (to start from its weights) "
        "or, for a .ckpt of a run, as --ckpt_path (to resume or evaluate it)"
    )


def start_as_trained(config: Any, held: Checkpoint | None = None) -> str:
    """A run on a folder that starts from pretrained weights (``--model.pretrained_file``, a pretrained tag, or
    ``model_kwargs``' ``pretrained_cfg_overlay`` file), or resumes or evaluates a run's checkpoint (``held``: what
    ``--ckpt_path`` holds), and leaves the input size or channels open takes those the weights were trained at, as
    timm fine-tunes a pretrained model at its own input size and reads every image in its channels (gray
    replicated to RGB, colour to gray), instead of the folder's image side and channels (which would resample the
    position embedding, or fold the first layer, of weights that never saw such inputs; a model without a learned
    table of the input's size would be scored at another size without a word). Returns what to say of it, or an
    empty string where nothing changed."""
    data, model = config.get("data") or {}, config.get("model") or {}
    args = data.get("init_args") or {}
    open_settings = [key for key in ("img_size", "in_chans") if key in args and args[key] is None]
    if not open_settings or not _is_folder_module(data.get("class_path")):
        return ""
    kwargs = model.get("model_kwargs") or {}
    overlay = kwargs.get("pretrained_cfg_overlay") if kwargs.get("pretrained") else None
    overlay_file = overlay.get("file") if hasattr(overlay, "get") else None
    if held is not None:
        cfg = timm.models.get_pretrained_cfg(model.get("model_name") or "")
        trained = {"img_size": held.img_size(), "in_chans": held.in_chans(None, _first_conv(cfg))}
        source = f"--ckpt_path {held.path}"
    elif model.get("pretrained_file") or overlay_file:
        file = model.get("pretrained_file") or overlay_file
        checkpoint = read_checkpoint(file)
        cfg = timm.models.get_pretrained_cfg(model.get("model_name") or "")
        trained = {"img_size": checkpoint.img_size(), "in_chans": checkpoint.in_chans(None, _first_conv(cfg))}
        source = f"--model.pretrained_file {file}" if model.get("pretrained_file") else f"the overlay's file {file}"
    elif kwargs.get("pretrained") and (cfg := timm.models.get_pretrained_cfg(model.get("model_name") or "")):
        trained = {"img_size": cfg.input_size[-1], "in_chans": cfg.input_size[0]}
        source = f"the pretrained {model['model_name']}"
    else:
        return ""
    said = []
    if "img_size" in open_settings and isinstance(trained["img_size"], int):  # else not recorded, or not square
        args["img_size"] = trained["img_size"]
        said.append(f"input {trained['img_size']}")
    if "in_chans" in open_settings and trained["in_chans"] in (1, 3):
        args["in_chans"] = trained["in_chans"]
        said.append("gray" if trained["in_chans"] == 1 else "RGB")
    return f" ({', '.join(said)}: as {source} was trained)" if said else ""


def warn_of_other_size(held: Checkpoint, img_size: Any, subcommand: str | None) -> None:
    """Warn where an evaluation reads its images at another size than ``held`` was trained at: a model without a
    table of the input's size (ToST) loads at any size, and is then scored at a size it never saw."""
    trained = held.img_size()
    if trained is None or img_size is None or tuple(to_2tuple(trained)) == tuple(to_2tuple(img_size)):
        return
    rank_zero_warn(
        f"--ckpt_path {held.path} was trained on {trained} px images and {subcommand} reads them at {img_size} px: "
        f"its figures are of a size the weights never saw (--data.img_size {trained} reads them as trained)"
    )


def _first_conv(cfg: Any) -> str:
    return getattr(cfg, "first_conv", None) or "patch_embed.proj"


def _is_folder_module(class_path: Any) -> bool:
    try:
        module, _, name = str(class_path).rpartition(".")
        return issubclass(getattr(importlib.import_module(module), name), ImageFolderDataModule)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


def record_folder_recipe(config: Any, datamodule: Any, recipe: Any, fitting: bool, input_note: str = "") -> None:
    """Write the values the folder's recipe chose into the parsed config (the run's ``config.yaml`` and the data
    section its checkpoints record then hold them) and say the run's settings in one block (``input_note``: why
    the input size is not the folder's, where it is not)."""
    data = config["data"]["init_args"]
    data["img_size"], data["batch_size"] = datamodule.img_size, datamodule.batch_size
    data["augmentation"] = dataclasses.asdict(datamodule.augmentation)
    data["class_weights"] = datamodule.class_weights
    trainer = config["trainer"]
    if trainer.get("max_epochs") is None and trainer.get("max_steps", -1) == -1:
        trainer["max_epochs"] = recipe.max_epochs
    if fitting:
        settings = (datamodule.img_size, datamodule.batch_size, trainer.get("max_epochs"), datamodule.augmentation)
        rank_zero_info(
            f"folder recipe: {recipe.describe(*settings, datamodule.class_weights)}{input_note}. Each is chosen from "
            "the folder "
            "unless set (--data.img_size, --data.batch_size, --data.augmentation.*, --data.class_weights, "
            "--trainer.max_epochs)"
        )
    elif input_note:
        rank_zero_info(f"the folder's images are read{input_note}")


# the run's own file and folder settings: a leading ~ is the user's home there, as a shell would expand it (it does
# not after --key=, nor in a YAML config), instead of a folder named "~" in the working folder (a data module
# expands its own root, wherever it is built)
PATH_SETTINGS = (
    ("log_root",),
    ("ckpt_path",),
    ("model", "pretrained_file"),
    ("prediction_writer", "output"),
)


def expand_home(config: Any) -> None:
    """Expand a leading ``~`` in the config's file and folder settings (:data:`PATH_SETTINGS`)."""
    for keys in PATH_SETTINGS:
        holder = config
        for key in keys[:-1]:
            holder = holder.get(key) if hasattr(holder, "get") else None
        value = holder.get(keys[-1]) if hasattr(holder, "get") else None
        if isinstance(value, str) and value.startswith("~"):
            holder[keys[-1]] = os.path.expanduser(value)


def take_default_root_dir(config: Any) -> None:
    """Lightning's ``--trainer.default_root_dir`` as the folder of the runs where ``--log_root`` was left at its
    default: Lightning writes its own logger's runs there, and the zoo's loggers write under ``--log_root``, so it
    was otherwise ignored (the runs went to ./logs). The two given as different folders are refused."""
    root = (config.get("trainer") or {}).get("default_root_dir")
    if root is None:
        return
    if config["log_root"] == LOG_ROOT:
        config["log_root"] = str(root)
    elif Path(config["log_root"]) != Path(root):
        raise ConfigError(
            f"--trainer.default_root_dir {root} and --log_root {config['log_root']} name two folders for the runs: "
            "give one of them (the runs go to ROOT/run_name/version_N)"
        )


def check_output_paths(config: Any, subcommand: str | None) -> None:
    """Refuse a ``--log_root``, or for ``predict`` a ``--prediction_writer.output`` folder, that cannot become a
    folder (it, or a folder above it, is a file), before anything is built or predicted."""
    try:
        check_output_folder(config["log_root"], "--log_root", "the logs")
        output = (config.get("prediction_writer") or {}).get("output")
        if subcommand == "predict" and output:
            check_output_folder(Path(output).parent, "--prediction_writer.output", "predictions.csv")
    except OutputPathError as err:
        raise ConfigError(str(err)) from None


def check_finite_run(trainer: Any) -> None:
    """The learning-rate schedules run over the whole training: refuse a run without an end."""
    get = trainer.get if hasattr(trainer, "get") else lambda key, default=None: default
    max_epochs, max_steps = get("max_epochs"), get("max_steps", -1)
    if max_epochs is not None and max_epochs < -1 or max_steps is not None and max_steps < -1:
        raise ConfigError(f"--trainer.max_epochs {max_epochs} / --trainer.max_steps {max_steps}: give a count >= 1")
    if max_epochs == -1 and (max_steps is None or max_steps == -1):
        raise ConfigError(
            "--trainer.max_epochs -1 trains without an end, but the learning-rate schedule is laid over the whole "
            "run: give --trainer.max_epochs N or --trainer.max_steps N"
        )


def plain_config(value: Any) -> Any:
    """A parsed config section as plain YAML types (dicts, lists, strings, numbers), which a checkpoint read
    with ``weights_only=True`` and a safetensors metadata entry (JSON) can both hold."""
    if hasattr(value, "as_dict"):  # jsonargparse's Namespace
        value = value.as_dict()
    if isinstance(value, dict):
        return {str(k): plain_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # paths and other scalars


class ConfigError(ValueError):
    """A config value that a model, DataModule or trainer constructor refuses."""


def _remove_if_empty(run_dir: Path | None) -> None:
    """A run that failed before it logged or saved anything leaves no version folder behind (nor a run
    folder that held nothing else)."""
    if run_dir is None or not run_dir.is_dir():
        return
    results = [
        p
        for p in run_dir.rglob("*")
        if p.suffix == ".ckpt" or p.name == "metrics.csv" or (p.name.startswith("predictions") and p.suffix == ".csv")
    ]
    if not results:  # only the config, hparams and an events file header
        shutil.rmtree(run_dir, ignore_errors=True)
        made = CrateCLI.made_dir
        # the run's folder where it holds nothing else, and the folders above it this command made (no others)
        removable = [run_dir.parent] + [
            p for p in run_dir.parent.parents if made is not None and made in (p, *p.parents)
        ]
        for folder in removable:
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()


def cli_main(
    args: list[str] | None = None, run: bool = True, model_class: type[L.LightningModule] = ImageClassifier
) -> CrateCLI:
    """``train.py`` (``pretrain.py``: ``model_class=MaskedAutoencoder``): a SIGTERM ends the process with
    status 143 and Ctrl-C with 130, the shell's statuses for those signals (after the interrupt checkpoint;
    Lightning itself exits with 1 after a Ctrl-C, which a script cannot tell from a failure); errors in
    what the user gave (a missing, corrupt or foreign checkpoint, a missing dataset, an unreadable dataset
    file) print one line and exit with status 2; a run that failed before writing anything leaves no empty
    version folder."""
    CrateCLI.run_dir, CrateCLI.made_dir, CrateCLI.progress_bar = None, None, False
    quiet_known_noise()
    program = "pretrain.py" if model_class is not ImageClassifier else "train.py"
    try:
        cli = CrateCLI(
            model_class,
            ImageDataModule,
            subclass_mode_data=True,
            save_config_callback=WholeBatchCountsConfig,
            save_config_kwargs={"overwrite": True},
            # a typo gets one line below, not the whole usage; an abbreviated key is a typo, not a match
            parser_kwargs={"exit_on_error": False, "allow_abbrev": False},
            args=args,
            run=run,
        )
    except SIGTERMException:
        _say_once(f"{program}: stopped by SIGTERM; resume with --ckpt_path last\n")
        raise SystemExit(SIGTERM_EXIT) from None
    except SystemExit as exit_:
        if isinstance(exit_.__context__, KeyboardInterrupt):  # Lightning's sys.exit(1) after a Ctrl-C
            _say_once(f"{program}: stopped by Ctrl-C; resume with --ckpt_path last\n")
            raise SystemExit(SIGINT_EXIT) from None
        raise
    except ArgumentError as err:
        problem = parser_problem(str(err))
        sys.stderr.write(f"{program}: error: {problem}\n")
        other = program_of_configs(config_files(sys.argv[1:] if args is None else list(args)), model_class)
        if other is not None and "accept option" in problem:  # the configs' model settings are another program's
            sys.stderr.write(
                f"{program}: the config's model settings ({', '.join(other[1])}) are those of python {other[0]}: "
                "run it with that command\n"
            )
        elif "no such file" not in problem:
            sections = {"model": model_class, "trainer": L.Trainer}
            sys.stderr.write(f"{program}: the accepted keys: {keys_help(problem, program, sections)}\n")
        raise SystemExit(2) from None
    except (
        CheckpointError,
        FileNotFoundError,
        DataError,
        ConfigError,
        MisconfigurationException,
        ModuleNotFoundError,
    ) as err:
        # Lightning's MisconfigurationException: a trainer setting the data cannot meet (limit_train_batches 0.001);
        # ModuleNotFoundError: a callback's package missing, found when the fit sets it up (DeviceStatsMonitor)
        _remove_if_empty(CrateCLI.run_dir)
        if not run:
            raise
        sys.stderr.write(f"{chr(10) if CrateCLI.progress_bar else ''}{program}: error: {one_line(err)}\n")
        raise SystemExit(2) from None
    except NonFiniteError as err:  # a run that diverged: the step, the checkpoints it kept and what to change
        if not run:
            raise
        sys.stderr.write(f"{chr(10) if CrateCLI.progress_bar else ''}{program}: error: {one_line(err)}\n")
        raise SystemExit(1) from None
    except ValueError as err:
        _remove_if_empty(CrateCLI.run_dir)
        if not run or "(ckpt_path=" not in str(err):
            raise
        # Lightning's own --ckpt_path values (hpc: a SLURM requeue's checkpoint) refused where nothing answers them
        sys.stderr.write(f"{program}: error: --ckpt_path: {one_line(err)} (or --ckpt_path last, best)\n")
        raise SystemExit(2) from None
    except BaseException:
        _remove_if_empty(CrateCLI.run_dir)
        raise
    _close_process_group()
    return cli


def _close_process_group() -> None:
    """After a clean run of several processes, close their process group before the interpreter exits: left
    to the interpreter's own teardown, gloo's worker threads can outlive it and abort the process (status -6,
    "terminate called without an active exception") after everything was written. Only on success: a rank
    that failed may leave its peers inside a collective, where closing would wait for them forever."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
