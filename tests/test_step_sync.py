"""A training step that never waits for the device: nothing in the step, its callbacks or the loop between
steps reads a tensor's value back (``item``, ``bool``, ``tolist``, ``float`` all run ``_local_scalar_dense``),
outside the steps that log or check; training batches keep one shape; and the compiled step computes what
the eager one does."""

from __future__ import annotations

import traceback

import lightning as L
import pytest
import torch
from helpers import cifar_arrays
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from crate.data import BatchAugmentation
from crate.lit import CIFARDataModule, CodingRateMonitor, ImageClassifier
from crate.lit.fault_tolerance import NonFiniteError, NonFiniteGuard

HOST_READS = {"aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique2"}


class _HostReads(TorchDispatchMode):
    """Records every operation that brings a tensor's value (or a shape made from it) to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if str(func.overloadpacket) in HOST_READS:
            where = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack()[-24:-1]]
            self.reads.append(f"{func}: " + " <- ".join(reversed(where)))
        return func(*args, **(kwargs or {}))


class _WatchSteps(Callback):
    """Watches from the start of batch ``first`` to the start of batch ``last``: the steps, their callbacks,
    the module's own batch-end hook and the loop's work between them."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last
        self.mode = _HostReads()
        self.shapes: set[tuple[int, ...]] = set()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.shapes.add(tuple(batch[0].shape))
        if batch_idx == self.first:
            self.mode.__enter__()
        elif batch_idx == self.last:
            self.mode.__exit__(None, None, None)


def _data(monkeypatch: pytest.MonkeyPatch, train_size: int = 52) -> CIFARDataModule:
    arrays = cifar_arrays(seed=2, train_size=train_size, test_size=16)
    augmentation = BatchAugmentation(padding=4, hflip=0.5, policy="trivial", policy_prob=0.5)
    data = CIFARDataModule(download=False, batch_size=8, augmentation=augmentation, drop_last=True)
    monkeypatch.setattr(data, "_open", lambda train, download: arrays[train])
    return data


def _quiet_trainer(callbacks: list[Callback], **limits) -> L.Trainer:
    """A trainer without validation, logger, checkpoints, bar or summary: only the training steps."""
    return L.Trainer(
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **limits,
    )


def test_training_steps_read_nothing_back_from_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps 2-5 of a run with the policy, a moving average, the non-finite guard and the coding-rate monitor
    (their read-backs every 50 steps, as logging's), and the last batch of the epoch dropped: no read-back."""
    watch = _WatchSteps(first=1, last=5)
    monitors = [NonFiniteGuard(check_every_n_steps=50), CodingRateMonitor(every_n_steps=50, probe_size=8)]
    trainer = _quiet_trainer([watch, *monitors], max_epochs=1, log_every_n_steps=50)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, img_size=32, ema_decay=0.99, warmup_epochs=0.5)
    trainer.fit(module, _data(monkeypatch))
    assert trainer.global_step == 6  # 52 images in batches of 8: the last 4 dropped
    assert watch.shapes == {(8, 3, 32, 32)}
    assert watch.mode.reads == []


def test_the_guard_still_stops_at_the_first_non_finite_step_when_it_reads_back_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loss poisoned at step 3 is read back at step 5 (every 5 steps), and the error names step 3."""

    class _Poison(Callback):
        def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int):
            if batch_idx == 2:  # the third step: its loss is nan
                with torch.no_grad():
                    next(pl_module.model.parameters()).fill_(float("nan"))

    trainer = _quiet_trainer([_Poison(), NonFiniteGuard(check_every_n_steps=5)], max_epochs=1)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, img_size=32)
    with pytest.raises(NonFiniteError, match=r"training stopped at step 3 \(epoch 0; noticed at step 5\): the loss"):
        trainer.fit(module, _data(monkeypatch))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_the_compiled_step_equals_the_eager_step(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Three steps from the same weights on the same batches (fp32; on a CPU ``reduce-overhead`` runs without
    CUDA graphs): the losses and the weights after them agree to float rounding."""
    results = []
    for compile in (False, True):
        torch.manual_seed(0)
        module = ImageClassifier(
            "crate_nano_patch4_32", num_classes=10, img_size=32, compile=compile, compile_mode=mode, ema_decay=0.9
        )

        class _Losses(Callback):
            def __init__(self) -> None:
                self.values: list[float] = []

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
                self.values.append(float(outputs["loss"]))

        recorder = _Losses()
        trainer = _quiet_trainer([recorder], max_steps=3)
        trainer.fit(module, _data(monkeypatch))
        results.append((recorder.values, {k: v.detach().clone() for k, v in module.state_dict().items()}))
    (eager_losses, eager), (compiled_losses, compiled) = results
    assert len(eager_losses) == 3
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-4, atol=1e-5)
    assert eager.keys() == compiled.keys()  # compiled in place: the same parameter names
    for key in eager:
        torch.testing.assert_close(compiled[key], eager[key], rtol=1e-4, atol=1e-5, msg=key)
    assert not torch.equal(eager["model.head.weight"], results[0][1]["model.head.weight"] * 0)  # trained weights


def test_the_steps_that_log_are_lightnings_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """``logs_this_step`` (public trainer state) picks the steps Lightning's logger connector writes (every third
    step here), step by step."""
    from crate.lit.step_logging import logs_this_step

    class Record(Callback):
        def __init__(self) -> None:
            self.seen: list[tuple[bool, bool]] = []

        def on_train_batch_start(self, trainer: L.Trainer, *args) -> None:  # both rules, for the step to run
            self.seen.append((logs_this_step(trainer), trainer._logger_connector.should_update_logs))

        def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
            trainer.should_stop = trainer.should_stop or trainer.global_step >= 5

    record = Record()
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, img_size=32, model_kwargs={"depth": 1})
    _quiet_trainer([record], max_epochs=1, log_every_n_steps=3).fit(module, _data(monkeypatch))
    assert [ours for ours, _ in record.seen] == [lightnings for _, lightnings in record.seen]
    assert any(ours for ours, _ in record.seen) and not all(ours for ours, _ in record.seen)
