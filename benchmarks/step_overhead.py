"""What a training step of train.py costs beyond the model: aten operations per step by part, and the loop's
own time per step against a bare PyTorch loop on the same batches, in one run
(``benchmarks/results/step_overhead.json``).

    .venv/bin/python benchmarks/step_overhead.py             # this machine's CPU
    python benchmarks/step_overhead.py --device cuda --out benchmarks/results/step_overhead_gpu.json

Operations are counted with a ``TorchDispatchMode`` (every aten operation, views included; on a GPU each
non-view operation is about one kernel launch), on the CIFAR-10 recipe (``configs/cifar10.yaml`` and
``configs/cifar10/crate_micro_patch4_32.yaml``: crate_micro, batch 128, bf16, crop + flip + the policy)
run through ``train.py``'s own CLI on random stand-in images (no dataset needed): the augmentation alone at
batch 128 and 512 with and without the policy, then each part of a step of the real loop (augmentation,
forward + loss, backward, optimizer, the moving average, logging + metrics (training_step's own work beside
the forward pass and the loss), the callbacks' batch-end hooks, and Lightning's own work in and between
steps).

The time comparison uses a tiny model (CRATE with depth 1, width 16), so that the framework's cost is not
hidden by the model's: the train.py loop (fit, all of the CLI's callbacks, loggers at their interval) and a
bare loop (the same batches already on the device, the same augmentation, forward, loss, backward, fused
AdamW) alternate ``--repeats`` times; ``loop_overhead_ms`` is the median loop step minus the median bare step.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

import crate  # noqa: F401
from crate.data import BatchAugmentation
from crate.lit import cli_main

REPO = Path(__file__).resolve().parents[1]
RECIPE = ["--config", str(REPO / "configs/cifar10.yaml")]
RECIPE += ["--config", str(REPO / "configs/cifar10/crate_micro_patch4_32.yaml")]
TINY = '{"depth": 1, "embed_dim": 16, "num_heads": 2}'


class OpCounter(TorchDispatchMode):
    """Counts aten operations under the label of the part of the step that runs them."""

    def __init__(self) -> None:
        super().__init__()
        self.label = "loop"
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.counts[self.label] += 1
        return func(*args, **(kwargs or {}))

    @contextmanager
    def part(self, label: str):  # noqa: ANN201
        previous, self.label = self.label, label
        try:
            yield
        finally:
            self.label = previous


def _labelled(counter: OpCounter, label: str, function: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with counter.part(label):
            return function(*args, **kwargs)

    return wrapped


class _Parts(Callback):
    """Switches the counter's label at the hooks of a training step, counting steps ``first`` to ``last``."""

    def __init__(self, counter: OpCounter, first: int, last: int) -> None:
        self.counter, self.first, self.last = counter, first, last

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int):
        if batch_idx == self.first:
            self.counter.counts.clear()
            self.counter.__enter__()
        elif batch_idx == self.last:
            self.counter.__exit__(None, None, None)
        self.counter.label = "loop"

    def on_before_backward(self, *args: Any) -> None:
        self.counter.label = "backward"

    def on_before_optimizer_step(self, *args: Any) -> None:
        self.counter.label = "optimizer"

    def on_train_batch_end(self, *args: Any) -> None:
        self.counter.label = "callbacks"  # the callbacks' batch-end hooks, then the module's

    def on_train_batch_end_module(self) -> None:
        self.counter.label = "loop"


def _stand_in_cifar(train_size: int) -> dict[bool, SimpleNamespace]:
    """Random arrays in the layout of torchvision's CIFAR10 objects (what CIFARDataModule reads)."""
    rng = np.random.default_rng(0)
    return {
        train: SimpleNamespace(
            data=rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8),
            targets=list(rng.integers(0, 10, size=n)),
            classes=[f"c{i}" for i in range(10)],
        )
        for train, n in ((True, train_size), (False, 256))
    }


def _cli(args: list[str], log_root: str, steps: int, device: str, train_size: int) -> Any:
    """train.py's CLI on the recipe with CIFAR10's DataModule reading stand-in arrays, ready to fit."""
    arrays = _stand_in_cifar(train_size)
    data = ["--data.class_path", "crate.lit.CIFARDataModule", "--data.init_args.download", "false"]
    quiet = ["--trainer.enable_model_summary", "false", "--trainer.num_sanity_val_steps", "0"]
    run = ["--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "0", "--trainer.accelerator", device]
    argv, sys.argv = sys.argv, sys.argv[:1]  # the CLI is given its arguments, not this script's
    try:
        cli = cli_main([*RECIPE, *data, *quiet, *run, *args, "--log_root", log_root], run=False)
    finally:
        sys.argv = argv
    cli.datamodule._open = lambda train, download: arrays[train]
    return cli


def count_augmentation(device: torch.device) -> dict[str, dict[str, int]]:
    """Operations of one batch of the augmentation (its tables built by a first batch), by settings and size."""
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    settings = {
        "crop_flip": BatchAugmentation(padding=4, hflip=0.5),
        "crop_flip_policy": BatchAugmentation(padding=4, hflip=0.5, policy="trivial"),
        "crop_flip_policy_erase": BatchAugmentation(padding=4, hflip=0.5, policy="trivial", re_prob=0.25),
    }
    counts: dict[str, dict[str, int]] = {}
    for name, augmentation in settings.items():
        for batch in (128, 512):
            images = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, device=device)
            seeds = torch.arange(batch, device=device) + 1_000_003
            augmentation(images, seeds, mean, std)
            counter = OpCounter()
            with counter:
                augmentation(images, seeds, mean, std)
            counts.setdefault(name, {})[str(batch)] = sum(counter.counts.values())
    return counts


def count_step(device: str, log_root: str) -> dict[str, Any]:
    """Operations per step of the recipe's real loop, by part (steps 3 to 12 of a fit, averaged)."""
    first, last = 2, 12
    cli = _cli([], log_root, last + 1, device, train_size=128 * (last + 2))
    counter = OpCounter()
    module, data = cli.model, cli.datamodule
    parts = _Parts(counter, first, last)
    cli.trainer.callbacks.insert(0, parts)
    module.model.forward = _labelled(counter, "forward_loss", module.model.forward)
    data.augment = _labelled(counter, "augmentation", data.augment)
    module.training_step = _labelled(counter, "logging_metrics", module.training_step)  # forward, loss: nested
    if module.model_ema is not None:
        module.model_ema.update = _labelled(counter, "moving_average", module.model_ema.update)
    hook = module.on_train_batch_end

    def batch_end(*args: Any, **kwargs: Any) -> None:  # the module's own hook runs after the callbacks'
        hook(*args, **kwargs)
        parts.on_train_batch_end_module()

    module.on_train_batch_end = batch_end
    cli.trainer.fit(module, datamodule=data)
    steps = last - first
    per_step = {part: round(n / steps, 1) for part, n in sorted(counter.counts.items())}
    per_step["logging_metrics_callbacks"] = per_step.get("logging_metrics", 0.0) + per_step.get("callbacks", 0.0)
    return {
        "model": module.hparams.model_name,
        "batch_size": data.batch_size,
        "precision": str(cli.trainer.precision),
        "optimizer": type(cli.trainer.optimizers[0]).__name__,
        "optimizer_fused": bool(cli.trainer.optimizers[0].defaults.get("fused")),
        "steps_counted": steps,
        "ops_per_step": per_step,
        "ops_per_step_total": round(sum(n for k, n in per_step.items() if k != "logging_metrics_callbacks"), 1),
    }


class _StepClock(Callback):
    """The start time of every training step from ``first`` on (the device synced first on a GPU, where the
    times are used only as a total)."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.starts: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int):
        if batch_idx >= self.first:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize()
            self.starts.append(time.perf_counter())


def _bare_steps(cli: Any, batches: list[tuple[torch.Tensor, ...]], warmup: int) -> list[float]:
    """Step times of a hand-written loop over the same batches: augmentation, forward, loss, backward,
    fused AdamW (the start of every step from ``warmup`` on, as :class:`_StepClock` takes them)."""
    import timm

    hp = cli.model.hparams
    device = batches[0][0].device
    model = timm.create_model(hp.model_name, num_classes=hp.num_classes, img_size=hp.img_size, **hp.model_kwargs)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay, fused=True)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=hp.label_smoothing)
    data = cli.datamodule
    starts = []
    for index, (images, labels, seeds) in enumerate([*batches, batches[-1]]):
        if index >= warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            starts.append(time.perf_counter())
        if index == len(batches):
            break
        inputs = data.augmentation(images, seeds, data.mean, data.std, size=data.img_size)
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return starts


def _summary(starts: list[float]) -> dict[str, float]:
    steps = np.diff(starts) * 1000
    return {"median_ms": float(np.median(steps)), "mean_ms": float(steps.mean())}


def time_loop(device: str, log_root: str, steps: int, repeats: int) -> dict[str, Any]:
    """ms per step of the train.py loop and of the bare loop, alternated ``repeats`` times, on a tiny model.

    The median step (the typical one) and the mean step (with the logging and monitoring steps that come every
    50 and 100 steps) are both reported; the overhead is the difference of the medians pooled over the repeats
    (on a GPU, where steps are timed as a total, of the means).
    """
    warmup = 5
    args = ["--model.model_kwargs", TINY, "--trainer.precision", "32-true"]
    loop_steps: list[np.ndarray] = []
    bare_steps: list[np.ndarray] = []
    runs = []
    for repeat in range(repeats):
        total = warmup + steps
        cli = _cli(args, f"{log_root}/loop{repeat}", total + 1, device, train_size=128 * (total + 2))
        clock = _StepClock(warmup)
        cli.trainer.callbacks.insert(0, clock)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        loader = cli.datamodule.train_dataloader()
        target = cli.model.device
        batches = [tuple(t.to(target) for t in batch) for batch, _ in zip(loader, range(total), strict=False)]
        bare = _bare_steps(cli, batches, warmup)
        loop_steps.append(np.diff(clock.starts) * 1000)
        bare_steps.append(np.diff(bare) * 1000)
        runs.append({"train_py_loop": _summary(clock.starts), "bare_loop": _summary(bare)})
        loop, bare_run = runs[-1]["train_py_loop"], runs[-1]["bare_loop"]
        print(
            f"repeat {repeat}: train.py loop {loop['median_ms']:.2f} ms a step (mean {loop['mean_ms']:.2f}), "
            f"bare loop {bare_run['median_ms']:.2f} ms (mean {bare_run['mean_ms']:.2f})",
            flush=True,
        )
    pooled_loop, pooled_bare = np.concatenate(loop_steps), np.concatenate(bare_steps)
    statistic = np.mean if device == "cuda" else np.median
    loop, bare = float(statistic(pooled_loop)), float(statistic(pooled_bare))
    return {
        "model": f"crate_nano_patch4_32 with {TINY}",
        "batch_size": 128,
        "precision": "32-true",
        "steps_timed": steps,
        "repeats": runs,
        "statistic": statistic.__name__,
        "loop_step_ms": round(loop, 3),
        "bare_step_ms": round(bare, 3),
        "loop_mean_step_ms": round(float(pooled_loop.mean()), 3),
        "bare_mean_step_ms": round(float(pooled_bare.mean()), 3),
        "loop_overhead_ms": round(loop - bare, 3),
        "loop_vs_bare": round(bare / loop, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=100, help="steps timed per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/step_overhead.json"))
    options = parser.parse_args()
    device = torch.device(options.device)
    machine = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
    }
    result: dict[str, Any] = {"machine": machine, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    result["augmentation_ops_per_batch"] = count_augmentation(device)
    print(json.dumps(result["augmentation_ops_per_batch"]), flush=True)
    with tempfile.TemporaryDirectory() as log_root:
        result["step"] = count_step(options.device, log_root)
        print(json.dumps(result["step"]), flush=True)
        result["loop_vs_bare"] = time_loop(options.device, log_root, options.steps, options.repeats)
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    Path(options.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"loop overhead {result['loop_vs_bare']['loop_overhead_ms']:.2f} ms a step; wrote {options.out}")


if __name__ == "__main__":
    main()
