"""What ``--ckpt_path`` names: ``last`` and ``best`` of a run found across its version folders, a path checked
to be a readable checkpoint of the configured model and module, and the run folder the command then logs into."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_warn

from crate.models import Checkpoint, CheckpointError, read_checkpoint
from crate.run.record import recorded_best

from .built_weights import EVALUATIONS
from .run_record import PROGRAMS, module_kind

__all__ = [
    "best_recorded",
    "check_checkpoint_model",
    "check_readable",
    "of_given_run",
    "resolve_checkpoint",
    "run_location",
]


def run_location(ckpt_path: str | None, log_root: str, run_name: str, anywhere: bool) -> tuple[str, str, int | None]:
    """Where a command given ``ckpt_path`` logs: ``(log_root, run_name, N)`` of the run whose
    ``version_N/checkpoints/`` holds the file (``anywhere``: under any root, as validate, test and predict
    write beside the run they evaluate; otherwise only under ``log_root/run_name``, as a resume continues its
    run), else ``(log_root, run_name, None)``: a new version."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return log_root, run_name, None
    folder = Path(ckpt_path).absolute().parent
    match = re.fullmatch(r"version_(\d+)", folder.parent.name)
    if folder.name != "checkpoints" or match is None:
        return log_root, run_name, None
    run = folder.parent.parent
    if anywhere:
        return str(run.parent), run.name, int(match.group(1))
    if run.resolve() != Path(log_root, run_name).resolve():
        return log_root, run_name, None
    return log_root, run_name, int(match.group(1))


def check_readable(path: Path) -> Checkpoint:
    """The checkpoint at ``path``, read through the zoo's reader; a corrupt one is refused naming the others in
    its folder."""
    try:
        return read_checkpoint(path)
    except CheckpointError as err:
        others = sorted(str(p) for p in path.resolve().parent.glob("*.ckpt") if p.resolve() != path.resolve())
        rest = (
            f"so were the other checkpoints in its folder: {others}. Pass one of them with --ckpt_path"
            if others
            else "no other checkpoint is in its folder"
        )
        raise CheckpointError(f"{err}. It was left in place, and {rest}.") from err


def check_checkpoint_model(held: Checkpoint, model_name: str, module: str = "ImageClassifier") -> None:
    """Refuse a Lightning checkpoint trained as another architecture, or by another module (a masked-pretraining
    run given to train.py, a classifier run given to pretrain.py), than the config builds."""
    saved = held.hparams.get("model_name")
    program = PROGRAMS.get(module, "train.py")
    if held.source != "lightning":
        raise CheckpointError(
            f"{held.describe()}: --ckpt_path takes a .ckpt written by {program}; load other weights into a new "
            f"run through timm (--model.model_kwargs '{{pretrained: true, pretrained_cfg_overlay: {{file: ...}}}}')"
        )
    kind = module_kind(held)
    if kind != module:
        start = (
            "start a probe or fine-tune from its weights with --model.pretrained_file PATH "
            "(configs/crate_mae_nano_digits_probe.yaml, ..._finetune.yaml)"
            if kind in ("MaskedAutoencoder", "SelfDistillation")
            else "continue it with the program that wrote it"
        )
        raise CheckpointError(
            f"{held.describe()} was written by {PROGRAMS.get(kind, kind)} ({kind}), not {program} ({module}): "
            f"--ckpt_path resumes or evaluates a run of the same kind; {start}"
        )
    if saved is not None and saved != model_name:
        raise CheckpointError(
            f"{held.describe()}, but this config builds {model_name}: pass --model.model_name {saved} "
            "(or the config.yaml of that run) to use this checkpoint"
        )


def _own_runs(configs: Sequence[str]) -> list[Path]:
    """The run folders among the configs' folders: a run writes its ``config.yaml`` in its ``version_N`` folder,
    and an evaluation of its checkpoint in ``version_N/validate/`` (``test/``, ``predict/``)."""
    folders = [Path(config).resolve().parent for config in configs]
    folders = [folder.parent if folder.name in EVALUATIONS else folder for folder in folders]
    return [folder for folder in folders if re.fullmatch(r"version_\d+", folder.name)]


def of_given_run(ckpt_path: str | None, configs: Sequence[str]) -> bool:
    """Whether ``ckpt_path`` lies in the run folder of one of the ``configs`` (``RUN/version_N/config.yaml``,
    ``RUN/version_N/checkpoints/FILE``): the run the command names, wherever the folder now lies."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return False
    return Path(ckpt_path).resolve().parent.parent in _own_runs(configs)


def _beside_configs(configs: Sequence[str]) -> list[Path]:
    """The ``last*.ckpt`` of the run whose own ``config.yaml`` is among ``configs`` (the last such), if any."""
    for folder in reversed(_own_runs(configs)):
        found = [p for p in folder.glob("checkpoints/last*.ckpt") if p.exists()]
        if found:
            return found
    return []


def resolve_checkpoint(
    ckpt_path: str | None, log_root: str, run_name: str, subcommand: str = "fit", configs: Sequence[str] = ()
) -> str | None:
    """The file ``--ckpt_path`` names. ``last``: the newest ``last*.ckpt`` of the run whose own ``config.yaml`` is
    one of the ``configs`` given (``RUN/version_0/config.yaml`` means version 0, even where a later version of
    its run exists), else of any version of the run ``log_root/run_name`` (Lightning looks only in the new
    version's folder); ``best``: the best checkpoint that file records (:func:`best_recorded`),
    so that ``validate``, ``test`` and ``predict`` in a new process reach the file ``fit`` named best (Lightning
    knows it only in the process that trained); a path: checked to exist (the CLI then reads it once, through the
    zoo's reader, to check it is readable and of the configured model). ``hpc`` passes through, and so does
    ``registry[:NAME[:VERSION]]`` where Lightning's registry client (``litmodels``) is installed.

    A ``fit`` with ``last`` and no checkpoint yet starts fresh (so the flag can stay in a job script); any other
    command with ``last`` or ``best`` and no checkpoint is refused: it would evaluate untrained weights."""
    if ckpt_path is None or ckpt_path == "hpc":
        return ckpt_path
    if ckpt_path == "registry" or ckpt_path.startswith("registry:"):
        if importlib.util.find_spec("litmodels") is None:
            raise CheckpointError(
                f"--ckpt_path {ckpt_path} reads Lightning's model registry, which needs the litmodels package "
                "(pip install litmodels) and the network; give a checkpoint's path, or last or best of a run"
            )
        return ckpt_path
    if ckpt_path in ("last", "best"):
        run = Path(log_root, run_name)
        found = _beside_configs(configs) or [p for p in run.glob("version_*/checkpoints/last*.ckpt") if p.exists()]
        if not found and subcommand == "fit" and ckpt_path == "last":
            rank_zero_warn(f"--ckpt_path last: no last checkpoint under {run}; starting fresh")
            return None
        if not found:
            raise CheckpointError(
                f"--ckpt_path {ckpt_path}: no checkpoint of the run under {run} (version_N/checkpoints/last.ckpt), "
                f"so {subcommand} has no trained weights to use; give the run's --log_root and --run_name (its "
                "config.yaml has both) or the checkpoint's path"
            )
        path = max(found, key=lambda p: p.stat().st_mtime)
        return str(best_recorded(path) if ckpt_path == "best" else path)
    path = Path(ckpt_path)
    if path.is_dir():
        raise CheckpointError(
            f"--ckpt_path {path} is a folder, not a checkpoint file; pass a .ckpt inside it "
            "(<run>/version_N/checkpoints/last.ckpt) or --ckpt_path last"
        )
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (--ckpt_path)")
    return str(path)


def best_recorded(last: Path) -> Path:
    """The best checkpoint a run's ``last`` checkpoint records: the file its monitored ``ModelCheckpoint``
    (``val/acc`` for train.py) last saved as best, which resumes carry on. It is looked for beside ``last`` under
    the name it was saved with first (a run moved or copied to another folder keeps to its own files), then at
    the path recorded."""
    recorded = recorded_best(check_readable(last).record)
    if recorded is None:
        raise CheckpointError(
            f"--ckpt_path best: {last} records no best checkpoint (its run had scored no validation when it was "
            "written); give the checkpoint's path, or --ckpt_path last"
        )
    best = Path(recorded[1])
    for candidate in (last.parent / best.name, best):
        if candidate.is_file():
            return candidate
    raise CheckpointError(
        f"--ckpt_path best: {last} records {best} as its run's best checkpoint, and it is gone (nor is it beside "
        "the last checkpoint); give a checkpoint's path, or --ckpt_path last"
    )
