"""Wall time until the validation accuracy first reaches 0.70 / 0.80 / 0.85, for the CIFAR-10 recipes of
CRATE and its ViT twin, on the tensor-store path and on the PIL image-folder path, on this machine.

Each (model, path) trains with ``train.py`` in this process (``configs/cifar10.yaml`` + the model's recipe)
and stops when val accuracy reaches ``--stop-at`` (the highest threshold unless given) or after
``--max-epochs``; times are the ``time/elapsed_s`` the run logged at each validation (the fit's wall time,
validation included; a resumed run counts on from its checkpoint). Both paths train with the same
padded crop and flip and no policy, so that the data path is the only difference: the PIL path decodes and
transforms each image with PIL and timm in the loader (``--pil-workers`` processes), the store path indexes
the store and augments the batch in the training process.

    .venv/bin/python benchmarks/time_to_accuracy.py --max-epochs 30   # benchmarks/results/time_to_accuracy.json
    # a CPU budget: also report 0.50 and 0.60, and stop each run once it reaches 0.70
    .venv/bin/python benchmarks/time_to_accuracy.py --thresholds 0.5 0.6 0.7 0.8 0.85 --stop-at 0.7
    # the micro recipes on the tensor store alone, at their full length (a GPU run), into another file
    .venv/bin/python benchmarks/time_to_accuracy.py --paths store --max-epochs 145 \
        --models crate_micro_patch4_32 vit_micro_patch4_32 --out benchmarks/results/time_to_accuracy_micro.json

Resumable: a run that finished is read back from ``--log-root``, not trained again (delete its folder to
retrain it); a run that was interrupted continues from its last checkpoint. The JSON is rewritten after
every run, so the runs finished before an interruption are in it.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
from pathlib import Path

import yaml

from crate.lit import cli_main
from crate.lit.cpu_precision import cpu_has_native_bf16

REPO = Path(__file__).resolve().parents[1]
THRESHOLDS = (0.70, 0.80, 0.85)
PATHS = ("store", "pil")
FINISHED = "time_to_accuracy.done"  # in a run's folder once its fit has ended: names its version folder


def _layered(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``, section by section (as jsonargparse layers two ``--config`` files)."""
    merged = dict(base)
    for key, value in over.items():
        both_dicts = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _layered(base[key], value) if both_dicts else value
    return merged


def _run_config(model: str, path: str, options: argparse.Namespace) -> Path:
    """The recipe (``configs/cifar10.yaml`` with the model's file over it) with the path's data section."""
    config = yaml.safe_load((REPO / "configs" / "cifar10.yaml").read_text())
    config = _layered(config, yaml.safe_load((REPO / "configs" / "cifar10" / f"{model}.yaml").read_text()))
    shared = {"root": options.root, "img_size": 32, "batch_size": config["data"]["init_args"]["batch_size"]}
    if path == "store":
        augmentation = {"padding": 4, "hflip": 0.5, "policy": None, "re_prob": 0.0}
        config["data"] = {"class_path": "crate.lit.StoredImageFolderDataModule", "init_args": shared}
    else:
        augmentation = {"padding": 4, "hflip": 0.5, "auto_augment": None, "re_prob": 0.0}
        shared["num_workers"] = options.pil_workers
        config["data"] = {"class_path": "crate.lit.ImageFolderDataModule", "init_args": shared}
    shared["augmentation"] = augmentation
    out = Path(options.log_root) / f"{model}.{path}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config))
    return out


def validations(run: Path) -> list[tuple[int, float, float]]:
    """(epoch, val/acc, time/elapsed_s) of every validation a run logged."""
    with (run / "metrics.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("val/acc") and r.get("time/elapsed_s")]
    return [(int(r["epoch"]), float(r["val/acc"]), float(r["time/elapsed_s"])) for r in rows]


def first_reached(points: list[tuple[int, float, float]], threshold: float) -> dict[str, float] | None:
    for epoch, accuracy, seconds in points:
        if accuracy >= threshold:
            return {"seconds": seconds, "epoch": epoch + 1, "val_acc": accuracy}
    return None


def train(model: str, path: str, options: argparse.Namespace) -> Path:
    """The version folder of the (model, path) run: read back when it finished before, else trained (from its
    last checkpoint when an earlier call was interrupted)."""
    run_name = f"{model}.{path}"
    runs = Path(options.log_root) / run_name
    if (runs / FINISHED).is_file():
        return runs / (runs / FINISHED).read_text().strip()
    stop = {"class_path": "lightning.pytorch.callbacks.EarlyStopping"}
    stop["init_args"] = {"monitor": "val/acc", "mode": "max", "stopping_threshold": options.stop_at, "patience": 10**6}
    args = ["fit", "--config", str(_run_config(model, path, options)), "--trainer.max_epochs", str(options.max_epochs)]
    args += ["--trainer.callbacks+", json.dumps(stop), "--run_name", run_name, "--log_root", options.log_root]
    if options.precision:
        args += ["--trainer.precision", options.precision]
    if any(runs.glob("version_*/checkpoints/last*.ckpt")):
        args += ["--ckpt_path", "last"]
    run = Path(cli_main(args).trainer.loggers[0].log_dir)
    (runs / FINISHED).write_text(run.name + "\n")
    return run


def summarize(model: str, path: str, points: list[tuple[int, float, float]], thresholds: list[float]) -> dict:
    row = {"model": model, "path": path, "epochs_run": len(points)}
    row["epoch_s"] = points[-1][2] / len(points) if points else None
    row["best_val_acc"] = max((acc for _, acc, _ in points), default=None)
    row["reached"] = {f"{t:.2f}": first_reached(points, t) for t in thresholds}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["crate_nano_patch4_32", "vit_nano_patch4_32"])
    parser.add_argument("--root", default=str(REPO / "data" / "cifar10"))
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--thresholds", type=float, nargs="+", default=list(THRESHOLDS))
    parser.add_argument(
        "--stop-at", type=float, default=None, help="stop a run at this val accuracy (default: the highest threshold)"
    )
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS), help="data paths to train on")
    parser.add_argument("--pil-workers", type=int, default=2)
    parser.add_argument("--log-root", default=str(REPO / "logs" / "time_to_accuracy"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "time_to_accuracy.json"))
    parser.add_argument(
        "--precision",
        default="auto",
        help="trainer precision; auto: the recipe's (bf16) where the CPU has bf16 instructions, 32-true where not",
    )
    options = parser.parse_args()
    recipes = sorted(path.stem for path in (REPO / "configs" / "cifar10").glob("*.yaml"))
    recipes = [name for name in recipes if not name.endswith(("_pretrain", "_probe"))]  # not classifiers
    unknown = [model for model in options.models if model not in recipes]
    if unknown:
        parser.error(f"no classification recipe configs/cifar10/<model>.yaml for {unknown}; one of {recipes}")
    if options.precision == "auto":
        options.precision = None if cpu_has_native_bf16() else "32-true"
    if options.stop_at is None:
        options.stop_at = max(options.thresholds)
    summary = {"runs": [], "max_epochs": options.max_epochs, "stop_at": options.stop_at}
    summary |= {"pil_workers": options.pil_workers, "precision": options.precision or "the recipe's"}
    summary["machine"] = platform.processor() or platform.machine()
    for model in options.models:
        for path in options.paths:
            row = summarize(model, path, validations(train(model, path, options)), options.thresholds)
            summary["runs"].append(row)
            Path(options.out).write_text(json.dumps(summary, indent=2) + "\n")
            reached = ", ".join(
                f"{t}: {r['seconds']:.0f} s (epoch {r['epoch']})" if r else f"{t}: not reached"
                for t, r in row["reached"].items()
            )
            print(f"{model} {path}: {reached}; best {row['best_val_acc']}")
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
