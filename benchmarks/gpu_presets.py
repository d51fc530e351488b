"""Short runs of the GPU recipe under each GPU trainer preset: fit, resume, validate, reload through timm.

    python benchmarks/gpu_presets.py --out benchmarks/results/gpu_presets_<device>.json

The recipe is ``configs/crate_tiny_imagenet.yaml`` (CRATE-T/16 at 224 pixels, Lion, bf16-mixed) on the
embedded digits written out as an ImageFolder (so the run needs no download and reads images through the
same loader as ImageNet). For every preset (``gpu_ddp``, ``gpu_fsdp``, ``bf16`` on one GPU, and ``gpu_ddp``
with ``model.compile``; ``cpu_bf16_compile`` runs the same cycle on one CPU process, to check the script
without a GPU) it runs, each as its own ``train.py`` process the way a user would:

1. ``fit`` for ``--epochs`` epochs;
2. ``fit --ckpt_path last`` one epoch further (resume: the run's epoch counter must continue);
3. ``validate`` from the last checkpoint;
4. in this process: the checkpoint's weights must carry plain parameter names (no ``_orig_mod.`` or FSDP
   prefixes) and load through ``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=...)``,
   giving the validate step's accuracy on the same validation images.

Writes one JSON record per preset (seconds and steps of the fit, validation accuracy after fit, resume,
validate and reload, the resumed run's last epoch) and prints each as it ends. The accuracies are of a few
epochs from scratch: a smoke test of the machinery, not a measure of the recipe.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import timm
import torch
from augmentation_recipes import write_digits_folder
from timing import REPO

from crate.lit import ImageFolderDataModule
from crate.models import read_checkpoint

RECIPE = str(REPO / "configs" / "crate_tiny_imagenet.yaml")
PRESETS: dict[str, list[str]] = {
    "gpu_ddp": ["--config", str(REPO / "configs" / "trainer" / "gpu_ddp.yaml")],
    "gpu_fsdp": ["--config", str(REPO / "configs" / "trainer" / "gpu_fsdp.yaml")],
    "bf16": ["--config", str(REPO / "configs" / "trainer" / "bf16.yaml")],
    "gpu_ddp_compile": ["--config", str(REPO / "configs" / "trainer" / "gpu_ddp.yaml"), "--model.compile", "true"],
    # the same cycle on one CPU process, to check this script where no GPU is at hand (the test runs cpu_bf16:
    # the compiled model's checkpoints and resume are tested on their own, tests/test_module.py, test_faults.py)
    "cpu_bf16": ["--config", str(REPO / "configs" / "trainer" / "cpu.yaml"), "--trainer.precision", "bf16-mixed"],
    "cpu_bf16_compile": ["--config", str(REPO / "configs" / "trainer" / "cpu.yaml"), "--trainer.precision",
                         "bf16-mixed", "--model.compile", "true"],
}  # fmt: skip


def _train_py(args: list[str], log: Path) -> float:
    """Run ``train.py`` with ``args``, its output appended to ``log``; seconds taken. Raises on failure."""
    start = time.perf_counter()
    with log.open("a") as out:
        out.write(f"\n$ train.py {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run([sys.executable, str(REPO / "train.py"), *args], stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"train.py {args[0]} exited {proc.returncode}; see {log}")
    return time.perf_counter() - start


def _last_metrics(run_dir: Path) -> dict[str, float]:
    """The last logged value of every metric in the run's CSV log."""
    last: dict[str, float] = {}
    with (run_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            last.update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return last


def _reload_accuracy(ckpt: Path, root: Path, args: argparse.Namespace) -> tuple[float, list[str]]:
    """Accuracy of the checkpoint loaded through timm on the recipe's validation images, and any wrapper
    prefixes left in its parameter names."""
    weights = read_checkpoint(ckpt).state_dict
    prefixes = sorted({k for k in weights if "_orig_mod" in k or "_fsdp_wrapped_module" in k})[:4]
    model = timm.create_model(args.model, pretrained=True, num_classes=10, pretrained_cfg_overlay=dict(file=str(ckpt)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    data = ImageFolderDataModule(str(root), img_size=args.img_size, batch_size=args.batch, num_workers=4)
    data.transforms_from(model)  # the evaluation transforms training used (the model's crop and statistics)
    data.setup("validate")
    correct = total = 0
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        for x, y in data.val_dataloader():
            correct += (model(x.to(device)).argmax(-1).cpu() == y).sum().item()
            total += len(y)
    return correct / total, prefixes


def run_preset(name: str, root: Path, logs: Path, args: argparse.Namespace) -> dict[str, Any]:
    run_name = f"gpu_{name}"
    common = [
        "--config", RECIPE, *PRESETS[name], "--data.root", str(root), "--data.batch_size", str(args.batch),
        "--data.num_workers", str(args.workers), "--log_root", str(logs), "--run_name", run_name,
        "--trainer.enable_progress_bar", "false", "--trainer.log_every_n_steps", "5",
        "--model.model_name", args.model, "--data.img_size", str(args.img_size),
    ]  # fmt: skip
    log = logs / f"{run_name}.log"
    record: dict[str, Any] = {"preset": name}
    fit = _train_py(["fit", *common, "--trainer.max_epochs", str(args.epochs)], log)
    run_dir = logs / run_name / "version_0"
    metrics = _last_metrics(run_dir)
    steps = int(metrics.get("step", 0)) + 1
    record.update(fit_seconds=fit, steps=steps, fit_val_acc=metrics.get("val/acc"))
    resume = _train_py(["fit", *common, "--ckpt_path", "last", "--trainer.max_epochs", str(args.epochs + 1)], log)
    metrics = _last_metrics(run_dir)
    record.update(resume_seconds=resume, resume_epoch=metrics.get("epoch"), resume_val_acc=metrics.get("val/acc"))
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    _train_py(["validate", *common, "--ckpt_path", str(ckpt)], log)
    record["validate_val_acc"] = _last_metrics(run_dir).get("val/acc")
    record["timm_reload_acc"], record["wrapper_prefixes"] = _reload_accuracy(ckpt, root, args)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gpu = ",".join(name for name in PRESETS if not name.startswith("cpu"))
    parser.add_argument("--presets", default=gpu, help=f"comma-separated, of {list(PRESETS)}")
    parser.add_argument("--model", default="crate_tiny_patch16_224", help="the recipe's model, or another")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "gpu_presets.json"))
    parser.add_argument("--logs", help="keep the runs' logs here (default: a temporary folder)")
    args = parser.parse_args()
    names = args.presets.split(",")
    unknown = [name for name in names if name not in PRESETS]
    if unknown:
        parser.error(f"unknown presets {unknown}; choose from {list(PRESETS)}")
    if not torch.cuda.is_available() and any(not name.startswith("cpu") for name in names):
        raise SystemExit("every preset but cpu_* needs a CUDA GPU (torch.cuda.is_available() is False)")
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "digits"
        write_digits_folder(root, 32, 3)
        logs = Path(args.logs) if args.logs else Path(tmp) / "logs"
        taken = [str(logs / f"gpu_{name}") for name in names if (logs / f"gpu_{name}").exists()]
        if taken:  # a run there would add a version_N folder and resume from another run's checkpoint
            raise SystemExit(f"--logs already holds runs {taken}; give a new or empty folder")
        logs.mkdir(parents=True, exist_ok=True)
        for name in names:
            try:
                records.append(run_preset(name, root, logs, args))
            except RuntimeError as error:  # record the failure, go on with the other presets
                records.append({"preset": name, "error": str(error)})
            print(json.dumps(records[-1]), flush=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    result = {"device": device, "torch": torch.__version__, "presets": records}
    result["command"] = " ".join(sys.argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")
    if any("error" in r for r in records):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
