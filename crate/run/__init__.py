"""One room for a run: what a checkpoint of ``train.py`` or ``pretrain.py`` is (:class:`Run`: its kind, its model,
its recipe, its held-out data, its label names), read once, for export, the white-box report, the results table
and the benchmarks alike. Here too: what a file records of its run and under which keys (``record``), the checks
that a resume or an evaluation gets the data the run was trained on (``resume_check``), and the split the run held
out (``held_out``); and the moving average of its weights (``weight_average``)."""

from .held_out import (
    NoDataFolder,
    datamodule_from_config,
    describe_data,
    held_out_accuracy,
    held_out_set,
    held_out_topk,
    resolve_data,
    validation_split_note,
)
from .model import build_model
from .record import PROGRAMS, FileRecord, module_kind, read_record
from .run import UNKNOWN_RUN_SETTING, Run
from .weight_average import ema_decay_at, weight_average

__all__ = [
    "PROGRAMS",
    "UNKNOWN_RUN_SETTING",
    "FileRecord",
    "NoDataFolder",
    "Run",
    "build_model",
    "datamodule_from_config",
    "describe_data",
    "ema_decay_at",
    "held_out_accuracy",
    "held_out_set",
    "held_out_topk",
    "module_kind",
    "read_record",
    "resolve_data",
    "validation_split_note",
    "weight_average",
]
