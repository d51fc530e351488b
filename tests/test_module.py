"""The Lightning module on timm's pieces: optimizer factory, cosine schedule, stochastic depth, EMA, Mixup."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import lightning as L
import pytest
import timm
import torch
from helpers import quiet_trainer
from lightning.pytorch.callbacks import Callback

import crate  # noqa: F401
from crate.lit import DigitsDataModule, ImageClassifier
from crate.models.checkpoint import read_checkpoint
from crate.run import read_record


def _fit(
    module: ImageClassifier, steps: int, callbacks: list | None = None, path: Path | None = None, **trainer_args
) -> L.Trainer:
    torch.manual_seed(0)
    trainer = L.Trainer(
        **{"max_epochs": 1, **trainer_args},
        limit_train_batches=steps,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks or [],
    )
    trainer.fit(module, DigitsDataModule(batch_size=8))
    if path is not None:
        trainer.save_checkpoint(path)
    return trainer


def _load_through_timm(path: Path) -> torch.nn.Module:
    overlay = dict(file=str(path))
    return timm.create_model(
        "crate_nano_patch4_32", pretrained=True, num_classes=10, in_chans=1, pretrained_cfg_overlay=overlay
    )


class _RecordLR(Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_learning_rate_follows_linear_warmup_then_cosine_per_step() -> None:
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, min_lr_ratio=0.1)
    module.hparams.warmup_epochs = 0.3  # of the 10 steps of this 1-epoch run: 3 warmup steps
    recorder = _RecordLR()
    _fit(module, steps=10, callbacks=[recorder])
    lr, low, warmup, total = 1e-3, 1e-4, 3, 10
    start = lr / warmup
    expected = [start + t * (lr - start) / warmup for t in range(warmup)]
    expected += [low + 0.5 * (lr - low) * (1 + math.cos(math.pi * t / (total - warmup))) for t in range(total - warmup)]
    assert recorder.lrs == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_run_cut_short_by_max_steps_warms_up_over_its_epochs_length(accumulate: int) -> None:
    """One warm-up epoch of 8 batches is 8 updates (4 with 2 batches a step) whatever ``max_steps`` cuts the run
    at: with ``max_epochs`` 10 and ``max_steps`` 12 the warm-up was 12 / 10 = 1 update, the rest cosine."""
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, min_lr_ratio=0.1)
    module.hparams.warmup_epochs = 1
    recorder = _RecordLR()
    _fit(module, steps=8, callbacks=[recorder], max_epochs=10, max_steps=12, accumulate_grad_batches=accumulate)
    lr, low, warmup, total = 1e-3, 1e-4, 8 // accumulate, 12
    start = lr / warmup
    expected = [start + t * (lr - start) / warmup for t in range(warmup)]
    expected += [low + 0.5 * (lr - low) * (1 + math.cos(math.pi * t / (total - warmup))) for t in range(total - warmup)]
    updates = recorder.lrs[::accumulate]  # the rate of each update, read before its first batch
    assert updates == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("ema_decay", [None, 0.99])
def test_stochastic_weight_averaging_is_refused_with_the_module_s_way_to_average(ema_decay: float | None) -> None:
    """Lightning's StochasticWeightAveraging put its SWALR in the cosine schedule's place (AttributeError
    'step_update' in our step hook), and puts its average in a model without BatchNorm only when training ends,
    after the last validation and checkpoint: no figure or file of the run would hold it. Refused before the
    first step, with the module's own way to average (SimDINO: its teacher)."""
    from lightning.pytorch.callbacks import StochasticWeightAveraging
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from crate.lit import SelfDistillation

    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, ema_decay=ema_decay)
    with pytest.raises(MisconfigurationException, match=r"after the last validation and checkpoint.*--model.ema_d"):
        _fit(module, steps=3, callbacks=[StochasticWeightAveraging(swa_lrs=1e-4)], max_epochs=3)
    assert module.global_step == 0
    teacher = SelfDistillation("crate_nano_patch4_32", img_size=32, head_hidden_dim=16, head_dim=8)
    teacher.trainer = L.Trainer(callbacks=[StochasticWeightAveraging(swa_lrs=1e-4)], logger=False)
    with pytest.raises(MisconfigurationException, match="the teacher, which validation, checkpoints and export read"):
        teacher.configure_optimizers()


def test_a_changing_accumulation_is_refused_before_the_first_step() -> None:
    """Lightning's GradientAccumulationScheduler changed the batches of an update between epochs while the cosine
    was planned over updates of one batch: accumulating 4 from the third of 4 epochs of 23 batches took 58 of the
    92 planned updates and the rate never reached its floor. Refused before the first step, naming the fixed
    accumulation the schedule counts."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32)
    with pytest.raises(MisconfigurationException, match=r"batches of an update between epochs.*accumulate_grad_b"):
        _fit(module, steps=3, callbacks=[GradientAccumulationScheduler({1: 2})], max_epochs=2)
    assert module.global_step == 0


def test_the_finders_rate_and_batch_are_what_the_run_trains_at() -> None:
    """Lightning's LearningRateFinder set --model.lr to its suggestion (the run's records said so) while the cosine
    schedule, built before it, trained at the given rate; BatchSizeFinder's batch left the schedule planned over
    the old count of steps, so it never decayed. The optimizer and schedule are built again for what the run
    trains: the warm-up peaks at the recorded rate, and the rate ends at its floor. Tuner.lr_find, which the CLI
    advises, runs its ramp through our step hook and the next fit trains at its rate."""
    from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder
    from lightning.pytorch.tuner import Tuner

    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, warmup_epochs=0.5)
    recorder = _RecordLR()
    _fit(module, steps=20, callbacks=[LearningRateFinder(num_training_steps=20), recorder], max_epochs=1)
    assert module.hparams.lr != 1e-3 and max(recorder.lrs) == pytest.approx(module.hparams.lr)
    sized = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, min_lr_ratio=0.1)
    sized.hparams.warmup_epochs = 0
    recorder = _RecordLR()
    finder = BatchSizeFinder(init_val=8, max_trials=2, steps_per_trial=1)  # doubles batch 8 at each trial
    torch.manual_seed(0)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        limit_val_batches=1, callbacks=[finder, recorder])  # fmt: skip
    data = DigitsDataModule(batch_size=8)
    trainer.fit(sized, data)
    total = math.ceil(1437 / data.batch_size)  # the digits' 1,437 training images, in batches of the found size
    assert data.batch_size > 8 and trainer.global_step == len(recorder.lrs) == total
    lr, low = 1e-3, 1e-4
    expected = [low + 0.5 * (lr - low) * (1 + math.cos(math.pi * t / total)) for t in range(total)]
    assert recorder.lrs == pytest.approx(expected, rel=1e-9)  # the cosine over the steps the run took
    tuned = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, warmup_epochs=0.5)
    tuner_trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    found = Tuner(tuner_trainer).lr_find(tuned, datamodule=DigitsDataModule(batch_size=8), num_training=20)
    assert found.suggestion() is not None and tuned.hparams.lr == found.suggestion()


def test_a_warmup_as_long_as_the_run_is_said_and_a_shorter_one_is_not() -> None:
    """The digits config's 3 warm-up epochs in a 1-epoch run: the rate rose over every step but the last and never
    decayed, without a word."""
    long = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, warmup_epochs=3)
    recorder = _RecordLR()
    with pytest.warns(UserWarning, match=r"--model.warmup_epochs 3 is as long as this run \(4 steps\)"):
        _fit(long, steps=4, callbacks=[recorder])
    assert recorder.lrs == sorted(recorder.lrs) and recorder.lrs[-1] == pytest.approx(1e-3)  # rising throughout
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        short = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, warmup_epochs=0.5)
        _fit(short, steps=4)


def test_a_resume_with_more_epochs_anneals_over_the_new_length(tmp_path: Path) -> None:
    """Two epochs of 4 steps, then resumed with max_epochs 4: the 8 new updates follow the cosine over 16
    updates (a transcription of the formula), not the floor the 8-update schedule reached, and the change is
    said. The rate of each step is read off the optimizer before the step."""

    def module() -> ImageClassifier:
        return ImageClassifier(
            "crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, min_lr_ratio=0.1, warmup_epochs=0
        )

    first, resumed = _RecordLR(), _RecordLR()
    _fit(module(), steps=4, callbacks=[first], max_epochs=2, path=tmp_path / "two.ckpt")
    trainer = L.Trainer(
        max_epochs=4,
        limit_train_batches=4,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[resumed],
    )
    with pytest.warns(UserWarning, match=r"schedule spans 8 updates and this run's 16 \(another --trainer.max_epochs"):
        trainer.fit(module(), DigitsDataModule(batch_size=8), ckpt_path=tmp_path / "two.ckpt")

    def cosine(total: int, lr: float = 1e-3, low: float = 1e-4) -> list[float]:
        return [low + 0.5 * (lr - low) * (1 + math.cos(math.pi * t / total)) for t in range(total)]

    assert first.lrs == pytest.approx(cosine(8), rel=1e-9)
    assert resumed.lrs == pytest.approx(cosine(16)[8:], rel=1e-9)  # the restored schedule would give 1e-4 eight times


def test_optimizer_groups_skip_norms_biases_and_embeddings_and_apply_layer_decay() -> None:
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, weight_decay=0.05, layer_decay=0.5)
    trainer = _fit(module, steps=1)
    groups = trainer.optimizers[0].param_groups
    names = {id(p): n for n, p in module.model.named_parameters()}
    for group in groups:
        for param in group["params"]:
            name = names[id(param)]
            no_decay = param.ndim <= 1 or name in ("pos_embed", "cls_token")
            assert group["weight_decay"] == (0.0 if no_decay else 0.05), name
    scales = sorted({group["lr_scale"] for group in groups})
    assert scales[-1] == 1.0 and scales[0] == pytest.approx(0.5**5)  # stem, 4 blocks, head: 6 layer ids
    assert type(trainer.optimizers[0]) is torch.optim.AdamW and trainer.optimizers[0].defaults["fused"]
    lion = _fit(ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, optimizer="lion"), steps=1)
    assert type(lion.optimizers[0]).__module__.startswith("timm.optim")  # timm's own Lion, no extra package
    assert type(lion.optimizers[0]).__name__ == "Lion" and "fused" not in lion.optimizers[0].defaults
    with pytest.raises(ValueError, match="unknown optimizer"):
        ImageClassifier("crate_nano_patch4_32", optimizer="adamww")


class _LoggedLR(Callback):
    """What train/lr logged at each step, beside every group's lr divided by its layer-decay scale."""

    def __init__(self) -> None:
        self.logged: list[float] = []
        self.unscaled: list[set[float]] = []
        self.first_group: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        self.logged.append(float(trainer.callback_metrics["train/lr"]))

    def on_before_optimizer_step(self, trainer: L.Trainer, module: L.LightningModule, optimizer) -> None:
        self.unscaled.append({round(g["lr"] / g.get("lr_scale", 1.0), 15) for g in optimizer.param_groups})
        self.first_group.append(optimizer.param_groups[0]["lr"])


def test_logged_learning_rate_is_the_schedule_s_under_layer_decay() -> None:
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, layer_decay=0.5)
    module.hparams.warmup_epochs = 0.5
    recorder = _LoggedLR()
    _fit(module, steps=4, callbacks=[recorder], log_every_n_steps=1)  # train/lr is logged at logging steps
    assert all(len(values) == 1 for values in recorder.unscaled)  # one schedule value, scaled per group
    assert recorder.logged == pytest.approx([values.pop() for values in recorder.unscaled], rel=1e-6)
    # what was logged before: the first group's, the schedule's value times 0.5 ** 5
    assert recorder.first_group == pytest.approx([lr * 0.5**5 for lr in recorder.logged], rel=1e-6)


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"])
def test_drop_path_rate_is_stochastic_depth_in_training_only(name: str) -> None:
    module = ImageClassifier(name, in_chans=1, img_size=32, drop_path_rate=0.5)
    rates = [block.drop_path1.drop_prob for block in module.model.blocks[1:]]
    assert rates == pytest.approx([0.5 / 3, 1.0 / 3, 0.5])  # timm's linear rule over 4 blocks
    x = torch.randn(4, 1, 32, 32)
    module.train()
    assert not torch.equal(module(x), module(x))  # different residual branches dropped
    module.eval()
    assert torch.equal(module(x), module(x))


def test_ema_is_validated_checkpointed_and_what_timm_loads(tmp_path: Path) -> None:
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, ema_decay=0.9)
    modes: dict[str, list[bool]] = {"train": [], "val": []}

    class RecordMode(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            modes["train"].append(pl_module.model_ema.module.training)

        def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
            modes["val"].append(pl_module.evaluated_model().training)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(module, steps=5, callbacks=[RecordMode()], path=tmp_path / "ema.ckpt")
    assert not [w for w in caught if "eval mode" in str(w.message)]  # the copy follows the module's mode
    assert modes["train"] == [True] * 5  # in the module's mode while training ...
    assert modes["val"] and not any(modes["val"])  # ... and in eval mode whenever it is measured
    assert module.evaluated_model() is module.model_ema.module
    assert not any(p.requires_grad for p in module.model_ema.parameters())  # never optimised (DDP-safe)
    ema, live = module.model_ema.module.state_dict(), module.model.state_dict()
    assert any(not torch.equal(ema[k], live[k]) for k in ema)  # the average is not the live weights
    loaded = _load_through_timm(tmp_path / "ema.ckpt")
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, ema[key]), key


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ema_decay_warms_up_to_its_cap_over_optimizer_steps(accumulate: int) -> None:
    """The average after optimizer step n is ``d * ema + (1 - d) * live`` with ``d = min(ema_decay, 1 - n**(-2/3))``:
    the first step copies the weights, and ``ema_decay`` is a cap reached only at step ``(1 - ema_decay)**-1.5``
    (the documented warm-up); recomputed here in float64 from the live weights after each optimizer step, once
    per step under gradient accumulation too."""
    cap = 0.55  # steps 2 and 3 decay by the warm-up (0.370, 0.519), steps 4 and 5 by the cap
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, ema_decay=cap)
    live: list[dict[str, torch.Tensor]] = []

    class RecordLive(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if (batch_idx + 1) % accumulate == 0:  # the batches that end with an optimizer step
                live.append({k: v.detach().double().clone() for k, v in pl_module.model.state_dict().items()})

    _fit(module, steps=5 * accumulate, callbacks=[RecordLive()], accumulate_grad_batches=accumulate)
    assert module.global_step == len(live) == 5
    expected = {k: v.clone() for k, v in live[0].items()}
    for n, weights in enumerate(live[1:], start=2):
        decay = min(cap, 1.0 - n ** (-2.0 / 3.0))
        for key, value in weights.items():
            expected[key] = decay * expected[key] + (1.0 - decay) * value
    ema = module.model_ema.module.state_dict()
    assert any(not torch.allclose(expected[k], live[-1][k]) for k in expected)  # the average is not the live weights
    for key, value in expected.items():
        torch.testing.assert_close(ema[key].double(), value, rtol=1e-5, atol=1e-6, msg=key)


def test_mixup_batches_train_on_soft_targets_and_odd_batches_on_hard_ones() -> None:
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, mixup_alpha=0.2, cutmix_alpha=1.0)
    calls = {"soft": 0, "hard": 0}
    original = module.mixed_criterion.forward

    def counted(*args) -> torch.Tensor:
        calls["soft"] += 1
        return original(*args)

    module.mixed_criterion.forward = counted
    val_loss = module.eval_metrics["val"]["loss"]
    update = val_loss.update

    def hard(value: torch.Tensor, weight: torch.Tensor) -> None:  # per-sample losses of hard labels
        calls["hard"] += 1
        return update(value, weight=weight)

    val_loss.update = hard
    _fit(module, steps=3)
    assert calls["soft"] == 3  # batches of 8
    assert calls["hard"] >= 1  # validation uses the hard labels


@pytest.mark.slow
def test_compiled_model_trains_and_checkpoints_with_plain_parameter_names(tmp_path: Path) -> None:
    """``compile=True`` compiles in place: training runs through the compiled forward, the checkpoint's
    keys are the eager model's (no ``_orig_mod.``), and timm loads it back into an eager model."""
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, compile=True)
    _fit(module, steps=2, path=tmp_path / "compiled.ckpt")
    assert module._compiled and module.model._compiled_call_impl is not None
    saved = torch.load(tmp_path / "compiled.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert not any("_orig_mod" in key for key in saved)
    assert set(saved) == {f"model.{key}" for key in module.model.state_dict()}
    loaded = _load_through_timm(tmp_path / "compiled.ckpt").eval()
    images = torch.randn(3, 1, 32, 32)
    module.model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(images), module.model(images), atol=1e-5)  # compiled vs eager forward
    with pytest.raises(ValueError, match="compile_mode"):
        ImageClassifier("crate_nano_patch4_32", compile=True, compile_mode="fastest")


def test_train_accuracy_is_each_epoch_s_accuracy_over_all_its_training_batches() -> None:
    """train/acc (handed to Lightning once an epoch) is the share of correct argmax predictions over every
    batch of its epoch, recomputed here from the logits the model gave and the labels of each batch."""

    class RecordPredictions(Callback):
        def __init__(self) -> None:
            self.correct: dict[int, list[torch.Tensor]] = {}
            self.logged: dict[int, float] = {}
            self._logits: torch.Tensor | None = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            forward = type(pl_module.model).forward

            def record(model, images):  # noqa: ANN001, ANN202
                logits = forward(model, images)
                self._logits = logits.detach()
                return logits

            pl_module.model.forward = record.__get__(pl_module.model)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            hits = self._logits.argmax(-1) == batch[1]
            self.correct.setdefault(trainer.current_epoch, []).append(hits)

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            if trainer.current_epoch > 0:
                self.logged[trainer.current_epoch - 1] = float(trainer.callback_metrics["train/acc"])

        def on_fit_end(self, trainer, pl_module) -> None:
            self.logged[trainer.current_epoch - 1] = float(trainer.callback_metrics["train/acc"])

    recorder = RecordPredictions()
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, lr=3e-3)
    _fit(module, steps=5, callbacks=[recorder], max_epochs=2)
    assert sorted(recorder.logged) == [0, 1]
    for epoch, hits in recorder.correct.items():
        assert len(hits) == 5
        assert recorder.logged[epoch] == pytest.approx(torch.cat(hits).float().mean().item(), abs=1e-6)
    assert recorder.logged[0] != recorder.logged[1]  # two epochs, each with its own value


@pytest.mark.parametrize(("scale", "factor"), [("sqrt", 2.0), ("linear", 4.0)])
def test_lr_base_size_scales_the_peak_learning_rate_to_the_run_s_batch(
    scale: str, factor: float, tmp_path: Path
) -> None:
    """lr 1e-3 given at batch 2, run at batch 8: 2e-3 by the square root, 4e-3 linearly (no warmup); the
    checkpoint reader reports that scaled peak, which export's card shows beside lr."""
    module = ImageClassifier(
        "crate_nano_patch4_32", in_chans=1, img_size=32, lr=1e-3, lr_base_size=2, lr_base_scale=scale
    )
    module.hparams.warmup_epochs = 0.0
    recorder = _RecordLR()
    _fit(module, steps=1, callbacks=[recorder], path=tmp_path / "run.ckpt")
    assert recorder.lrs == pytest.approx([1e-3 * factor])
    assert read_record(read_checkpoint(tmp_path / "run.ckpt")).peak_lr == pytest.approx(1e-3 * factor)
    with pytest.raises(ValueError, match="lr_base_scale"):
        ImageClassifier("crate_nano_patch4_32", lr_base_size=128, lr_base_scale="cubic")


def test_predicted_probabilities_of_a_bf16_run_are_the_float32_softmax_of_its_logits() -> None:
    """Under bf16 autocast the softmax of bf16 logits gave probabilities rounded to bf16 (0.171875 in a
    predictions.csv of a bf16 CIFAR-10 run): they are the softmax of the same logits in float32, against a
    float64 transcription of the softmax."""
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32).eval()
    images = torch.randn(4, 1, 32, 32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = module.evaluated_model()(images)
        probabilities = module.predict_step(images, 0)["probabilities"]
    assert logits.dtype == torch.bfloat16
    z = logits.double()
    expected = (z - z.amax(-1, keepdim=True)).exp() / (z - z.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True)
    torch.testing.assert_close(probabilities.double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("num_classes", [8, 12])
def test_a_datamodule_of_another_number_of_classes_than_the_head_is_refused_before_a_step(num_classes: int) -> None:
    """Built apart in Python, a 12-output head trained on the 10 digits without a word (two outputs no image
    belongs to, scored by val/acc's argmax), and an 8-output one failed at the loss on label 8."""
    module = ImageClassifier("crate_nano_patch4_32", num_classes=num_classes, in_chans=1, img_size=16)
    before = {name: value.clone() for name, value in module.state_dict().items()}
    for run in ("fit", "validate"):
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
        with pytest.raises(
            ValueError, match=rf"the data has 10 classes and .*head {num_classes} outputs: .*num_classes=10"
        ):
            getattr(trainer, run)(module, datamodule=DigitsDataModule(batch_size=8, img_size=16))
    assert all(torch.equal(value, before[name]) for name, value in module.state_dict().items())


def test_a_head_the_size_of_the_data_s_classes_trains_from_a_datamodule_and_from_loaders_alone() -> None:
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=32)
    _fit(module, steps=2)
    data = DigitsDataModule(batch_size=8)
    data.setup("fit")
    trainer = quiet_trainer(max_steps=1, limit_val_batches=1)
    trainer.fit(module, data.train_dataloader(), data.val_dataloader())  # no DataModule: nothing to compare
    assert trainer.global_step == 1


def test_a_mixup_step_weighs_its_soft_targets_by_the_class_weights() -> None:
    """timm's soft-target loss has no class weights, and a run with both was trained unweighted without a word."""
    weight = torch.arange(1.0, 11.0)
    module = ImageClassifier(
        "crate_nano_patch4_32", in_chans=1, img_size=32, mixup_alpha=0.2, class_weights=weight.tolist()
    )
    seen: dict[str, torch.Tensor] = {}

    def mixup(images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        one_hot = torch.nn.functional.one_hot(targets, 10).float()
        seen["soft"] = 0.7 * one_hot + 0.3 * one_hot.flip(0)
        return images, seen["soft"]

    forward = module.forward

    def recorded(images: torch.Tensor) -> torch.Tensor:
        logits = forward(images)
        if module.training:
            seen["logits"] = logits.detach().double()
        return logits

    class Loss(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            seen["loss"] = outputs["loss"].detach()

    module.mixup, module.forward = mixup, recorded
    _fit(module, steps=1, callbacks=[Loss()])
    weighted = seen["soft"].double() * weight.double()
    expected = -(weighted * torch.log_softmax(seen["logits"], dim=-1)).sum() / weighted.sum()
    assert float(seen["loss"]) == pytest.approx(float(expected), rel=1e-5)
    unweighted = -(seen["soft"].double() * torch.log_softmax(seen["logits"], dim=-1)).sum(-1).mean()
    assert abs(float(unweighted) - float(expected)) > 1e-3


@pytest.mark.parametrize(
    "model_kwargs", [{"pretrained": True}, {"pretrained": True, "pretrained_cfg_overlay": {"file": "other.pth"}}]
)
def test_start_weights_given_twice_are_refused(model_kwargs: dict, tmp_path: Path) -> None:
    """A tag's weights asked for (model_kwargs pretrained) beside pretrained_file: the file's loaded and the tag's
    were dropped without a word."""
    path = tmp_path / "start.pth"
    torch.save(timm.create_model("crate_nano_patch4_32", num_classes=10, in_chans=1).state_dict(), path)
    with pytest.raises(ValueError, match=r"start weights are given twice, by pretrained_file .*start\.pth.*give one"):
        ImageClassifier(
            "crate_nano_patch4_32.digits", in_chans=1, img_size=32, pretrained_file=str(path), model_kwargs=model_kwargs
        )
    built = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, pretrained_file=str(path))
    torch.testing.assert_close(built.model.state_dict(), torch.load(path), rtol=0, atol=0)  # one source: it loads


@pytest.mark.parametrize("setting", [{"objective_weight": 0.5}, {"drop_path_rate": 0.1}])
def test_backbone_settings_of_a_frozen_backbone_are_refused(setting: dict) -> None:
    """With the backbone frozen, the layer objective's gradients reach no trained weight and stochastic depth is
    off in evaluation mode: each trained the head as without it, without a word."""
    (key,) = setting
    with pytest.raises(ValueError, match=rf"freeze_backbone trains the head alone, and {key} .* leave them at 0"):
        ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, freeze_backbone=True, **setting)
    ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=32, **setting)  # on a trained backbone: kept
