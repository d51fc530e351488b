"""The converged CIFAR-10 zoo table: members trained to their plateau on the one-GPU recipe, several at once.

    # one GPU window (a job of tools/gpu_jobs/gpu_queue.yaml): 4 members x 2 seeds, 150 epochs, up to 7 runs at once
    python tools/gpu_jobs/zoo_table_gpu.py --members crate_nano_patch4_32 vit_nano_patch4_32 \\
        crate_alpha_nano_patch4_32 tost_nano_patch4_32 --seeds 0 1 --parallel 7 --first-alone \\
        --out OUT --budget-s 460
    # afterwards, on any machine: the windows' results as one table (docs/zoo_table_cifar10_gpu.md and .json)
    python tools/gpu_jobs/zoo_table_gpu.py --merge A.json B.json
    python tools/gpu_jobs/zoo_table_gpu.py --dry-run --data DIR --out OUT ...   # the same on the CPU, tiny limits

Every (member, seed) trains with ``train.py fit`` in its own process under one recipe: ``configs/cifar10.yaml``
with the member's model (not its own recipe file) and ``configs/cifar10/gpu.yaml`` over it (batch 512, bf16,
compiled under CUDA graphs, fixed-shape validation, the base learning rate scaled to the batch), for
``--epochs`` (150: the plateau the table is about, not the 4-epoch start of ``docs/zoo_table_cifar10.md``).
A small model leaves most of a GPU idle between its kernels, so up to ``--parallel`` runs share the device.
With ``--first-alone`` the first member's first seed trains alone and its second seed among the others: the
two runs' epoch times give the aggregate rate of the shared device against one run alone (``parallel x
epoch_s alone / epoch_s shared``, the same model on both sides). Each run gets ``--trainer.max_time`` so that
the window's budget holds; a run cut short says how many epochs it ran, and a run that could not start is
listed as not run.

After each run, on the CPU of this process, the table's measurements (``zoo_table.measure``: head statistics,
ΔR^c across the attention steps with their controls, sparsity) of its final weights (``last.ckpt`` through the
one checkpoint reader, ``crate.run.build_model``) and of its initialisation (the same seed and config built here:
the weights the run started from), on 256 validation images. The recipe keeps no moving average, so the final
weights are the ones validation measured; they are kept as ``OUT/runs/<member>.seed<k>.safetensors`` (float16)
beside each run's log, and the checkpoint is removed. Results: ``OUT/zoo_table_cifar10_gpu.json`` (and
``result.json`` for the queue).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from gpu_suite import STARTUP_S, logged_epochs, median_after_compilation
from safetensors.torch import save_file

from benchmarks.common import environment
from benchmarks.zoo_table import MEMBERS, PROBE_IMAGES, has_subspace_steps, measure, spread_line, table
from crate.data.sampling import sample_order
from crate.lit import cli_main
from crate.models import create_classifier
from crate.run import build_model

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 150
TRAIN_IMAGES = 45_000
TABLE = REPO / "docs" / "zoo_table_cifar10_gpu.md"
DRY_LIMITS = ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true", "--model.compile", "false"]
DRY_LIMITS += ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2"]
DRY_LIMITS += ["--data.init_args.batch_size", "8", "--trainer.max_epochs", "2"]  # after --epochs: 2 win
RESERVE_S = 45.0  # the last runs' measurements and the report, after the last training ends
MIN_RUN_S = 90.0  # a run is not started with less than this left (start-up and compilation alone take ~40 s)


def run_args(name: str, seed: int, options: argparse.Namespace, log_root: Path) -> list[str]:
    """train.py's arguments for one (member, seed) under the table's one recipe."""
    args = ["--config", "configs/cifar10.yaml", "--config", "configs/cifar10/gpu.yaml", "--model.model_name", name]
    args += [
        "--run_name",
        f"{name}.seed{seed}",
        "--trainer.max_epochs",
        str(options.epochs),
        "--data.root",
        options.data,
    ]
    args += ["--seed_everything", str(seed), "--data.seed", str(seed), "--log_root", str(log_root)]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    return args + (DRY_LIMITS if options.dry_run else [])


def _max_time(seconds: float) -> str:
    whole = max(int(seconds), 1)
    return f"00:{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def start_weights_and_images(args: list[str]) -> tuple[torch.nn.Module, torch.Tensor]:
    """The initialisation a run started from (its config and seed built here, on the CPU, nothing trained) and
    the probe images: :data:`PROBE_IMAGES` of the validation split in the seeded mixed order."""
    with tempfile.TemporaryDirectory() as log_root:  # built, never trained: its version folder is thrown away
        cli = cli_main(
            [*args, "--trainer.accelerator", "cpu", "--model.compile", "false", "--log_root", log_root], run=False
        )
    cli.datamodule.transforms_from(cli.model.model)  # normalised as in the run, which reads the model's data config
    cli.datamodule.setup("validate")
    images = torch.stack(
        [cli.datamodule.val_set[i][0] for i in sample_order(len(cli.datamodule.val_set), PROBE_IMAGES)]
    )
    return cli.model.evaluated_model(), images


def finish(run: dict[str, Any]) -> dict[str, Any]:
    """One finished run's row: accuracy and epoch times from its log, the measurements of its final weights
    beside those of its initialisation."""
    versions = sorted(Path(run["log_root"]).glob("*/version_*"))
    row: dict[str, Any] = {"seed": run["seed"], "exit_status": run["status"], "most_at_once": run["most_at_once"]}
    last = versions[-1] / "checkpoints" / "last.ckpt" if versions else None
    if last is None or not last.is_file():
        return dict(row, error=f"no last.ckpt (exit status {run['status']}; log {run['log']})")
    epochs = logged_epochs(versions[-1] / "metrics.csv")
    accuracies = [e["val_acc"] for e in epochs if "val_acc" in e]
    initial, images = start_weights_and_images(run["args"])
    trained = build_model(run["name"], last)[0].eval()
    row.update(accuracy=accuracies[-1], best_accuracy=max(accuracies), epochs_run=len(accuracies))
    row.update(epoch_seconds=median_after_compilation(epochs, "epoch_s"), seconds=run["seconds"])
    row.update(measure(trained, images))
    row.update({f"{key}_init": value for key, value in measure(initial, images).items()})
    # the final weights in float16 (a few hundred KB, what the window sends back); the checkpoint with its
    # optimizer state goes
    weights = Path(run["log_root"]).with_suffix(".safetensors")
    save_file({key: value.half().contiguous() for key, value in trained.state_dict().items()}, str(weights))
    shutil.rmtree(versions[-1] / "checkpoints")
    row["weights"] = weights.name
    return row


def train_all(options: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Every (member, seed) of the options trained, up to ``parallel`` at once (the first alone with
    ``--first-alone``), within the budget; each finished run measured as it ends."""
    deadline = time.perf_counter() + options.budget_s - RESERVE_S
    waiting = [(name, seed) for name in options.members for seed in options.seeds]
    running: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    alone = options.first_alone
    while waiting or running:
        limit = 1 if alone else options.parallel
        left = deadline - time.perf_counter()
        while waiting and len(running) < limit and (left > MIN_RUN_S or options.dry_run):
            name, seed = waiting.pop(0)
            log_root = work / f"{name}.seed{seed}"
            args = run_args(name, seed, options, log_root)
            # max_time counts from the fit's start, STARTUP_S after the process's: so the run ends by the deadline
            command = [sys.executable, "train.py", "fit", *args, "--trainer.max_time", _max_time(left - STARTUP_S)]
            log = work / f"{name}.seed{seed}.log"
            with log.open("w") as handle:
                process = subprocess.Popen(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
            running.append(
                dict(name=name, seed=seed, args=args, log=str(log), log_root=str(log_root), process=process,
                     started=time.perf_counter(), most_at_once=0)
            )  # fmt: skip
            for entry in running:
                entry["most_at_once"] = max(entry["most_at_once"], len(running))
            print(f"started {name} seed {seed} ({len(running)} running)", flush=True)
        if not running:  # the budget cannot hold another run
            rows += [
                {"name": name, "seed": seed, "error": "not run: the window's budget was spent"}
                for name, seed in waiting
            ]
            break
        time.sleep(0.5)
        for entry in [e for e in running if e["process"].poll() is not None]:
            running.remove(entry)
            alone = False
            entry.update(status=entry["process"].returncode, seconds=round(time.perf_counter() - entry["started"], 1))
            row = dict(name=entry["name"], **finish(entry))
            rows.append(row)
            said = {key: row.get(key) for key in ("accuracy", "epochs_run", "epoch_seconds", "error")}
            print(f"{entry['name']} seed {entry['seed']}: {json.dumps(said)}", flush=True)
    return rows


def sharing_gain(rows: list[dict[str, Any]], parallel: int) -> dict[str, Any] | None:
    """The aggregate rate of the shared device against one run alone, from the first member's two seeds."""
    first = [r for r in rows if r["name"] == rows[0]["name"] and "epoch_seconds" in r] if rows else []
    alone = [r for r in first if r["most_at_once"] == 1]
    shared = [r for r in first if r["most_at_once"] > 1]
    if not alone or not shared:
        return None
    runs = shared[0]["most_at_once"]
    gain = runs * alone[0]["epoch_seconds"] / shared[0]["epoch_seconds"]
    return {
        "model": rows[0]["name"],
        "epoch_s_alone": alone[0]["epoch_seconds"],
        "epoch_s_shared": shared[0]["epoch_seconds"],
        "runs_at_once": runs,
        "images_per_s_alone": round(TRAIN_IMAGES / alone[0]["epoch_seconds"], 1),
        "images_per_s_all_runs": round(runs * TRAIN_IMAGES / shared[0]["epoch_seconds"], 1),
        "aggregate_vs_alone": round(gain, 3),
        "parallel": parallel,
    }


def grouped(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows by member, in the shape ``zoo_table.table`` renders (runs that did not finish left out)."""
    results: dict[str, dict[str, Any]] = {}
    for row in rows:
        if "accuracy" not in row:
            continue
        if row["name"] not in results:
            model = create_classifier(row["name"], num_classes=10, in_chans=3, img_size=32)
            results[row["name"]] = {
                "params": sum(p.numel() for p in model.parameters()),
                "throughput_ratio": None,
                "subspace_steps": has_subspace_steps(model),
                "runs": [],
            }
        results[row["name"]]["runs"].append({k: v for k, v in row.items() if k != "name"})
    return results


def render(summary: dict[str, Any]) -> str:
    """The markdown page of a (merged) summary."""
    results = {name: summary["results"][name] for name in MEMBERS if name in summary["results"]}
    epochs = sorted({run.get("epochs_run") for r in results.values() for run in r["runs"]})
    sharing = [s for s in summary.get("sharing", []) if s]
    lines = [
        "# The zoo on CIFAR-10 at its plateau (one GPU)",
        "",
        f"Written by `python tools/gpu_jobs/zoo_table_gpu.py` from {', '.join(summary['sources'])} "
        f"({', '.join(summary['devices'])}). Every member under one recipe: configs/cifar10.yaml with the member's "
        f"model and configs/cifar10/gpu.yaml (batch 512, bf16, compiled), {summary['epochs']} epochs; epochs run: "
        f"{', '.join(str(e) for e in epochs)}. The columns are those of the 4-epoch table "
        "(docs/zoo_table_cifar10.md), measured on 256 validation images of each run's final weights, with the "
        "same model at the initialisation its run started from in brackets; val acc is the last epoch's. "
        "s / epoch is each run's median epoch (validation included) while it shared the GPU with other runs, so "
        "it is not a speed comparison (train img/s vs the twin is not measured here: n/a).",
        "",
        table(results),
        "",
        spread_line(results) if results else "",
    ]
    for s in sharing:
        lines += [
            "",
            f"Sharing one GPU: {s['model']} trained alone at {s['epoch_s_alone']:.2f} s an epoch and among "
            f"{s['runs_at_once']} runs at {s['epoch_s_shared']:.2f} s: {s['images_per_s_all_runs']:,.0f} images/s for "
            f"all runs together against {s['images_per_s_alone']:,.0f} alone ({s['aggregate_vs_alone']:.2f}x).",
        ]
    missing = [f"{r['name']} seed {r['seed']}: {r['error']}" for r in summary.get("not_finished", [])]
    if missing:
        lines += ["", "Not finished: " + "; ".join(missing) + "."]
    return "\n".join(lines) + "\n"


def merge(paths: list[str], out: Path) -> None:
    """The windows' summaries as one table (members and seeds of later files added, not replaced)."""
    merged: dict[str, Any] = {"results": {}, "sources": [], "devices": [], "sharing": [], "not_finished": []}
    for path in paths:
        part = json.loads(Path(path).read_text())
        part = part.get("result", part)  # a queue record holds the summary under "result"
        merged["epochs"] = part["epochs"]
        merged["sources"].append(Path(path).name)
        merged["devices"].append(part.get("device", "?"))
        merged["sharing"].append(part.get("sharing"))
        merged["not_finished"] += part.get("not_finished", [])
        for name, result in part["results"].items():
            kept = merged["results"].setdefault(name, dict(result, runs=[]))
            seeds = {run["seed"] for run in kept["runs"]}
            kept["runs"] += [run for run in result["runs"] if run["seed"] not in seeds]
    out.write_text(render(merged))
    out.with_suffix(".json").write_text(json.dumps(merged, indent=1) + "\n")
    print(f"wrote {out} and {out.with_suffix('.json').name}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", nargs="+", default=list(MEMBERS), choices=list(MEMBERS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--parallel", type=int, default=4, help="runs sharing the device at once")
    parser.add_argument("--first-alone", action="store_true", help="train the first run alone (the sharing gain)")
    parser.add_argument("--budget-s", type=float, default=460.0, help="wall seconds for everything")
    parser.add_argument("--data", default="data/cifar10", help="the CIFAR-10 image folder (train/, val/)")
    parser.add_argument("--out", default=None, help="the folder for the summary (a GPU window's $OUT)")
    parser.add_argument("--report", default=None, help="also write the summary under this name in --out")
    parser.add_argument("--merge", nargs="+", default=None, help="summaries to merge into --table")
    parser.add_argument("--table", default=str(TABLE), help="the merged page (with --merge)")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU with tiny limits")
    options = parser.parse_args(argv)
    if options.merge:
        merge(options.merge, Path(options.table))
        return
    if options.out is None:
        parser.error("--out is required to train (or give --merge)")
    if not options.dry_run and not torch.cuda.is_available():
        sys.exit("zoo_table_gpu.py: no CUDA device here; run it on a GPU machine, or with --dry-run on a CPU")
    if options.parallel < 1:
        parser.error(f"--parallel must be at least 1, got {options.parallel}")
    out = Path(options.out)
    work = out / "runs"
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    from crate.lit import StoredImageFolderDataModule

    StoredImageFolderDataModule(options.data).stores()  # decoded once, before the runs read the stores at once
    options.budget_s -= time.perf_counter() - start
    rows = train_all(options, work)
    env = environment()
    summary = {
        "dataset": "cifar10",
        "epochs": options.epochs,
        "protocol": "configs/cifar10.yaml + the member's model + configs/cifar10/gpu.yaml",
        "device": env["device"],
        "environment": env,
        "dry_run": options.dry_run,
        "parallel": options.parallel,
        "sharing": sharing_gain(rows, options.parallel) if options.first_alone else None,
        "results": grouped(rows),
        "not_finished": [{"name": r["name"], "seed": r["seed"], "error": r["error"]} for r in rows if "error" in r],
        "wall_s": round(time.perf_counter() - start, 1),
    }
    text = json.dumps(summary, indent=1, default=str) + "\n"
    (out / "zoo_table_cifar10_gpu.json").write_text(text)
    if options.report:
        (out / options.report).write_text(text)
    (out / "zoo_table_cifar10_gpu.md").write_text(
        render(dict(summary, sources=["this run"], devices=[env["device"]], sharing=[summary["sharing"]]))
    )
    print(f"wrote {out / 'zoo_table_cifar10_gpu.json'} ({summary['wall_s']} s)", flush=True)


if __name__ == "__main__":
    main()
