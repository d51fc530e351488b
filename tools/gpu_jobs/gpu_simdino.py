"""SimDINO (and, with ``--objectives simdino mae``, its masked-pretraining control in equal wall time) on one GPU;
``tools/gpu_jobs/gpu_suite.sh --task simdino`` starts it (after setting up the Python path and the data).

1. The environment, and the CIFAR-10 tensor stores built before anything is timed.
2. For each objective (SimDINO on crate_nano_patch4_32, ``configs/simdino/crate_nano_cifar10.yaml``; CRATE-MAE,
   ``configs/simdino/crate_mae_nano_cifar10.yaml``; both under ``configs/simdino/gpu.yaml``): a calibration run of
   two epochs of ``CALIBRATION_STEPS`` steps without validation gives the seconds a step takes (the second
   epoch's: the first holds the warm-up, which made a first version of this plan 7 epochs where about 30
   fitted), then the objective trains for as many whole epochs as fit its share of the time left (its
   schedules, the learning rate's and the teacher's momentum, sized to those epochs and run to their end;
   ``--trainer.max_time`` only guards).
3. Each run's log (``<objective>_train.log``), ``last.ckpt`` and ``config.yaml`` come back (as
   ``<objective>/checkpoints/last.ckpt`` and ``<objective>/config.yaml``: ``benchmarks/simdino_eval.py`` scores
   them on the CPU), and ``simdino_<device>.json`` holds the commands, the epochs, the calibration and SimDINO's
   k-NN accuracy after each epoch.

``--dry-run`` runs the same steps on the CPU with tiny limits on the image folder given as ``--data``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from gpu_suite import _run, logged_epochs

from benchmarks.common import environment

OBJECTIVES = {
    # objective: (pretrain.py arguments before the subcommand, its config, the learning rate at batch 512)
    "simdino": (["--objective", "simdino"], "configs/simdino/crate_nano_cifar10.yaml", "1.0e-3"),
    "mae": ([], "configs/simdino/crate_mae_nano_cifar10.yaml", "3.0e-3"),
}
GPU_LAYER = "configs/simdino/gpu.yaml"
CALIBRATION_STEPS = 20
VALIDATION_S = 3.0  # a SimDINO validation (5,000 images and a 10,000-image k-NN bank) on one GPU, allowed for


def _command(objective: str, data: str, log_root: Path, dry: bool) -> list[str]:
    before, config, lr = OBJECTIVES[objective]
    command = [sys.executable, "pretrain.py", *before, "fit", "--config", config]
    command += ["--log_root", str(log_root), "--data.init_args.root", data, "--model.lr", lr]
    command += (
        ["--config", GPU_LAYER] if not dry else ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true"]
    )
    if dry:
        command += ["--data.init_args.batch_size", "8", "--trainer.limit_val_batches", "2"]
        command += ["--model.knn_bank", "16"] if objective == "simdino" else []
    return command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results", help="folder for the JSON and the two runs")
    parser.add_argument("--budget-s", type=float, default=380.0, help="wall seconds for the whole task")
    parser.add_argument(
        "--objectives",
        nargs="+",
        choices=sorted(OBJECTIVES),
        default=["simdino"],
        help="what to train, in equal shares of the time (the CRATE-MAE control can instead train on a CPU for "
        "the same epochs and batch)",
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny limits, on --data")
    parser.add_argument("--data", default="data/cifar10", help="the CIFAR-10 image folder (train/, val/)")
    parser.add_argument("--report", default=None, help="the JSON's name in --out (default simdino_<device>.json)")
    options = parser.parse_args()
    start = time.perf_counter()
    out, dry = Path(options.out), options.dry_run
    out.mkdir(parents=True, exist_ok=True)
    if not dry and not torch.cuda.is_available():
        sys.exit("gpu_simdino: no CUDA device here; run it on a GPU machine, or with --dry-run on a CPU")
    work = Path(tempfile.mkdtemp(prefix="crate_gpu_simdino_"))
    result: dict[str, Any] = {"dry_run": dry, "environment": environment(), "runs": {}}
    name = "dry_run_cpu" if dry else re.sub(r"[^a-z0-9]+", "_", result["environment"]["device"].lower()).strip("_")
    report = out / (options.report or f"simdino_{name}.json")

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - start, 1)
        report.write_text(json.dumps(result, indent=2, default=str) + "\n")

    from crate.lit import StoredImageFolderDataModule

    data = StoredImageFolderDataModule(options.data)
    data.stores()
    steps_per_epoch = len(data.stores()["train"].images) // (8 if dry else 512)
    result["data_ready_s"] = round(time.perf_counter() - start, 1)
    write()
    for index, objective in enumerate(options.objectives):
        base = _command(objective, options.data, work / objective, dry)
        # two short epochs: the second, past the first steps' warm-up, gives the step time
        calibrate = base + ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", str(CALIBRATION_STEPS)]
        calibrate += ["--trainer.limit_val_batches", "0", "--run_name", f"calibrate_{objective}"]  # training alone
        status = _run(calibrate, work / f"{objective}_calibration.log", timeout=120)
        calibrated = next(iter((work / objective).glob("calibrate_*/version_*")), work)
        timed = [e for e in logged_epochs(calibrated / "metrics.csv") if "epoch_s" in e]
        step_s = timed[-1]["epoch_s"] / CALIBRATION_STEPS if timed else 1.0
        left = (options.budget_s - (time.perf_counter() - start) - 20.0) / (len(options.objectives) - index)
        epochs = 1 if dry else max(1, min(400, int((left - 25.0) / (1.1 * step_s * steps_per_epoch + VALIDATION_S))))
        run = base + ["--trainer.max_epochs", str(epochs)]
        run += ["--trainer.limit_train_batches", "2"] if dry else []
        seconds = max(int(left), 30)
        run += ["--trainer.max_time", f"00:00:{seconds // 60:02d}:{seconds % 60:02d}"]
        fit_start = time.perf_counter()
        fit_status = _run(run, out / f"{objective}_train.log", timeout=left + 60)
        entry: dict[str, Any] = {
            "command": shlex.join(run[1:]),
            "calibration": {"exit_status": status, "step_s": round(step_s, 4), "steps": CALIBRATION_STEPS},
            "calibration_command": shlex.join(calibrate[1:]),
            "epochs_planned": epochs,
            "exit_status": fit_status,
            "wall_s": round(time.perf_counter() - fit_start, 1),
        }
        runs = sorted((work / objective).glob(f"{'simdino_' if objective == 'simdino' else 'crate_mae_'}*/version_*"))
        if runs:
            epochs = logged_epochs(runs[-1] / "metrics.csv")
            entry["epochs_run"] = len([e for e in epochs if "epoch_s" in e])
            entry["knn_by_epoch"] = [e["knn_acc"] for e in epochs if "knn_acc" in e]
            entry["epoch_s"] = [round(e["epoch_s"], 2) for e in epochs if "epoch_s" in e]
            last = runs[-1] / "checkpoints" / "last.ckpt"
            if last.exists():
                (out / objective / "checkpoints").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(last, out / objective / "checkpoints" / "last.ckpt")
                shutil.copyfile(runs[-1] / "config.yaml", out / objective / "config.yaml")
        if fit_status != 0:
            entry["log_tail"] = (out / f"{objective}_train.log").read_text()[-3000:]
        if status != 0:
            entry["calibration_log_tail"] = (work / f"{objective}_calibration.log").read_text()[-2000:]
        result["runs"][objective] = entry
        write()
        print(f"{objective}: {json.dumps({k: v for k, v in entry.items() if k != 'log_tail'})}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {report} ({result['wall_s']} s)", flush=True)


if __name__ == "__main__":
    main()
