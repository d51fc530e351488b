"""The layer-objective term's trade-off, from the along-training records of ``benchmarks/objective_tradeoff.sh``.

    .venv/bin/python -m benchmarks.objective_tradeoff            # docs/objective_tradeoff.md

One section per task whose runs were measured (the digits; the CIFAR-10 subset). Per weight: the validation
accuracy of the last snapshot, and per layer at that snapshot whether the attention step raises R - R^c beyond
both matched-norm nulls, whether its alignment with grad (R - R^c) is beyond both nulls', and the step's change
of R - R^c beside the nulls'.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.along_training import layer_rows
from benchmarks.common import REPO

# per task: the along-training records' name stem and what the runs were
TASKS = {
    "digits": (
        "crate_nano_digits_objective_",
        "The digits",
        "the default job (crate_nano_patch4_32, digits at 16 px, 150 epochs, float32)",
        "The weight-0.01 run ships as `crate_nano_patch4_32.digits_objective` (its card states the weight).",
    ),
    "cifar10_10k": (
        "crate_nano_cifar10_10k_objective_",
        "A CIFAR-10 subset",
        "crate_nano_patch4_32 on the base CIFAR-10 recipe (`configs/cifar10.yaml`, bf16) over 10,000 / 2,000"
        " images of the train / val split (`benchmarks/cifar10_subset.py`), 50 epochs",
        "The weight-0.01 run ships as `crate_nano_patch4_32.cifar10_10k_objective` (its card states the weight and"
        " the subset; it is scored on the official 10,000-image test split like every CIFAR-10 tag).",
    ),
}


def _weight(label: str) -> float:
    """The weight of a run's label ("0.01", or "0.01 (4 images)" for a run whose term read 4 images a batch)."""
    return float(label.split(" ")[0])


def _label(rest: str) -> str:
    """A run's label from its record's name after the stem: ``0p01`` or ``0p01_images4``."""
    weight, _, images = rest.partition("_images")
    weight = weight.replace("p", ".")
    return f"{weight} ({images} images)" if images else weight


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def table(records: dict[str, dict]) -> str:
    lines = [
        "| weight | val acc | layer | Δ(R - R^c): trained | shared null | i.i.d. null | beyond both nulls | "
        "cos with ∇(R - R^c) | aligned beyond both nulls | ISTA beyond its nulls |",
        "|" + "---|" * 10,
    ]
    for weight, record in records.items():
        last = record["snapshots"][-1]
        for layer, row in enumerate(layer_rows(last)):
            lines.append(
                f"| {weight} | {last['val_accuracy']:.4f} | {layer} | {_cell(row.get('rr_trained'))} | "
                f"{_cell(row.get('rr_shared'))} | {_cell(row.get('rr_iid'))} | "
                f"{'yes' if row.get('rate_reduction_beyond_nulls') else 'no'} | {_cell(row.get('rr_alignment'), 3)} | "
                f"{'yes' if row.get('alignment_beyond_nulls') else 'no'} | "
                f"{'yes' if row.get('ista_beyond_nulls') else 'no'} |"
            )
    return "\n".join(lines)


def verdict(records: dict[str, dict]) -> str:
    """The sentence the table supports: the weights at which every layer's attention step beats both nulls on
    R - R^c and on alignment with val accuracy within one point of weight 0's, or that there is none; not a
    finding where the untrained architecture (each run's step-0 snapshot) has every layer beyond them too."""
    base = records.get("0")
    if base is None:
        return "No weight-0 run to compare with."
    base_acc = base["snapshots"][-1]["val_accuracy"]

    def beyond_on_both(snapshot: dict) -> tuple[int, int]:
        rows = layer_rows(snapshot)
        both = sum(bool(r.get("rate_reduction_beyond_nulls")) and bool(r.get("alignment_beyond_nulls")) for r in rows)
        return both, len(rows)

    # the untrained architecture: every run's first snapshot, at step 0, is its seed's initialisation
    untrained, _ = beyond_on_both(base["snapshots"][0]) if base["snapshots"][0].get("step") == 0 else (None, None)
    counts = []
    for weight, record in records.items():
        last = record["snapshots"][-1]
        both, depth = beyond_on_both(last)
        counts.append((weight, last["val_accuracy"], both, depth))
    reached = untrained is not None and any(untrained >= depth for *_, depth in counts)
    chosen = [w for w, acc, both, depth in counts if w != "0" and both == depth and acc >= base_acc - 0.01]
    said = "; ".join(
        f"weight {w}: val {acc:.4f}, {both} of {depth} layers beyond both nulls on both"
        for w, acc, both, depth in counts
    )
    if untrained is not None:
        said += f"; the untrained architecture (step 0 of the runs): {untrained} of {counts[0][3]}"
    if reached:
        return (
            "Not a finding: the untrained architecture (step 0 of the runs) already has every layer beyond both"
            f" nulls on both ({said})."
        )
    if chosen:
        first = chosen[0]
        acc = next(a for w, a, _, _ in counts if w == first)
        costly = [w for w, a, _, _ in counts if _weight(w) > _weight(first) and a < base_acc - 0.01]
        tail = (
            f"; larger weights ({', '.join(costly)}) keep the verdicts at the cost of the classifier" if costly else ""
        )
        return (
            f"At weight {first} every layer's attention step raises R - R^c beyond both nulls and aligns with"
            f" its ascent beyond both nulls' alignment, where the untrained architecture (one seed) does in fewer"
            " layers, with"
            f" val accuracy {acc:.4f} against weight 0's {base_acc:.4f} (within one point, or above){tail}."
            f" ({said}.)"
        )
    return f"No weight reaches every layer beyond both nulls within one point of weight 0's accuracy ({said})."


def section(task: str, records: dict[str, dict]) -> list[str]:
    stem, title, runs, shipped = TASKS[task]
    command = ("" if task == "digits" else f"TASK={task} ") + "benchmarks/objective_tradeoff.sh"
    return [
        f"## {title}",
        "",
        f"`{command}`: {runs}, with `--model.objective_weight W`; each run's last snapshot measured beside its"
        f" controls. Each run's snapshots: `docs/along_training/{stem}W.md` (W with p for its decimal point). "
        + shipped,
        "",
        verdict(records),
        "",
        table(records),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=str(REPO / "docs" / "along_training"))
    parser.add_argument("--out", default=str(REPO / "docs" / "objective_tradeoff.md"))
    args = parser.parse_args()
    text = [
        "# A CRATE trained to follow its objective: the trade-off",
        "",
        "`--model.objective_weight W` (`crate.lit.layer_objective`) adds to the loss a term that rewards each"
        " attention step for its rate-reduction gain per unit of its size and each ISTA code for its sparsity."
        " Below, per task and weight: the validation accuracy and, per layer at the run's last snapshot, whether"
        " the attention step raises R - R^c beyond both matched-norm nulls and aligns with its ascent beyond"
        " them (64 validation images, official convention; nulls: 8 draws, a step beats them beyond their"
        " mean + 2 sd). The term reads 8 images of each batch (`--model.objective_images`) where the weight"
        " column names no other number. The untrained architecture here is each run's step 0, one seed, which"
        " cannot make a count a finding; the shipped weight-0.01 files' counts are read against 19 untrained"
        " seeds in [their controls](controls_digits_objective.md) and [the CIFAR-10 table](controls_cifar10.md).",
        "",
    ]
    found = False
    for task, (stem, *_) in TASKS.items():

        def label(path: Path, stem: str = stem) -> str:
            return _label(path.stem.removeprefix(stem))

        paths = sorted(Path(args.folder).glob(f"{stem}*.json"), key=lambda p: (_weight(label(p)), label(p)))
        if paths:
            found = True
            text += section(task, {label(path): json.loads(path.read_text()) for path in paths})
    if not found:
        raise SystemExit(f"objective_tradeoff.py: no records in {args.folder}; run objective_tradeoff.sh first")
    Path(args.out).write_text("\n".join(text))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
