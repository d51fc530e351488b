"""What a person reads of a run: a line per epoch when no progress bar shows, and a summary at the end."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint, Timer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from crate.models import names_weights_tag
from crate.noise import beyond_noise
from crate.run.record import epochs_and_steps
from crate.wording import counted

from .built_weights import head_from_weights

__all__ = ["RunSummary"]


def _number(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None


UNTRAINED = "the untrained model (random initialization)"


def _weights_evaluated(trainer: L.Trainer, pl_module: L.LightningModule) -> str:
    """What an evaluation measures: the checkpoint it loaded; else the weights a fit in this process left; else
    those the model was built from (a pretrained file or tag, said where its head is new); else :data:`UNTRAINED`."""
    if trainer.ckpt_path:
        return _relative(trainer.ckpt_path)
    if trainer.global_step > 0:
        return "the weights in memory"
    hparams = getattr(pl_module, "hparams", None) or {}
    head = "" if head_from_weights(pl_module) else " under a new, untrained head"
    if hparams.get("pretrained_file"):
        return f"the weights it was built from ({hparams['pretrained_file']}){head}"
    if (hparams.get("model_kwargs") or {}).get("pretrained"):
        return f"the pretrained weights it was built with ({hparams.get('model_name')}){head}"
    return UNTRAINED


def _epochs_trained(trainer: L.Trainer) -> str:
    """The epochs and steps a fit trained: "N epochs, S steps", or where it stopped inside an epoch (``max_steps``,
    ``max_time``), which Lightning counts as one more, the whole epochs and the steps of the one it stopped in."""
    epochs, batches, total = trainer.current_epoch, trainer.num_training_batches, trainer.global_step
    in_all = f"{counted(epochs, 'epoch')}, {counted(total, 'step')}"
    if not isinstance(batches, int) or batches < 1:  # an iterable of unknown length
        return in_all
    whole, steps, per_epoch = epochs_and_steps(total, batches, trainer.accumulate_grad_batches)
    if steps == 0 or whole >= epochs:
        return in_all
    if whole == 0:
        return f"{steps} of the first epoch's {per_epoch} steps"
    return f"{counted(whole, 'epoch')} and {steps} of the next one's {per_epoch} steps ({counted(total, 'step')})"


def _why_untrained(trainer: L.Trainer) -> str:
    """Why a fit trained no step: a batch limit of 0, no training batches, ``max_epochs`` / ``max_steps`` of 0, or
    a resumed checkpoint that had already reached them."""
    if trainer.limit_train_batches == 0:
        return "--trainer.limit_train_batches 0 (no training batches)"
    if trainer.num_training_batches == 0:
        return "no training batches"
    if _stopping_timer(trainer) is not None:
        return "--trainer.max_time reached before the first step"
    by_steps = trainer.max_steps is not None and 0 <= trainer.max_steps <= trainer.global_step
    limit = "max_steps" if by_steps else "max_epochs"
    if not trainer.ckpt_path:
        return f"--trainer.{limit} {getattr(trainer, limit)}"
    done = counted(trainer.global_step, "step") if by_steps else counted(trainer.current_epoch, "epoch")
    return (
        f"the checkpoint had already trained {done} of --trainer.{limit} {getattr(trainer, limit)}; "
        f"raise --trainer.{limit} to train on"
    )


def _stopping_timer(trainer: L.Trainer) -> Timer | None:
    """Lightning's Timer where ``--trainer.max_time`` ended the fit, else None."""
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    remaining = timer.time_remaining() if timer is not None else None
    return timer if remaining is not None and remaining <= 0 and trainer.should_stop else None


def _time_limit_line(trainer: L.Trainer) -> list[str]:
    """Where ``--trainer.max_time`` ended the fit: after how long, and how far into the learning-rate schedule,
    which spans the run's ``max_epochs`` (or ``max_steps``) whatever the time limit."""
    timer = _stopping_timer(trainer)
    if timer is None:
        return []
    planned = trainer.estimated_stepping_batches
    schedule = f" of the {int(planned):,} its learning-rate schedule planned" if math.isfinite(planned) else ""
    return [
        f"  stopped early    --trainer.max_time reached after {_duration(timer.time_elapsed())} of training, at "
        f"step {trainer.global_step:,}{schedule} (resume with --ckpt_path last and a longer --trainer.max_time)"
    ]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f} s"


def _noise(last: float, baseline: dict[str, Any]) -> str:
    """How far the run is from the better pixel baseline in images, and whether that is within two binomial
    standard errors of the validation split (where its size is known)."""
    images = baseline.get("val_images")
    if not images:
        return ""
    best = max(baseline["rbf_svm"], baseline["logistic"])
    apart = round((last - best) * images)
    said = "beyond noise" if beyond_noise(last, best, images) else "within noise"
    return f"; {apart:+d} images of {images:,} against the better baseline, {said}"


def _partial_validation(trainer: L.Trainer, stage: str = "val") -> tuple[int, int] | None:
    """(batches read, batches the loaders hold) where the last validation (``stage`` "test": test) read fewer than
    all (``--trainer.limit_val_batches``, ``limit_test_batches``, ``fast_dev_run``), else None."""
    loaders = trainer.val_dataloaders if stage == "val" else trainer.test_dataloaders
    loaders = loaders if isinstance(loaders, list | tuple) else [loaders]
    try:
        whole = sum(len(loader) for loader in loaders)
    except TypeError:  # a loader without a length (or none): nothing to compare
        return None
    done = sum(int(n) for n in (trainer.num_val_batches if stage == "val" else trainer.num_test_batches))
    return (done, whole) if done < whole else None


def _partial_words(trainer: L.Trainer, stage: str) -> str:
    """Where an evaluation read part of its split: how much, and which setting limits it."""
    partial = _partial_validation(trainer, stage)
    if partial is None:
        return ""
    return f" (on {partial[0]:,} of its {partial[1]:,} batches: --trainer.limit_{stage}_batches or fast_dev_run)"


def _baseline_line(last: float, baseline: dict[str, Any], partial: tuple[int, int] | None) -> str:
    """The run's last validation figure beside the pixel baselines, which score every validation image; where the
    run validated fewer batches, the two are not set against each other."""
    scores = f"RBF SVM on pixels {baseline['rbf_svm']:.4f} · logistic {baseline['logistic']:.4f}"
    fitted = f"fitted on {baseline['train_images']:,} training images"
    if partial is not None:
        images = baseline.get("val_images")
        every = f"all {images:,} validation images" if images else "every validation image"
        return (
            f"  against pixels   {scores} ({fitted}, scored on {every}); not set against this run's "
            f"{last:.4f}, which read {partial[0]:,} of the {partial[1]:,} validation batches "
            "(--trainer.limit_val_batches or fast_dev_run)"
        )
    return (
        f"  against pixels   this run {last:.4f} · {scores} (same validation images; {fitted}){_noise(last, baseline)}"
    )


def _test_split_note(trainer: L.Trainer, name: str) -> list[str]:
    """A line where the data validates on its official test split (CIFARDataModule): the best checkpoint was chosen
    on test images, so its figure is no unbiased test figure."""
    note = getattr(trainer.datamodule, "validates_on_test_split", None)
    if not note:
        return []
    return [
        f"  note             {name} is read on the data's official test split, so a checkpoint chosen by it has no "
        f"unbiased test figure: {note}"
    ]


def _warn_of_reversed_monitors(trainer: L.Trainer) -> None:
    """An EarlyStopping or ModelCheckpoint watching an accuracy with Lightning's default ``mode`` "min" (or a loss
    with "max") takes the metric's improvement for its getting worse: it stops a run that is still learning, or
    keeps its worst checkpoint. Said before the first step, with the mode to give."""
    for callback in trainer.callbacks:
        if not isinstance(callback, EarlyStopping | ModelCheckpoint) or not callback.monitor:
            continue
        metric = callback.monitor.split("/")[-1]
        better = "max" if metric.endswith("acc") else "min" if metric.endswith("loss") else None
        if better is not None and callback.mode != better:
            higher = "higher" if better == "max" else "lower"
            would = (
                "stop a run that is still learning"
                if isinstance(callback, EarlyStopping)
                else "keep the worst checkpoints"
            )
            rank_zero_warn(
                f"{type(callback).__name__} monitors {callback.monitor} with mode '{callback.mode}', which takes a "
                f"{higher} {callback.monitor} for no improvement, though {higher} is better: it would {would}; give "
                f"it mode '{better}' (--trainer.callbacks.mode {better})"
            )


def _relative(path: str | Path | None) -> str:
    if not path:
        return "none"
    path = Path(path)
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class RunSummary(Callback):
    """Tells where a run stands and where it left its files.

    - While fitting with the progress bar off (as the CIFAR-10 recipes run), one line per epoch: the epoch,
      the monitored validation metric (and the best so far), the validation loss, the training accuracy, the
      last logged training loss and the epoch's wall time.
    - At the end of ``fit``: epochs and steps done and their wall time, the run folder, the monitored metric
      at the last epoch and at its best (with the epoch), the classical baseline beside it where one was
      measured (:class:`crate.lit.classical_baseline.ClassicalBaseline`; not set against the run's figure where
      its validation read fewer batches than the split holds), the best checkpoint and the last one
      (with how to resume); at the end of ``validate`` and ``test``: the split's metrics and the checkpoint measured.

    A checkpoint carries the best value and its epoch and the wall time so far, so a resumed run reports what the
    uninterrupted run would (its wall time without the pause between the two). Everything goes through
    Lightning's logger (rank 0 only), as Lightning's own messages do. Epochs are
    numbered from 0, as Lightning numbers them in its progress bar, ``metrics.csv`` and the checkpoint names
    (``best-epoch057-...`` is "epoch 57", the 58th).

    Args:
        epoch_lines: print the per-epoch line when no progress bar shows.
    """

    def __init__(self, epoch_lines: bool = True) -> None:
        self.epoch_lines = epoch_lines
        self._fit_start = 0.0
        self._epoch_start = 0.0
        self._best: tuple[float, int] | None = None
        self._carried_s = 0.0  # wall seconds of the run before the checkpoint it resumed from
        self._trained = False  # whether this fit ran the training loop at all
        self._validated_epoch: int | None = None  # the epoch this fit last validated in
        self._validated_step: int | None = None  # and the optimizer step it had reached then

    def _monitor(self, pl_module: L.LightningModule) -> tuple[str, str]:
        return getattr(pl_module, "checkpoint_monitor", ("val/acc", "max"))

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """A new fit starts with nothing carried; a resumed one gets its record back afterwards
        (``load_state_dict``: Lightning restores callbacks after ``setup`` and before ``on_fit_start``)."""
        if stage == "fit":
            self._best, self._carried_s, self._validated_epoch, self._validated_step = None, 0.0, None, None

    def _warn_if_untrained(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """An evaluation of the untrained model is said at its start: after Lightning has restored the checkpoint
        (at ``setup`` it has not, and ``trainer.ckpt_path`` is still None), not during a fit's validation."""
        stage = trainer.state.fn
        if stage is not None and stage != "fit" and _weights_evaluated(trainer, pl_module) == UNTRAINED:
            name = str((getattr(pl_module, "hparams", None) or {}).get("model_name", ""))
            tag = (
                f", and --model.model_kwargs '{{pretrained: true}}' the weights of the tag {name} (a tag names "
                "weights without loading them, as in timm.create_model)"
                if names_weights_tag(name)
                else ""
            )
            rank_zero_warn(
                f"{getattr(stage, 'value', stage)} without --ckpt_path uses {UNTRAINED}, not a run's weights; "
                f"--ckpt_path last, best or PATH evaluates a run{tag}"
            )

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._warn_if_untrained(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._warn_if_untrained(trainer, pl_module)

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._warn_if_untrained(trainer, pl_module)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _warn_of_reversed_monitors(trainer)
        self._fit_start = time.perf_counter()
        self._epoch_start = self._fit_start  # a run resumed mid-epoch starts its first epoch without the hook
        self._trained = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trained = True  # Lightning skips the training loop of a run that has already reached its end

    def elapsed(self) -> float:
        """Wall seconds of the run: before its last resume and since."""
        return self._carried_s + (time.perf_counter() - self._fit_start if self._fit_start else 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"best": list(self._best) if self._best is not None else None, "elapsed_s": self.elapsed()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        best = state_dict.get("best")
        self._best = (float(best[0]), int(best[1])) if best else None
        self._carried_s = float(state_dict.get("elapsed_s", 0.0))

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Before the callbacks' states are restored: a resume given another EarlyStopping ``patience`` keeps the
        checkpoint's, with its count of validations without improvement (Lightning restores both), which is said."""
        stored = checkpoint.get("callbacks") or {}
        for callback in trainer.early_stopping_callbacks:
            state = stored.get(callback.state_key) or {}
            if "patience" in state and state["patience"] != callback.patience:
                rank_zero_warn(
                    f"EarlyStopping keeps the checkpoint's patience {state['patience']} (and its "
                    f"{state.get('wait_count', 0)} validations without improvement): Lightning restores the callback's "
                    f"state on resume, so this run's patience {callback.patience} is not applied"
                )

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # after every epoch-end hook, the module's included (SimDINO logs its val/knn_acc there), and before the
        # checkpoint callbacks save this record: the value is this epoch's, as the best checkpoint's is
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._validated_epoch, self._validated_step = trainer.current_epoch, trainer.global_step
        name, mode = self._monitor(pl_module)
        value = _number(trainer.callback_metrics.get(name))
        if value is not None and (
            self._best is None or (value > self._best[0] if mode == "max" else value < self._best[0])
        ):
            self._best = (value, trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.epoch_lines or trainer.progress_bar_callback is not None:
            return
        metrics = trainer.callback_metrics
        if self._validated_epoch != trainer.current_epoch:  # not validated in this epoch: an earlier one's values
            metrics = {key: value for key, value in metrics.items() if not key.startswith("val/")}
        name, _ = self._monitor(pl_module)
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else "?"
        parts = [f"epoch {trainer.current_epoch} ({trainer.current_epoch + 1} of {total})"]
        value = _number(metrics.get(name))
        if value is not None:
            best = f" (best {self._best[0]:.4f})" if self._best is not None else ""
            parts.append(f"{name} {value:.4f}{best}")
        for key, shown in (("val/loss", "val/loss"), ("train/acc", "train/acc"), ("train/loss_epoch", "train/loss")):
            if key != name and (number := _number(metrics.get(key))) is not None:
                parts.append(f"{shown} {number:.4f}")
        parts.append(_duration(time.perf_counter() - self._epoch_start))
        rank_zero_info("  ".join(parts))

    def _checkpoints(self, trainer: L.Trainer, monitor: str) -> tuple[str | None, str | None]:
        best = last = None
        for callback in trainer.checkpoint_callbacks:
            if not isinstance(callback, ModelCheckpoint):
                continue
            if callback.monitor == monitor and callback.best_model_path:
                best = callback.best_model_path
            if callback.dirpath and (Path(callback.dirpath) / "last.ckpt").exists():
                last = str(Path(callback.dirpath) / "last.ckpt")
        return best, last

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        name, _ = self._monitor(pl_module)
        session = time.perf_counter() - self._fit_start
        resumed = f" ({_duration(session)} since the resume)" if self._carried_s else ""
        lines = [f"fit ended after {_epochs_trained(trainer)}, {_duration(self.elapsed())}{resumed}"]
        if trainer.log_dir:
            lines.append(f"  run folder       {_relative(trainer.log_dir)}")
        if not self._trained:
            lines.append(f"  nothing trained  {_why_untrained(trainer)}")
        for callback in trainer.early_stopping_callbacks:  # why a run given more epochs ended before them
            if trainer.should_stop and callback.stopped_epoch == trainer.current_epoch - 1:  # this session's stop
                message = " ".join((callback.stopping_reason_message or "").split())
                lines.append(f"  stopped early    EarlyStopping (its own account: {message})")
        lines.extend(_time_limit_line(trainer) if self._trained else [])
        last = _number(trainer.callback_metrics.get(name))
        if last is not None:
            best = f", best {self._best[0]:.4f} at epoch {self._best[1]}" if self._best is not None else ""
            # the fit trained on after its last validation (check_val_every_n_epoch, a val_check_interval that
            # does not end at the epoch's last batch, max_steps inside an epoch): the figure is of earlier weights
            validated, step = self._validated_epoch, self._validated_step
            when = (
                f" at epoch {validated}, step {step:,} of {trainer.global_step:,}"
                if step not in (None, trainer.global_step)
                else ""
            )
            lines.append(f"  {name:<16} last {last:.4f}{when}{best}{_partial_words(trainer, 'val')}")
        elif self._best is not None:  # no validation in this session: the best the checkpoint recorded
            lines.append(f"  {name:<16} best {self._best[0]:.4f} at epoch {self._best[1]} (recorded in the checkpoint)")
        if last is not None or self._best is not None:
            lines.extend(_test_split_note(trainer, name))
        baseline = next((c.scores for c in trainer.callbacks if getattr(c, "scores", None) and c is not self), None)
        if baseline is not None and last is not None:
            lines.append(_baseline_line(last, baseline, _partial_validation(trainer)))
        best_path, last_path = self._checkpoints(trainer, name)
        if best_path:
            lines.append(f"  best checkpoint  {_relative(best_path)}")
        if last_path:
            lines.append(f"  last checkpoint  {_relative(last_path)} (resume with --ckpt_path last)")
        rank_zero_info("\n".join(lines))

    def _evaluated(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        metrics = {k: _number(v) for k, v in trainer.callback_metrics.items() if k.startswith(f"{stage}/")}
        shown = "  ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()) if v is not None) or "no metrics"
        folder = f"; logged in {_relative(trainer.log_dir)}" if trainer.loggers and trainer.log_dir else ""
        shown += _partial_words(trainer, stage) if metrics else ""
        note = _test_split_note(trainer, "val") if stage == "val" else []
        rank_zero_info("\n".join([f"{stage} of {_weights_evaluated(trainer, pl_module)}: {shown}{folder}", *note]))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """After Lightning's own results table (validate, test)."""
        if stage in ("validate", "test"):
            self._evaluated(trainer, pl_module, "val" if stage == "validate" else "test")
