"""Which program a YAML config was written for, read from its ``model`` settings: a masked-pretraining config given
to ``train.py``, or a SimDINO one to ``pretrain.py`` without ``--objective simdino``, gets the command that takes
it beside the CLI's "does not accept option" line."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import lightning as L
import yaml

from crate.run.record import PROGRAMS

from .masked_pretraining import MaskedAutoencoder
from .module import ImageClassifier
from .self_distillation import SelfDistillation

__all__ = ["config_files", "config_section", "program_of_configs"]

MODULES: tuple[type[L.LightningModule], ...] = (ImageClassifier, MaskedAutoencoder, SelfDistillation)


def config_files(argv: list[str]) -> list[str]:
    """The files a command line gives as ``--config FILE`` or ``--config=FILE``, in order."""
    files = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    return files + [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]


def config_section(config: str, section: str) -> dict[str, Any]:
    """A YAML config's section (``model``, ``trainer``), as written; empty where the file cannot be read (the CLI
    says why) or has none."""
    try:
        found = (yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}).get(section)
    except (OSError, yaml.YAMLError, AttributeError):
        return {}
    return found if isinstance(found, dict) else {}


def _model_keys(config: str) -> set[str]:
    return set(config_section(config, "model"))


def _settings(module: type[L.LightningModule]) -> set[str]:
    return set(inspect.signature(module).parameters)


def _command(module: type[L.LightningModule]) -> str:
    """The command that trains ``module``, its objective named where ``pretrain.py`` has several: to a user who ran
    ``pretrain.py --objective simdino``, "pretrain.py" would name the command already given."""
    command = PROGRAMS[module.__name__]
    return f"{command} --objective mae" if module is MaskedAutoencoder else command


def program_of_configs(configs: list[str], module: type[L.LightningModule]) -> tuple[str, list[str]] | None:
    """(the command whose module takes every model setting of ``configs``, the settings ``module`` does not
    take), where ``module`` does not take them all and another module does; else None."""
    keys = set().union(*map(_model_keys, configs)) if configs else set()
    foreign = sorted(keys - _settings(module))
    if not foreign:
        return None
    fitting = [other for other in MODULES if other is not module and keys <= _settings(other)]
    return (_command(fitting[0]), foreign) if fitting else None
