"""Everything a GPU window should run for the zoo, in one process tree and under one time budget; started by
``tools/gpu_jobs/gpu_suite.sh`` (which sets up the Python path and the data first).

1. The environment (device, driver, versions), and the data's tensor stores built (decoded once, before
   anything is timed).
2. crate_micro's GPU recipe (``configs/cifar10.yaml`` + the member's file + ``configs/cifar10/gpu.yaml``)
   through ``train.py`` to its end, or to the time left for it (``--trainer.max_time``): each epoch's time
   and val accuracy from the run's ``metrics.csv``; ``epoch_s`` is the median epoch (validation included)
   after the first two (compilation), ``val_s`` the median validation pass; ``time_to_val_acc``, for 0.70,
   0.80, 0.85 and 0.90, the fit's wall seconds (``time/elapsed_s``: start-up, compilation and validation
   included) at the first validation that reached it, with its epoch (null where the run never did).
3. The export of the run's final weights (``crate.export``, float16, with its card and val accuracy, beside
   the shipped file's), and the run's ``last.ckpt`` with its ``config.yaml`` as ``run/checkpoints/last.ckpt`` and
   ``run/config.yaml``, so that ``crate.export`` can write the card again elsewhere (the config names the
   precision and the seed).
4. The bare compiled training step of crate_micro_patch4_32 on a batch already on the device (batch 512,
   bf16 autocast, fused AdamW, ``torch.compile`` with the GPU recipe's mode): ``bare_step_ms``, and
   ``loop_vs_bare_gpu``, the bare step's share of an epoch (steps an epoch x ``bare_step_ms`` / ``epoch_s``), and
   ``loop_vs_bare_gpu_train``, its share of the epoch without validation (``train_epoch_s`` = epoch_s - val_s).
5. ``gpu_<device>.json`` with all of it, the commands included (written after each step, so a suite cut
   short still reports what it did).

``--dry-run`` runs the same steps on the CPU with tiny limits (a few steps, batch 8, no compilation) on
the image folder given as ``--data``, so that the suite is tested where there is no GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import environment, training_step

REPO = Path(__file__).resolve().parents[2]
MODEL = "crate_micro_patch4_32"
# The time around a member's training, with margin over what the first one-GPU runs took
# (benchmarks/results/gpu_queue/*_cct4_200_epochs.json): train.py ran 38-44 s before its fit clock started (imports,
# the stores, the compiled sanity check), and the export with the bare step took 26-29 s after it. With less start-up
# margin than that, --trainer.max_time never fired and the deadline killed the run in the middle of an epoch.
STARTUP_S = 60.0
AFTER_TRAINING_S = 60.0


def first_reached(points: list[tuple[int, float, float]], threshold: float) -> dict[str, float] | None:
    """The first (epoch, val accuracy, seconds) point at or above ``threshold``, as a record; None if none is."""
    for epoch, accuracy, seconds in points:
        if accuracy >= threshold:
            return {"seconds": seconds, "epoch": epoch + 1, "val_acc": accuracy}
    return None


def recipe(member: str, extra: list[str]) -> list[str]:
    """The configs of a member's one-GPU run: the CIFAR-10 base, the member's file, the GPU layer, then extras."""
    return ["configs/cifar10.yaml", f"configs/cifar10/{member}.yaml", "configs/cifar10/gpu.yaml", *extra]


def bare_step_ms(
    batch: int, steps: int, compile_mode: str | None, device: torch.device, model_name: str = MODEL
) -> float:
    """Median ms of a training step of the recipe's model on one resident batch (benchmarks.common's bare step)."""
    step = training_step(model_name, 10, device, compile_mode)
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    for _ in range(5):  # compilation and CUDA-graph recording
        step(images, labels)
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step(images, labels)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def _run(command: list[str], log: Path, timeout: float) -> int:
    """Run a command with its output in ``log``; its exit status (124 when it outlasted ``timeout``)."""
    print("$", shlex.join(command), flush=True)
    with log.open("w") as out:
        try:
            return subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


_LOGGED = {
    "time/epoch_s": "epoch_s",
    "time/val_s": "val_s",
    "time/elapsed_s": "elapsed_s",
    "val/acc": "val_acc",
    "train/acc": "train_acc",
    "val/knn_acc": "knn_acc",  # self-distillation's k-NN accuracy
}
TIME_TO_ACCURACY = (0.70, 0.80, 0.85, 0.90)  # the val accuracies whose first time a run reports


def logged_epochs(metrics_csv: Path) -> list[dict[str, float]]:
    """Per epoch: its time (time/epoch_s, validation included), its validation's time (time/val_s), the fit's
    wall time at its validation (time/elapsed_s), val and train accuracy (or k-NN accuracy), from the run's CSV
    log; none where the run wrote no log."""
    by_epoch: dict[int, dict[str, float]] = {}
    if not metrics_csv.is_file():
        return []
    with metrics_csv.open() as handle:
        for row in csv.DictReader(handle):
            if not row.get("epoch"):
                continue
            entry = by_epoch.setdefault(int(float(row["epoch"])), {})
            for key, name in _LOGGED.items():
                if row.get(key):
                    entry[name] = float(row[key])
    return [dict(epoch=epoch, **values) for epoch, values in sorted(by_epoch.items())]


def median_after_compilation(epochs: list[dict[str, float]], key: str) -> float | None:
    """The median (the upper one for an even count) of ``key`` over the epochs after the first two, which
    compile; over every epoch when the run had no more; None where no epoch logged it."""
    timed = [e[key] for e in epochs[2:] if key in e] or [e[key] for e in epochs if key in e]
    return round(sorted(timed)[len(timed) // 2], 3) if timed else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "benchmarks/results"), help="folder for the JSON and export")
    parser.add_argument("--budget-s", type=float, default=540.0, help="wall seconds for the whole suite")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny limits, on --data")
    parser.add_argument("--data", default="data/cifar10", help="the CIFAR-10 image folder (train/, val/)")
    parser.add_argument("--member", default=MODEL, help="the zoo member (configs/cifar10/MEMBER.yaml)")
    parser.add_argument("--extra-config", action="append", default=[], help="a config layered last (repeatable)")
    parser.add_argument("--report", default=None, help="the JSON's file name (default gpu_<device>.json)")
    parser.add_argument("--snapshots", action="store_true", help="keep the weight snapshots (out/run/snapshots)")
    options = parser.parse_args()
    member = options.member
    start = time.perf_counter()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="crate_gpu_suite_"))  # logs and checkpoints, outside what comes back
    dry = options.dry_run
    if not dry and not torch.cuda.is_available():
        sys.exit("gpu_suite: no CUDA device here; run it on a GPU machine, or with --dry-run on a CPU")
    device = torch.device("cpu" if dry else "cuda")
    result: dict[str, Any] = {"dry_run": dry, "environment": environment(), "model": member}
    print(json.dumps(result["environment"]), flush=True)

    name = "dry_run_cpu" if dry else re.sub(r"[^a-z0-9]+", "_", result["environment"]["device"].lower()).strip("_")
    report = out / (options.report or f"gpu_{name}.json")

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - start, 1)
        report.write_text(json.dumps(result, indent=2, default=str) + "\n")

    from crate.lit import StoredImageFolderDataModule

    StoredImageFolderDataModule(options.data).stores()  # decoded into tensor stores once, here
    result["data_ready_s"] = round(time.perf_counter() - start, 1)
    write()

    log_root = work / "logs"
    configs = recipe(member, options.extra_config)
    train = [sys.executable, "train.py", "fit"] + [a for config in configs for a in ("--config", config)]
    train += ["--log_root", str(log_root), "--data.init_args.root", options.data]
    if options.snapshots:
        train += ["--snapshots.enabled", "true"]
    if dry:
        train += ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true", "--model.compile", "false"]
        train += ["--trainer.max_epochs", "3", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
        train += ["--data.init_args.batch_size", "8"]
    left = options.budget_s - (time.perf_counter() - start) - AFTER_TRAINING_S  # the training process's deadline
    seconds = max(int(left - STARTUP_S), 30)  # max_time counts from the fit's start, so it stops the run first
    train += ["--trainer.max_time", f"00:00:{seconds // 60:02d}:{seconds % 60:02d}"]
    fit_start = time.perf_counter()
    status = _run(train, out / "train.log", timeout=left)
    wall = round(time.perf_counter() - fit_start, 1)
    result["train"] = {"command": shlex.join(train[1:]), "exit_status": status, "wall_s": wall}
    runs = sorted(log_root.glob("*/version_*"), key=lambda p: p.stat().st_mtime)
    if status != 0 or not runs:
        result["train"]["log_tail"] = (out / "train.log").read_text()[-3000:]
    if runs:
        run = runs[-1]
        epochs = logged_epochs(run / "metrics.csv")
        result["epochs"] = epochs
        for key in ("epoch_s", "val_s"):
            typical = median_after_compilation(epochs, key)
            if typical is not None:
                result[key] = typical
        accuracies = [e["val_acc"] for e in epochs if "val_acc" in e]
        if accuracies:
            result.update(val_acc_last=accuracies[-1], val_acc_best=max(accuracies), epochs_run=len(accuracies))
        points = [(e["epoch"], e["val_acc"], e["elapsed_s"]) for e in epochs if "val_acc" in e and "elapsed_s" in e]
        result["time_to_val_acc"] = {f"{t:.2f}": first_reached(points, t) for t in TIME_TO_ACCURACY}
        write()
        last = run / "checkpoints" / "last.ckpt"
        if last.exists():
            (out / "run" / "checkpoints").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(last, out / "run" / "checkpoints" / "last.ckpt")
            if (run / "config.yaml").is_file():
                shutil.copyfile(run / "config.yaml", out / "run" / "config.yaml")
            if (run / "snapshots").is_dir():
                shutil.copytree(run / "snapshots", out / "run" / "snapshots")
                result["snapshots"] = sorted(p.name for p in (run / "snapshots").iterdir())
            exported = out / f"{member}.cifar10_gpu.safetensors"
            export = [sys.executable, "-m", "crate.export", str(last), "--out", str(exported), "--dtype", "float16"]
            export += ["--train-command", shlex.join(["python", *train[1:]])]
            export_status = _run(export, out / "export.log", timeout=120)
            result["export"] = {"command": shlex.join(export[1:]), "exit_status": export_status, "file": str(exported)}
            if export_status != 0:
                result["export"]["log_tail"] = (out / "export.log").read_text()[-3000:]
            card = exported.with_suffix(".json")
            if card.is_file():
                held = json.loads(card.read_text())
                result["export"].update(val_acc=held.get("val_accuracy"), val_images=held.get("val_images"))
                shipped = REPO / "checkpoints" / f"{member}.cifar10.json"
                if shipped.is_file():
                    result["export"]["shipped_val_acc"] = json.loads(shipped.read_text()).get("val_accuracy")
            write()

    batch = 8 if dry else 512
    mode = None if dry else "reduce-overhead"
    result["bare_step_ms"] = round(bare_step_ms(batch, 3 if dry else 50, mode, device, member), 3)
    result["bare_step"] = {"batch_size": batch, "compile_mode": mode, "fused_adamw": True, "precision": "bf16"}
    print(f"bare compiled step: {result['bare_step_ms']:.2f} ms at batch {batch}", flush=True)
    if "epoch_s" in result:
        steps = 3 if dry else 45_000 // batch
        result["steps_per_epoch"] = steps
        result["loop_vs_bare_gpu"] = round(steps * result["bare_step_ms"] / 1000 / result["epoch_s"], 3)
        if "val_s" in result:  # the training part of an epoch alone
            result["train_epoch_s"] = round(result["epoch_s"] - result["val_s"], 3)
            result["loop_vs_bare_gpu_train"] = round(steps * result["bare_step_ms"] / 1000 / result["train_epoch_s"], 3)
    write()
    shutil.rmtree(work, ignore_errors=True)  # the run's logs and checkpoints (copies are in --out/run)
    print(f"wrote {report} ({result['wall_s']} s)", flush=True)


if __name__ == "__main__":
    main()
