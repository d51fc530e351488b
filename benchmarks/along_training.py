"""The white-box figures along one run: every snapshot of ``<run>/snapshots/`` (``train.py fit --snapshots.enabled
true``) measured on the run's own held-out images, beside the controls that let each figure fail.

    .venv/bin/python -m benchmarks.along_training logs/RUN/version_0 --out docs/along_training/NAME

Per snapshot and layer, on ``--images`` validation images of the data the run held out (a class-mixed seeded
sample; the same for every snapshot): the change of R^c across the attention step for the trained update, the
update negated, without its token mean, the shared-vector and i.i.d. nulls (mean and sd over their draws) and the
theory's MSSA step, at full step and as the slope at 0 (``benchmarks/controls_table.py``'s ``controls_of``: the
same code path as ``make controls-table``; official convention, eps 0.01); R^c of the raw stream before the
attention; the sparse codes' share of exact zeros; the mean coherence between heads' subspaces; a linear probe
on each layer's mean token (``--probe-images`` training and validation images); and the validation accuracy on the
whole held-out split. Writes ``NAME.json``, ``NAME.md`` (a table and verdict lines computed from the numbers) and
``NAME.png`` (x: optimizer step, log scale; one panel per layer; nulls as bands).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import crate  # noqa: F401  (registers the zoo)
from benchmarks.controls_table import EPS, controls_of
from crate.interpret import load_data
from crate.interpret.compression_table import NULL_MARGIN
from crate.interpret.evaluate import layer_features, layerwise_curves, linear_probe, operator_geometry
from crate.interpret.objective_table import objective_layer_verdicts
from crate.metrics import trace_model
from crate.metrics.controls import full_step
from crate.models import CheckpointError, read_checkpoint
from crate.run import build_model, held_out_accuracy, held_out_set, resolve_data

SNAPSHOT = re.compile(r"step(\d+)-epoch(\d+)(-end)?\.safetensors")


def snapshot_files(run: Path) -> list[tuple[int, int, Path]]:
    """(step, epoch, file) of every snapshot of a run folder, in training order."""
    found = []
    for path in (run / "snapshots").glob("*.safetensors"):
        match = SNAPSHOT.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), path))
    if not found:
        raise SystemExit(
            f"along_training.py: no snapshots in {run / 'snapshots'} (train with --snapshots.enabled true)"
        )
    return sorted(found, key=lambda entry: (entry[0], entry[1], entry[2].name))


def measure(path: Path, images: int, probe_images: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """Every figure of one snapshot (see the module docstring)."""
    name = read_checkpoint(path).model_name
    model, _, recorded = build_model(name, path)
    data = load_data(resolve_data(None, recorded, overrides), model, limit=max(images, probe_images))
    sample = data.val_images[:images]
    torch.manual_seed(0)  # the nulls' draws: the same for every snapshot
    measured = controls_of(model, sample)
    controls = measured["official"]
    with torch.no_grad():
        traces = trace_model(model.eval(), sample)
    curves = layerwise_curves(traces, EPS["official"], "official", 0.1)
    geometry = operator_geometry(model, traces)
    train_features = layer_features(model, data.train_images[:probe_images])
    val_features = layer_features(model, data.val_images[:probe_images])
    train_y, val_y = data.train_labels[:probe_images].numpy(), data.val_labels[:probe_images].numpy()
    probes = [linear_probe(tr, train_y, va, val_y) for tr, va in zip(train_features, val_features, strict=True)]
    accuracy = None
    if getattr(model, "num_classes", 0):
        accuracy = held_out_accuracy(model, held_out_set(recorded, model, overrides))
    return {
        "model": name,
        "data": data.name,
        "images": len(sample),
        "val_accuracy": accuracy,
        "controls": controls,
        "objective": measured.get("objective"),
        "sparse_coding": measured.get("sparse_coding"),
        "Rc_raw_before_attention": curves["Rc_raw_before_attention"],
        "sparsity_of_code": curves["sparsity_of_code"],
        "mean_head_coherence": geometry["mean_head_coherence"],
        "linear_probe": probes,
    }


def layer_rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer of a snapshot: the full-step changes and slopes the verdicts and figures read."""
    summary = entry["controls"]
    whole = entry.get("objective")
    judged = objective_layer_verdicts(entry) if whole else None
    rows = []
    for layer in range(len(summary["before"])):
        row = {key: full_step(summary, key)[layer] for key in ("trained", "negated", "mean_removed", "shared_null")}
        row["iid_null"] = full_step(summary, "iid_null")[layer]
        row["shared_spread"] = full_step(summary, "shared_null", "change_spread")[layer] or 0.0
        row["iid_spread"] = full_step(summary, "iid_null", "change_spread")[layer] or 0.0
        theory = summary["theory_step"]
        row["theory"] = full_step(summary, "theory_step")[layer] if theory["slope"][layer] is not None else None
        row["theory_slope"] = theory["slope"][layer]
        row["trained_slope"] = summary["trained"]["slope"][layer]
        row["beyond_shared_null"] = row["trained"] < row["shared_null"] - NULL_MARGIN * row["shared_spread"]
        for key in ("Rc_raw_before_attention", "sparsity_of_code", "mean_head_coherence", "linear_probe"):
            values = entry.get(key) or []
            row[key] = values[layer] if layer < len(values) else None
        if judged is not None:  # the whole objective: R - R^c and its alignment, the ISTA step on its LASSO
            rate = whole["rate_reduction"]
            row["rr_trained"] = full_step(rate, "trained")[layer]
            row["rr_shared"] = full_step(rate, "shared_null")[layer]
            row["rr_iid"] = full_step(rate, "iid_null")[layer]
            row["rr_alignment"] = rate["trained"]["alignment"][layer]
            row.update({f"{key}_beyond_nulls": value for key, value in judged[layer].items()})
        rows.append(row)
    return rows


def verdicts(snapshots: list[dict[str, Any]]) -> list[str]:
    """Per layer, from the numbers: does the trained step ever go beyond its shared null, from which step, and
    does it stay beyond it to the last snapshot; and the codes' sparsity at the last snapshot against step 0."""
    lines = []
    depth = len(snapshots[0]["rows"])
    for layer in range(depth):
        beyond = [s["step"] for s in snapshots if s["rows"][layer]["beyond_shared_null"]]
        if not beyond:
            text = "never beyond the shared null"
        else:
            stays = snapshots[-1]["rows"][layer]["beyond_shared_null"]
            first = beyond[0]
            text = f"beyond the shared null first at step {first}, in {len(beyond)}/{len(snapshots)} snapshots, "
            text += "and still at the last" if stays else "but not at the last"
        first_code, last_code = (
            snapshots[0]["rows"][layer]["sparsity_of_code"],
            snapshots[-1]["rows"][layer]["sparsity_of_code"],
        )
        if first_code is not None and last_code is not None:
            text += f"; code zeros {first_code:.3f} at step {snapshots[0]['step']} -> {last_code:.3f} at the last"
        lines.append(f"- layer {layer}: the trained attention step is {text}.")
        if "rate_reduction_beyond_nulls" in snapshots[-1]["rows"][layer]:
            lines.append(f"  On the whole objective: {_whole_objective(snapshots, layer)}.")
    return lines


def _whole_objective(snapshots: list[dict[str, Any]], layer: int) -> str:
    """How often the layer's steps beat both nulls on R - R^c, on alignment, and (ISTA) on the LASSO objective."""
    parts = []
    for key, what in (
        ("rate_reduction", "raises R - R^c beyond both nulls"),
        ("alignment", "aligns with grad (R - R^c) beyond both nulls"),
        ("ista", "the ISTA step lowers its LASSO objective beyond both nulls"),
    ):
        values = [s["rows"][layer].get(f"{key}_beyond_nulls") for s in snapshots]
        if all(v is None for v in values):
            continue
        count = sum(bool(v) for v in values)
        last = "yes" if values[-1] else "no"
        parts.append(f"{what} in {count}/{len(snapshots)} snapshots (at the last: {last})")
    return "; ".join(parts)


def markdown(result: dict[str, Any]) -> str:
    snapshots = result["snapshots"]
    head = (
        "| step | epoch | val acc | layer | trained | negated | no mean | shared null | i.i.d. null | theory "
        "| slope (trained / theory) | beyond shared null | raw R^c | code zeros | head coherence | probe "
        "| Δ(R - R^c): trained | shared null | i.i.d. null | cos with ∇(R - R^c) |"
    )
    lines = [head, "|" + "---|" * 20]

    def cell(value: Any, digits: int = 2, sign: str = "+") -> str:
        return "-" if value is None else f"{value:{sign}.{digits}f}" if isinstance(value, float) else str(value)

    for snap in snapshots:
        for layer, row in enumerate(snap["rows"]):
            acc = "-" if snap["val_accuracy"] is None else f"{snap['val_accuracy']:.4f}"
            lines.append(
                f"| {snap['step']} | {snap['epoch']} | {acc} | {layer} | {cell(row['trained'])} | "
                f"{cell(row['negated'])} | {cell(row['mean_removed'])} | {cell(row['shared_null'])} ± "
                f"{row['shared_spread']:.2f} | {cell(row['iid_null'])} ± {row['iid_spread']:.2f} | "
                f"{cell(row['theory'])} | {cell(row['trained_slope'])} / {cell(row['theory_slope'])} | "
                f"{'yes' if row['beyond_shared_null'] else 'no'} | {cell(row['Rc_raw_before_attention'], 1, '')} | "
                f"{cell(row['sparsity_of_code'], 3, '')} | {cell(row['mean_head_coherence'], 3, '')} | "
                f"{cell(row['linear_probe'], 3, '')} | {cell(row.get('rr_trained'))} | {cell(row.get('rr_shared'))} | "
                f"{cell(row.get('rr_iid'))} | {cell(row.get('rr_alignment'), 3)} |"
            )
    first = snapshots[0]
    return "\n".join(
        [
            f"# Along training: `{result['run']}`",
            "",
            f"`{result['command']}` ({result['minutes']:.1f} min, {result['date']}). {len(snapshots)} snapshots of"
            f" {first['model']}, each on the same {first['images']} validation images of {first['data']}; official"
            f" convention (eps {EPS['official']}). Changes of R^c across each attention step at full step; nulls"
            f" as mean ± sd over their draws; beyond the shared null: below its mean - {NULL_MARGIN:g} sd.",
            "",
            "![along training](" + Path(result["figure"]).name + ")",
            "",
            "## Verdicts",
            "",
            *verdicts(snapshots),
            "",
            "## Every snapshot and layer",
            "",
            *lines,
            "",
        ]
    )


def _series(snapshots: list[dict[str, Any]], layer: int) -> Any:
    """key -> the layer's values of that key over the snapshots (NaN where absent)."""

    def get(key: str) -> np.ndarray:
        return np.array([np.nan if s["rows"][layer][key] is None else s["rows"][layer][key] for s in snapshots])

    return get


def figure(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    snapshots = result["snapshots"]
    depth = len(snapshots[0]["rows"])
    steps = np.array([max(s["step"], 1) for s in snapshots], dtype=float)  # step 0 drawn at 1 on the log axis
    columns = 3 if depth % 3 == 0 or depth > 6 else 2  # full rows of layer panels where the depth allows
    rows = (depth + columns - 1) // columns + 1
    fig = plt.figure(figsize=(13.5, 3.4 * rows))
    grid = fig.add_gridspec(rows, 6)
    span = 6 // columns
    first_ax = None
    for layer in range(depth):
        row, col = divmod(layer, columns)
        ax = fig.add_subplot(grid[row, col * span : (col + 1) * span])
        first_ax = first_ax or ax
        get = _series(snapshots, layer)
        for key, spread, colour, label in (
            ("shared_null", "shared_spread", "tab:gray", "shared-vector null ± 2 sd"),
            ("iid_null", "iid_spread", "tab:olive", "i.i.d. null ± 2 sd"),
        ):
            low, high = get(key) - 2 * get(spread), get(key) + 2 * get(spread)
            ax.fill_between(steps, low, high, color=colour, alpha=0.3, label=label)
        ax.plot(steps, get("trained"), "o-", color="tab:blue", label="trained update")
        ax.plot(steps, get("negated"), "--", color="tab:red", label="negated")
        ax.plot(steps, get("mean_removed"), ":", color="tab:purple", label="without token mean")
        if not np.all(np.isnan(get("theory"))):
            ax.plot(steps, get("theory"), "s-", color="tab:green", label="theory's MSSA step")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xscale("log")
        ax.set_title(f"layer {layer}")
        ax.set_xlabel("optimizer step (log; step 0 at 1)")
        ax.set_ylabel("change of R^c across the step")
    bottom = [fig.add_subplot(grid[rows - 1, 2 * i : 2 * i + 2]) for i in range(3)]
    accuracy = [np.nan if s["val_accuracy"] is None else s["val_accuracy"] for s in snapshots]
    bottom[0].plot(steps, accuracy, "o-", color="black")
    bottom[0].set(xscale="log", title="validation accuracy", xlabel="optimizer step (log)", ylabel="top-1")
    for layer in range(depth):
        codes = [s["rows"][layer]["sparsity_of_code"] for s in snapshots]
        if codes[0] is not None:
            bottom[1].plot(steps, codes, "o-", label=f"layer {layer}")
    bottom[1].set(xscale="log", title="sparse codes: share of zeros", xlabel="optimizer step (log)")
    for layer in range(depth):
        bottom[2].plot(steps, [s["rows"][layer]["linear_probe"] for s in snapshots], "o-", label=f"layer {layer}")
    bottom[2].set(xscale="log", title="linear probe per layer", xlabel="optimizer step (log)", ylabel="accuracy")
    bottom[2].legend(fontsize=7)
    handles, labels = first_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=6, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder (logs/RUN/version_N) with snapshots/")
    parser.add_argument("--out", required=True, help="output stem: writes STEM.json, STEM.md and STEM.png")
    parser.add_argument("--images", type=int, default=64, help="validation images for the controls")
    parser.add_argument("--probe-images", type=int, default=512, help="train and val images for the probes")
    parser.add_argument("--every", type=int, default=1, help="measure every N-th snapshot (the last always)")
    parser.add_argument("--from-json", action="store_true", help="redraw STEM.png and STEM.md from STEM.json")
    args, rest = parser.parse_known_args()
    if args.from_json:
        out = Path(args.out)
        result = json.loads(out.with_name(out.name + ".json").read_text())
        figure(result, out.with_name(out.name + ".png"))
        out.with_name(out.name + ".md").write_text(markdown(result))
        print(f"redrawn {out.with_name(out.name + '.png')} and {out.with_name(out.name + '.md')}")
        return
    overrides = {key[len("--data.") :]: value for key, value in zip(rest[::2], rest[1::2], strict=True)}
    start = time.perf_counter()
    files = snapshot_files(Path(args.run))
    chosen = files[:: args.every] + ([files[-1]] if (len(files) - 1) % args.every else [])
    snapshots = []
    for step, epoch, path in chosen:
        try:
            entry = measure(path, args.images, args.probe_images, overrides)
        except (CheckpointError, FileNotFoundError, ValueError) as err:  # a corrupt or foreign snapshot: one line
            raise SystemExit(f"along_training.py: {path.name}: {err}") from None
        entry.update(step=step, epoch=epoch, file=path.name)
        entry["rows"] = layer_rows(entry)
        snapshots.append(entry)
        print(f"step {step} (epoch {epoch}): val {entry['val_accuracy']}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "run": str(args.run),
        "command": " ".join(["python", "-m", "benchmarks.along_training", *sys.argv[1:]]),
        "minutes": (time.perf_counter() - start) / 60,
        "date": time.strftime("%Y-%m-%d"),
        "figure": str(out.with_name(out.name + ".png")),
        "snapshots": snapshots,
    }
    out.with_name(out.name + ".json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    figure(result, out.with_name(out.name + ".png"))
    out.with_name(out.name + ".md").write_text(markdown(result))
    print(f"wrote {out.with_name(out.name + '.md')}, .json and .png ({result['minutes']:.1f} min)")


if __name__ == "__main__":
    main()
