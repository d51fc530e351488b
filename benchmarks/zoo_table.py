"""``make zoo-table``: every CPU-scale member trained on digits with one recipe and three seeds, side by side.

    .venv/bin/python -m benchmarks.zoo_table                       # writes docs/zoo_table.md (and JSON)
    .venv/bin/python -m benchmarks.zoo_table --epochs 5 --seeds 0 --members crate_nano_patch4_32 --out /tmp/t.md
    .venv/bin/python -m benchmarks.zoo_table --dataset cifar10     # docs/zoo_table_cifar10.md (CIFAR_PROTOCOL)

The recipe is the default job's (``configs/crate_nano_digits.yaml``: digits at 16 px, crop augmentation,
AdamW, EMA of the weights) with the model's ``configs/zoo/<model>.yaml`` layered over it and
``--trainer.max_epochs`` set by ``--epochs``. On CIFAR-10 every member trains under one short protocol
(``CIFAR_PROTOCOL``): the base recipe ``configs/cifar10.yaml`` with the member's model in it (its own recipe
file ``configs/cifar10/<model>.yaml``, written for its shipped weights, is not layered in), crop and flip, one
warm-up epoch and 4 epochs, so that 15 members x 3 seeds fit about 6 CPU-hours on 2 cores (fp32 where the CPU
has no bf16); it ranks how far each model gets in a fixed short budget, not where it ends. For each member and
seed: the validation accuracy of the weights validation measured (the EMA where the recipe keeps one), then, on 256
validation images (``--probe-images``), from the model's own measurement trace: head redundancy (mean pairwise
cosine of the heads' attention maps) and row entropy of the maps, averaged over layers and heads; the change of the
compression term across each attention step, R^c(LN_1 Z^{l+1/2} | U^l) - R^c(LN_1 Z^l | U^l), official
convention (negative: the step compressed against its subspaces), averaged over layers; and the sparsity
of the sparse code where the block has one. Training throughput (forward, cross-entropy, backward, AdamW
on a batch of 64) is timed for every member interleaved with the ViT twin in the same process, medians of
the repeats, and reported as a ratio to the twin; s / epoch is the fit's wall time over its epochs.

Controls beside each figure (so that a figure can fail): the same measurements of the model at the
initialisation its run started from (the seed's), and for the compression change the trained attention
update negated and the theory's step (``crate.metrics.controls``). Finished runs are kept in
``<out>.partial.json`` and read back by a later call with the same dataset and epochs (delete it to rerun).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import crate  # noqa: F401  (registers the zoo)
from benchmarks.common import DEFAULT_CONFIG, REPO
from benchmarks.throughput import Case, Runner
from crate.data.sampling import sample_order
from crate.interpret.compression_table import layer_verdicts
from crate.interpret.lenses import head_redundancy, row_entropy
from crate.lit import cli_main
from crate.lit.cpu_precision import cpu_has_native_bf16
from crate.metrics import compression_responses, full_step, layerwise_values, summarise_responses, trace_model
from crate.models import create_classifier

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
    "vit_nano_patch4_32_cbsa": "ViT, CBSA attention",
    "cbt_nano_patch4_32": "CBT (CBSA + ISTA)",
    "crate_nano_patch4_32_mlp": "CRATE-MLP (MSSA + MLP)",
    "crate_nano_patch4_32_mhsa": "CRATE-MHSA (MHSA + ISTA)",
    "crate_nano_patch4_32_attn_only": "CRATE, attention only (MSSA)",
}
DATASETS = ("digits", "cifar10")
# The CIFAR-10 table's one protocol, over the base recipe with each member's model: crop and flip only, the base
# recipe's learning rate, and a warm-up that a 4-epoch run finishes.
CIFAR_PROTOCOL = ["--data.augmentation.policy", "null", "--data.augmentation.re_prob", "0.0"]
CIFAR_PROTOCOL += ["--model.lr", "1.0e-3", "--model.warmup_epochs", "1"]
CIFAR_EPOCHS = 4
TWIN = "vit_nano_patch4_32"
# the compression controls a run carries (crate.metrics.controls), full step, mean over layers
CONTROL_COLUMNS = ("negated", "shared_null", "mean_removed", "theory_step", "subspace_output")
PROBE_IMAGES = 256


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


@torch.no_grad()
def measure(model: torch.nn.Module, images: torch.Tensor) -> dict[str, float | None]:
    """Head statistics, compression across the attention steps and sparsity, from one trace; with the
    compression controls of ``crate.metrics.controls`` (official convention), averaged over layers: the full
    step's change along the update negated, the shared-vector null, the update without its token mean and
    the theory's MSSA step; the slopes at 0 of the trained update and of the theory's step; and in how many
    layers the trained step falls beyond the shared null and at first order."""
    model.eval()
    traces = trace_model(model, images)
    maps = [t.attention for t in traces if t.attention is not None]
    quantities = ("Rc_before_attention", "Rc_after_attention", "sparsity_of_code")
    values = layerwise_values(traces, convention="official", quantities=quantities)
    summary = summarise_responses(compression_responses(model.blocks, traces, convention="official"))
    before = values["Rc_before_attention"]
    verdicts = layer_verdicts(summary)

    def change(after: list[torch.Tensor | None]) -> float | None:
        return _mean([None if a is None else float((a - b).mean()) for a, b in zip(after, before, strict=True)])

    codes = [None if s is None else float(s.mean()) for s in values["sparsity_of_code"]]
    return {
        "redundancy": _mean([float(head_redundancy(A).mean()) for A in maps]) if maps else None,
        "entropy": _mean([float(row_entropy(A).mean()) for A in maps]) if maps else None,
        "rc_change": change(values["Rc_after_attention"]),
        **{f"rc_change_{name}": _mean(full_step(summary, name)) for name in CONTROL_COLUMNS},
        "rc_slope": _mean(summary["trained"]["slope"]),
        "rc_slope_theory_step": _mean(summary["theory_step"]["slope"]),
        "layers_beyond_shared_null": sum(v["beyond_shared_null"] for v in verdicts),
        "layers_first_order": sum(v["first_order"] for v in verdicts),
        "rc_before": _mean([float(v.mean()) for v in before]),
        "sparsity": _mean(codes),
    }


def _recipe(name: str, dataset: str, root: str | None) -> list[str]:
    if dataset == "digits":
        return ["--config", DEFAULT_CONFIG, "--config", str(REPO / "configs" / "zoo" / f"{name}.yaml")]
    # the base recipe and the member's model alone: what its own recipe file sets for its shipped weights (learning
    # rate, epochs, augmentation, a moving average of the weights, ...) stays out of the table's runs
    recipe = ["--config", str(REPO / "configs" / "cifar10.yaml"), "--model.model_name", name]
    recipe += ["--run_name", f"{name}.cifar10", *CIFAR_PROTOCOL]
    recipe += [] if cpu_has_native_bf16() else ["--trainer.precision", "32-true"]  # bf16 crawls without the ISA
    return recipe + (["--data.root", root] if root else [])


def train_one(
    name: str,
    seed: int,
    epochs: int,
    dataset: str = "digits",
    root: str | None = None,
    probe_images: int = PROBE_IMAGES,
) -> dict[str, Any]:
    """One training run of the recipe; accuracy, time per epoch and the trace measurements of its evaluated
    weights on ``probe_images`` validation images, next to the same measurements of the model it started from
    (its initialisation under the seed)."""
    with tempfile.TemporaryDirectory() as log_root:
        args = [*_recipe(name, dataset, root), "--trainer.max_epochs", str(epochs)]
        args += ["--seed_everything", str(seed), "--data.seed", str(seed), "--log_root", log_root]
        args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
        cli = cli_main(args, run=False)
        initial = copy.deepcopy(cli.model.evaluated_model())  # seed_everything, then the model: training's start
        start = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        seconds = time.perf_counter() - start
        accuracy = float(cli.trainer.callback_metrics["val/acc"])
        val_images = torch.cat([batch[0] for batch in cli.datamodule.val_dataloader()])  # class by class
        images = val_images[sample_order(len(val_images), probe_images)]  # the classes mixed
        result = measure(cli.model.evaluated_model(), images)
        at_init = measure(initial, images)
    return dict(
        result,
        **{f"{key}_init": value for key, value in at_init.items()},
        accuracy=accuracy,
        seconds=seconds,
        epoch_seconds=seconds / epochs,
        seed=seed,
    )


def throughput_ratios(names: list[str], repeats: int, steps: int, img: int = 16) -> dict[str, float]:
    """Training images/s of each member over the ViT twin's, timed interleaved, medians of the repeats."""
    # the input batch of the members (Runner reads name, img, classes and batch; the sizes are the nano ones)
    case = Case("zoo", img=img, patch=4, dim=96, depth=4, heads=4, classes=10, batch=64, same_model=False)
    device = torch.device("cpu")
    runners = {}
    for name in dict.fromkeys([TWIN, *names]):
        torch.manual_seed(0)
        model = create_classifier(name, num_classes=10, img_size=img)
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
    """The markdown table. Runs measured before the matched-norm nulls existed carry the update negated and the
    heads' outputs through U_[K] (then called the theory's step) only: their other control cells read "-"."""
    lines = [
        "| model | attention | params | val acc (mean ± std) | s / epoch | train img/s vs ViT twin "
        "| head redundancy (init) | row entropy, nats (init) | ΔR^c across attention: trained (init; negated; "
        "shared null; heads through U_[K]) | slope at 0: trained (theory step) | layers beyond the shared null, "
        "at first order | sparsity of code (init) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        runs = r["runs"]
        accuracy = [run["accuracy"] for run in runs]
        spread = statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0

        def mean_of(key: str, digits: int = 3, runs: list[dict[str, Any]] = runs) -> str:
            value = _mean([run.get(key) for run in runs])
            return "-" if value is None and not all(key in run for run in runs) else _fmt(value, digits)

        through_u = "rc_change_subspace_output" if "rc_change_subspace_output" in runs[0] else "rc_change_theory_step"
        through_u_cell = mean_of(through_u, 2) if r.get("subspace_steps") else "-"
        compression = (
            f"{mean_of('rc_change', 2)} ({mean_of('rc_change_init', 2)}; {mean_of('rc_change_negated', 2)}; "
            f"{mean_of('rc_change_shared_null', 2)}; {through_u_cell})"
        )
        slopes = f"{mean_of('rc_slope', 2)} ({mean_of('rc_slope_theory_step', 2)})"
        counts = f"{mean_of('layers_beyond_shared_null', 1)}, {mean_of('layers_first_order', 1)}"
        ratio = "n/a" if r["throughput_ratio"] is None else f"{r['throughput_ratio']:.2f}x"
        lines.append(
            f"| `{name}` | {MEMBERS[name]} | {r['params']:,} | {statistics.fmean(accuracy):.4f} ± {spread:.4f} "
            f"| {mean_of('epoch_seconds', 1)} | {ratio} "
            f"| {mean_of('redundancy')} ({mean_of('redundancy_init')}) "
            f"| {mean_of('entropy')} ({mean_of('entropy_init')}) "
            f"| {compression} | {slopes} | {counts} | {mean_of('sparsity')} ({mean_of('sparsity_init')}) |"
        )
    return "\n".join(lines)


def spread_line(results: dict[str, dict[str, Any]]) -> str:
    """The seed spread beside the spread of the rows' means: differences well beyond the first are the table's."""
    means = [statistics.fmean(run["accuracy"] for run in r["runs"]) for r in results.values()]
    stds = [statistics.stdev([run["accuracy"] for run in r["runs"]]) for r in results.values() if len(r["runs"]) > 1]
    seed_std = statistics.fmean(stds) if stds else float("nan")
    between = statistics.stdev(means) if len(means) > 1 else float("nan")
    return (
        f"Spread: mean seed std within a row {seed_std:.4f}; std of the row means {between:.4f}; "
        f"range of the row means {max(means) - min(means):.4f}."
    )


def has_subspace_steps(model: torch.nn.Module) -> bool:
    """Whether every attention of the member scores one shared projection U_[K] (the theory's step exists)."""
    return all(getattr(block.attn, "shared_query_key", False) for block in model.blocks)


RERENDERED = (
    "\n\nRe-rendered by `python -m benchmarks.zoo_table{dataset} --from-json` from the measurements saved in"
    " `{json}` (no retraining; their trained weights were not kept). Runs measured before the matched-norm nulls and"
    " slopes of crate.metrics.controls carry at most the update negated and the heads' outputs through U_[K] (the"
    ' column once named "theory step"); their other control cells read "-", and the heads-through-U cell is "-" for'
    " members without one shared projection U_[K] (ViTs, ToST, CRATE-MHSA, MSSA-SH). The nulls and slopes of the"
    " shipped CIFAR-10 weights are in docs/controls_cifar10.md."
)


def rendered_from_json(out: Path) -> str:
    """The table file ``out`` as ``<out>.json`` (the saved runs) renders through the current ``table``, under
    the header the table was written with (its wording of the controls corrected)."""
    saved_path = out.with_suffix(".json")
    if not saved_path.is_file():
        raise SystemExit(f"zoo_table.py: no saved measurements at {saved_path}; run the table first")
    saved = json.loads(saved_path.read_text())
    saved.setdefault("dataset", "digits")  # tables written before the CIFAR-10 one name no data set
    chans, size = (3, 32) if saved["dataset"] == "cifar10" else (1, 16)
    for name, result in saved["results"].items():
        result["subspace_steps"] = has_subspace_steps(
            create_classifier(name, num_classes=10, in_chans=chans, img_size=size)
        )
    old = out.read_text() if out.is_file() else f"# The zoo side by side on {saved['dataset']}\n\n| model"
    header = old[: old.index("\n\n| model")].split("\n\nRe-rendered ")[0]
    header = header.replace(
        "the theory's step (the update with its output projection replaced by U_[K] at the same norm)",
        "the heads' outputs through U_[K] at the update's norm (then called the theory's step)",
    )
    dataset = "" if saved["dataset"] == "digits" else f" --dataset {saved['dataset']}"
    header += RERENDERED.format(dataset=dataset, json=saved_path.name)
    return header + "\n\n" + table(saved["results"]) + "\n\n" + spread_line(saved["results"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=DATASETS, default="digits")
    parser.add_argument("--root", default=None, help="cifar10: the image folder (default: the recipe's data/cifar10)")
    parser.add_argument("--epochs", type=int, default=None, help=f"default: 50 on digits, {CIFAR_EPOCHS} on cifar10")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--members", nargs="+", default=list(MEMBERS), choices=list(MEMBERS))
    parser.add_argument("--repeats", type=int, default=7, help="throughput repeats (interleaved)")
    parser.add_argument(
        "--probe-images", type=int, default=PROBE_IMAGES, help="validation images the trace measurements read"
    )
    parser.add_argument("--out", default=None, help="default: docs/zoo_table.md, docs/zoo_table_cifar10.md")
    parser.add_argument(
        "--from-json", action="store_true", help="rewrite the table from <out>.json (saved measurements), no training"
    )
    args = parser.parse_args()
    cifar = args.dataset == "cifar10"
    epochs = args.epochs or (CIFAR_EPOCHS if cifar else 50)
    protocol = " ".join(CIFAR_PROTOCOL) if cifar else ""
    out = Path(args.out or REPO / "docs" / ("zoo_table_cifar10.md" if cifar else "zoo_table.md"))
    if args.from_json:
        out.write_text(rendered_from_json(out))
        print(f"rewritten {out} from {out.with_suffix('.json')}")
        return
    # digits layers each member's configs/zoo/<model>.yaml; CIFAR-10 takes only the model's name (_recipe)
    missing = [name for name in args.members if not cifar and not (REPO / "configs" / "zoo" / f"{name}.yaml").is_file()]
    if missing:
        raise SystemExit(f"zoo_table.py: no configs/zoo/<model>.yaml for {missing}")
    # finished runs of an earlier call with the same protocol are kept, not trained again (commit them as they come)
    partial = out.with_suffix(".partial.json")
    done: dict[str, dict[str, Any]] = {}
    if partial.is_file():
        earlier = json.loads(partial.read_text())
        same = (earlier.get("dataset", "digits"), earlier.get("epochs"), earlier.get("protocol", ""))
        same += (earlier.get("probe_images", PROBE_IMAGES),)
        if same == (args.dataset, epochs, protocol, args.probe_images):
            done = earlier["results"]
    start = time.perf_counter()
    ratios = throughput_ratios(args.members, args.repeats, steps=10, img=32 if cifar else 16)
    results: dict[str, dict[str, Any]] = {}
    for name in args.members:
        chans, size = (3, 32) if cifar else (1, 16)
        member = create_classifier(name, num_classes=10, in_chans=chans, img_size=size)
        params = sum(p.numel() for p in member.parameters())
        runs = [run for run in done.get(name, {}).get("runs", []) if run["seed"] in args.seeds]
        for seed in args.seeds:
            if any(run["seed"] == seed for run in runs):
                continue
            runs.append(train_one(name, seed, epochs, args.dataset, args.root, args.probe_images))
            print(f"{name} seed {seed}: val/acc {runs[-1]['accuracy']:.4f} in {runs[-1]['seconds']:.1f} s", flush=True)
            results[name] = {"params": params, "throughput_ratio": ratios[name], "runs": runs}
            done[name] = results[name]
            partial.parent.mkdir(parents=True, exist_ok=True)
            kept = {"dataset": args.dataset, "epochs": epochs, "protocol": protocol}
            kept |= {"probe_images": args.probe_images, "results": done}
            partial.write_text(json.dumps(kept, indent=1))
        results[name] = {
            "params": params,
            "throughput_ratio": ratios[name],
            "subspace_steps": has_subspace_steps(member),
            "runs": sorted(runs, key=lambda r: r["seed"]),
        }
    minutes = (time.perf_counter() - start) / 60
    out.parent.mkdir(parents=True, exist_ok=True)
    recipe = (
        "CIFAR-10 at 32 px (train 45,000, val 5,000 images), one protocol for every member (configs/cifar10.yaml "
        f"with the member's model, not its own recipe file, then `{protocol}`: crop and flip, the base learning rate, "
        "one warm-up epoch; "
        f"{'bf16' if cpu_has_native_bf16() else 'fp32: this CPU has no bf16'}); a short budget, so the table ranks "
        "how far each model gets in it, not the accuracy it ends at (the shipped weights' recipes train longer)"
        if cifar
        else "the default job's recipe (digits at 16 px, 1 channel, 10 classes)"
    )
    header = (
        f"# The zoo side by side on {args.dataset}\n\n"
        f"Written by `{' '.join(['python', '-m', 'benchmarks.zoo_table', *sys.argv[1:]])}` in {minutes:.1f} minutes "
        f"(runs finished earlier were read back) on {torch.get_num_threads()} CPU threads "
        f"({time.strftime('%Y-%m-%d')}): {len(args.members)} models x {len(args.seeds)} seeds, {epochs} epochs "
        f"each, {recipe}. Each figure is given with its controls: (init) the same model at the initialisation "
        "its training started from; for ΔR^c also the trained attention update negated, a random vector shared by "
        "all tokens at the update's norm (shared null) and the heads' outputs mapped through U_[K] at that norm; "
        "the slope at 0 of R^c along the update (first order) and along the theory's MSSA step, measured on "
        f"{args.probe_images} validation images; see "
        "crate.metrics.controls and the script's docstring. s / epoch is each run's own wall time when it ran (rows "
        "read back from earlier calls ran on other days, under other loads and code); compare speed by the img/s "
        "ratio, measured for every member together in this call.\n\n"
    )
    out.write_text(header + table(results) + "\n\n" + spread_line(results) + "\n")
    summary = {"dataset": args.dataset, "minutes": minutes, "epochs": epochs, "protocol": protocol}
    summary |= {"probe_images": args.probe_images, "results": results}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(table(results))
    print(spread_line(results))
    print(f"{minutes:.1f} minutes; written to {out} (finished runs stay in {partial.name})")


if __name__ == "__main__":
    main()
