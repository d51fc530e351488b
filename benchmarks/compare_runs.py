"""Compare two training runs epoch by epoch from their CSV logs (``metrics.csv``).

Prints, for the epochs both runs reached: the first run's last and best validation accuracy, both runs' mean over
the last ten epochs of the first, the epochs in which the first run was ahead and its median lead, and its last
train accuracy. Epochs are counted from 1 throughout (``epochs`` is how many the run logged, ``best_epoch`` the
N-th; Lightning's logs and checkpoint names count from 0). ``--since`` and ``--until`` compare a stretch of the run
only, e.g. the epochs after a regulariser stopped, or the run as it stood after its N-th epoch. The figures the
results page gives for a long CPU run beside an earlier one come from here::

    python -m benchmarks.compare_runs benchmarks/results/cpu_runs/crate_cct_w152_full/metrics.csv \\
        benchmarks/results/cpu_runs/crate_cct_full/metrics.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path
from typing import Any

import yaml

from crate.run.held_out import describe_data


def per_epoch(path: Path, column: str) -> dict[int, float]:
    """``column``'s value at each epoch that logged it (the last value wins)."""
    values: dict[int, float] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get(column) and row.get("epoch"):
                values[int(row["epoch"])] = float(row[column])
    return values


def _val_limit(trainer: Any, data: dict[str, Any]) -> str:
    """The part of the val split a run validated on, where ``--trainer.limit_val_batches`` cut it: a whole number
    is that many batches (of the run's batch size), a fraction that share of its batches."""
    limit = trainer.get("limit_val_batches") if isinstance(trainer, dict) else None
    if limit is None or isinstance(limit, bool) or (isinstance(limit, float) and limit >= 1.0):
        return ""
    if isinstance(limit, int):
        return f", the first {limit} val batches of {(data.get('init_args') or {}).get('batch_size', '?')} images"
    return f", {limit:g} of the val batches"


def validated_on(metrics_csv: Path) -> str | None:
    """The data a run validated on, as the run's ``config.yaml`` beside its ``metrics.csv`` gives it (the DataModule
    and the settings that choose its images, and the part of the split ``--trainer.limit_val_batches`` kept);
    None where no config lies beside it."""
    config = metrics_csv.with_name("config.yaml")
    if not config.is_file():
        return None
    recorded = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    data = recorded.get("data")
    if not isinstance(data, dict) or "class_path" not in data:
        return None
    return describe_data(data) + _val_limit(recorded.get("trainer"), data)


def check_same_data(run: Path, reference: Path) -> None:
    """Refuse two runs that validated on other data (a subset against the whole split, another split seed): their
    val accuracies are figures on other images, and a lead of one over the other says nothing."""
    ours, theirs = validated_on(run), validated_on(reference)
    if ours is not None and theirs is not None and ours != theirs:
        raise SystemExit(
            f"compare_runs: the runs validated on other data ({run.parent.name}: {ours}; {reference.parent.name}: "
            f"{theirs}); pass --other-data to compare them anyway"
        )


def compare(
    run: Path, reference: Path, last: int = 10, since: int = 1, until: int | None = None
) -> dict[str, float | int]:
    """The run against the reference over the run's epochs ``since`` to ``until`` (counted from 1, both included)."""
    if since < 1 or (until is not None and until < since):
        given = f"--since {since}" + ("" if until is None else f" --until {until}")
        raise SystemExit(f"compare_runs: {given} is no stretch; epochs count from 1, since <= until")
    val, ref, train = per_epoch(run, "val/acc"), per_epoch(reference, "val/acc"), per_epoch(run, "train/acc")
    if not val:
        raise SystemExit(f"compare_runs: {run} logs no val/acc; pass a run's metrics.csv")
    val = {epoch: acc for epoch, acc in val.items() if since <= epoch + 1 and (until is None or epoch + 1 <= until)}
    if not val:
        stretch = f"epoch {since} on" if until is None else f"epochs {since} to {until}"
        raise SystemExit(f"compare_runs: {run} logs no val/acc from {stretch}; widen --since/--until")
    epochs = sorted(val)
    shared = [epoch for epoch in epochs if epoch in ref]
    if not shared:
        raise SystemExit(f"compare_runs: {reference} shares no epoch with {run}")
    tail = epochs[-last:]
    leads = [val[epoch] - ref[epoch] for epoch in shared]
    final = epochs[-1]
    return {
        "epochs": final + 1,
        "val_last": val[final],
        "val_best": max(val.values()),
        "best_epoch": max(val, key=val.__getitem__) + 1,
        "val_mean_last": statistics.mean(val[epoch] for epoch in tail),
        "reference_mean_last": statistics.mean(ref[epoch] for epoch in tail if epoch in ref),
        "reference_at_last": ref.get(final, float("nan")),
        "epochs_ahead": sum(lead > 0 for lead in leads),
        "epochs_compared": len(leads),
        "median_lead": statistics.median(leads),
        "train_last": train.get(final, float("nan")),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run's metrics.csv")
    parser.add_argument("reference", type=Path, help="the metrics.csv it is compared with")
    parser.add_argument("--last", type=int, default=10, help="epochs the means are taken over")
    parser.add_argument("--since", type=int, default=1, help="the first epoch compared (counted from 1)")
    parser.add_argument("--until", type=int, default=None, help="the last epoch compared (counted from 1)")
    parser.add_argument(
        "--other-data", action="store_true", help="compare runs whose config.yaml names other validation data"
    )
    args = parser.parse_args(argv)
    for path in (args.run, args.reference):
        if not path.is_file():
            raise SystemExit(f"compare_runs: {path} does not exist; pass a run's metrics.csv")
    if not args.other_data:
        check_same_data(args.run, args.reference)
    for key, value in compare(args.run, args.reference, args.last, args.since, args.until).items():
        print(f"{key:22s} {value:.4f}" if isinstance(value, float) else f"{key:22s} {value}")


if __name__ == "__main__":
    main()
