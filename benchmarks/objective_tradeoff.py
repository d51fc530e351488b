"""The layer-objective term's trade-off, from the along-training records of ``benchmarks/objective_tradeoff.sh``.

    .venv/bin/python benchmarks/objective_tradeoff.py            # docs/objective_tradeoff.md

Per weight: the validation accuracy of the last snapshot, and per layer at that snapshot whether the attention
step raises R - R^c beyond both matched-norm nulls, whether its alignment with grad (R - R^c) is beyond both
nulls', and the step's change of R - R^c beside the nulls'.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from along_training import layer_rows
from timing import REPO

STEM = "crate_nano_digits_objective_"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=str(REPO / "docs" / "along_training"))
    parser.add_argument("--out", default=str(REPO / "docs" / "objective_tradeoff.md"))
    args = parser.parse_args()
    def weight(path: Path) -> str:
        return path.stem.removeprefix(STEM).replace("p", ".")

    paths = sorted(Path(args.folder).glob(f"{STEM}*.json"), key=lambda p: float(weight(p)))
    if not paths:
        raise SystemExit(f"objective_tradeoff.py: no {STEM}*.json in {args.folder}; run objective_tradeoff.sh first")
    records = {weight(path): json.loads(path.read_text()) for path in paths}
    text = "\n".join(
        [
            "# A CRATE trained to follow its objective: the trade-off on the digits",
            "",
            "`benchmarks/objective_tradeoff.sh` then `python benchmarks/objective_tradeoff.py`: the default job"
            " (crate_nano_patch4_32, digits at 16 px, 150 epochs) with `--model.objective_weight W`"
            " (`crate.lit.layer_objective`), each run's last snapshot measured beside its controls (64 validation"
            " images, official convention; nulls: 8 draws, a step beats them beyond their mean + 2 sd). Each run's"
            " snapshots: `docs/along_training/crate_nano_digits_objective_W.md` (W with p for its decimal point).",
            "",
            table(records),
            "",
        ]
    )
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
