"""``make zoo-table``: every CPU-scale member trained on digits with one recipe and three seeds, side by side.

    .venv/bin/python benchmarks/zoo_table.py                       # writes docs/zoo_table.md (and JSON)
    .venv/bin/python benchmarks/zoo_table.py --epochs 5 --seeds 0 --members crate_nano_patch4_32 --out /tmp/t.md

The recipe is the default job's (``configs/crate_nano_digits.yaml``: digits at 16 px, crop augmentation,
AdamW, EMA of the weights) with the model's ``configs/zoo/<model>.yaml`` layered over it and
``--trainer.max_epochs`` set by ``--epochs``. For
each member and seed: the validation accuracy of the weights validation measured (the EMA), then, on 256
validation images, from the model's own measurement trace: head redundancy (mean pairwise cosine of the
heads' attention maps) and row entropy of the maps, averaged over layers and heads; the change of the
compression term across each attention step, R^c(LN_1 Z^{l+1/2} | U^l) - R^c(LN_1 Z^l | U^l), official
convention (negative: the step compressed against its subspaces), averaged over layers; and the sparsity
of the sparse code where the block has one. Training throughput (forward, cross-entropy, backward, AdamW
on a batch of 64) is timed for every member interleaved with the ViT twin in the same process, medians of
the repeats, and reported as a ratio to the twin.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from throughput import Case, Runner
from timing import DEFAULT_CONFIG, REPO

import crate  # noqa: F401  (registers the zoo)
from crate.interpret.lenses import head_redundancy, row_entropy
from crate.lit import cli_main
from crate.lit.factory import create_classifier
from crate.metrics import layerwise_values, trace_model

MEMBERS: dict[str, str] = {
    "vit_nano_patch4_32": "ViT twin (softmax = exp kernel)",
    "vit_nano_patch4_32_rbf": "ViT, RBF kernel",
    "vit_nano_patch4_32_poly2": "ViT, poly2 kernel",
    "vit_nano_patch4_32_linear": "ViT, linear kernel (elu+1)",
    "vit_nano_patch4_32_bn": "ViT, Attention-BN",
    "vit_nano_patch4_32_sh": "ViT, Attention-SH",
    "vit_nano_patch4_32_bnsh": "ViT, Attention-BN+SH",
    "crate_nano_patch4_32": "CRATE",
    "crate_nano_patch4_32_bn": "CRATE, MSSA-BN",
    "crate_nano_patch4_32_sh": "CRATE, MSSA-SH",
    "crate_alpha_nano_patch4_32": "CRATE-alpha",
    "tost_nano_patch4_32": "ToST (TSSA)",
}
TWIN = "vit_nano_patch4_32"
PROBE_IMAGES = 256


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


@torch.no_grad()
def measure(model: torch.nn.Module, images: torch.Tensor) -> dict[str, float | None]:
    """Head statistics, compression across the attention steps and sparsity, from one trace."""
    model.eval()
    traces = trace_model(model, images)
    maps = [t.attention for t in traces if t.attention is not None]
    quantities = ("Rc_before_attention", "Rc_after_attention", "sparsity_of_code")
    values = layerwise_values(traces, convention="official", quantities=quantities)
    before, after = values["Rc_before_attention"], values["Rc_after_attention"]
    change = [float((a - b).mean()) for a, b in zip(after, before, strict=True)]
    codes = [None if s is None else float(s.mean()) for s in values["sparsity_of_code"]]
    return {
        "redundancy": _mean([float(head_redundancy(A).mean()) for A in maps]) if maps else None,
        "entropy": _mean([float(row_entropy(A).mean()) for A in maps]) if maps else None,
        "rc_change": _mean(change),
        "rc_before": _mean([float(v.mean()) for v in values["Rc_before_attention"]]),
        "sparsity": _mean(codes),
    }


def train_one(name: str, seed: int, epochs: int) -> dict[str, Any]:
    """One training run of the recipe; accuracy, time and the trace measurements of its evaluated weights."""
    with tempfile.TemporaryDirectory() as log_root:
        zoo_config = REPO / "configs" / "zoo" / f"{name}.yaml"
        args = ["--config", DEFAULT_CONFIG, "--config", str(zoo_config), "--trainer.max_epochs", str(epochs)]
        args += ["--seed_everything", str(seed), "--data.seed", str(seed), "--log_root", log_root]
        args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
        cli = cli_main(args, run=False)
        start = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        seconds = time.perf_counter() - start
        accuracy = float(cli.trainer.callback_metrics["val/acc"])
        images = torch.cat([batch[0] for batch in cli.datamodule.val_dataloader()])[:PROBE_IMAGES]
        result = measure(cli.model.evaluated_model(), images)
    return dict(result, accuracy=accuracy, seconds=seconds, seed=seed)


def throughput_ratios(names: list[str], repeats: int, steps: int) -> dict[str, float]:
    """Training images/s of each member over the ViT twin's, timed interleaved, medians of the repeats."""
    # the input batch of the members (Runner reads name, img, classes and batch; the sizes are the nano ones)
    case = Case("zoo", img=16, patch=4, dim=96, depth=4, heads=4, classes=10, batch=64, same_model=False)
    device = torch.device("cpu")
    runners = {}
    for name in dict.fromkeys([TWIN, *names]):
        torch.manual_seed(0)
        model = create_classifier(name, num_classes=10, img_size=16)
        runners[name] = Runner(model, case, device, "fp32", train=True, compiled=False)
        runners[name].time(2)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, runner in runners.items():
            times[name].append(runner.time(steps))
    twin = statistics.median(times[TWIN])
    return {name: twin / statistics.median(times[name]) for name in names}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| model | attention | params | val acc (mean ± std) | train img/s vs ViT twin | head redundancy "
        "| row entropy (nats) | ΔR^c across attention | sparsity of code |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        runs = r["runs"]
        accuracy = [run["accuracy"] for run in runs]
        spread = statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0

        def mean_of(key: str, runs: list[dict[str, Any]] = runs) -> float | None:
            return _mean([run[key] for run in runs])

        lines.append(
            f"| `{name}` | {MEMBERS[name]} | {r['params']:,} | {statistics.fmean(accuracy):.4f} ± {spread:.4f} "
            f"| {r['throughput_ratio']:.2f}x | {_fmt(mean_of('redundancy'))} | {_fmt(mean_of('entropy'))} "
            f"| {_fmt(mean_of('rc_change'), 2)} | {_fmt(mean_of('sparsity'))} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", nargs="+", default=list(MEMBERS), choices=list(MEMBERS))
    parser.add_argument("--repeats", type=int, default=7, help="throughput repeats (interleaved)")
    parser.add_argument("--out", default=str(REPO / "docs" / "zoo_table.md"))
    args = parser.parse_args()
    missing = [name for name in args.members if not (REPO / "configs" / "zoo" / f"{name}.yaml").is_file()]
    if missing:
        raise SystemExit(f"zoo_table.py: no configs/zoo/<model>.yaml for {missing}")
    start = time.perf_counter()
    ratios = throughput_ratios(args.members, args.repeats, steps=10)
    results: dict[str, dict[str, Any]] = {}
    for name in args.members:
        params = sum(p.numel() for p in create_classifier(name, num_classes=10, in_chans=1, img_size=16).parameters())
        runs = []
        for seed in args.seeds:
            runs.append(train_one(name, seed, args.epochs))
            print(f"{name} seed {seed}: val/acc {runs[-1]['accuracy']:.4f} in {runs[-1]['seconds']:.1f} s", flush=True)
        results[name] = {"params": params, "throughput_ratio": ratios[name], "runs": runs}
        partial = Path(args.out).with_suffix(".partial.json")  # what is done so far, should a later run fail
        partial.write_text(json.dumps({"epochs": args.epochs, "results": results}, indent=1))
    minutes = (time.perf_counter() - start) / 60
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# The zoo side by side on digits\n\n"
        f"Written by `{' '.join(['python', 'benchmarks/zoo_table.py', *sys.argv[1:]])}` (`make zoo-table`) in "
        f"{minutes:.1f} minutes on {torch.get_num_threads()} CPU threads ({time.strftime('%Y-%m-%d')}): "
        f"{len(args.members)} models x {len(args.seeds)} seeds, {args.epochs} epochs each, the default job's recipe "
        "(digits at 16 px, 1 channel, 10 classes; see the script's docstring for what each column measures).\n\n"
    )
    out.write_text(header + table(results) + "\n")
    summary = {"minutes": minutes, "epochs": args.epochs, "results": results}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(table(results))
    print(f"{minutes:.1f} minutes; written to {out}")


if __name__ == "__main__":
    main()
