"""Wall time of train.py fits in one process, two settings interleaved, reported as a ratio of medians."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from crate.lit import cli_main

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = str(REPO / "configs" / "crate_nano_digits.yaml")


def fit_seconds(args: list[str]) -> tuple[float, dict[str, float]]:
    """Seconds spent in ``trainer.fit`` for the given train.py arguments, and the final logged metrics."""
    with tempfile.TemporaryDirectory() as log_root:
        quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
        cli = cli_main([*args, "--log_root", log_root, *quiet], run=False)
        start = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        seconds = time.perf_counter() - start
        metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
        monitor = next((c for c in cli.trainer.callbacks if type(c).__name__ == "CodingRateMonitor"), None)
        if monitor is not None and monitor.enabled:
            metrics["monitor_seconds"] = monitor.seconds
    return seconds, metrics


def compare(reference: list[str], candidate: list[str], repeats: int, names: tuple[str, str]) -> float:
    """Run reference and candidate alternately ``repeats`` times each; print runs and the median ratio."""
    times: dict[str, list[float]] = {names[0]: [], names[1]: []}
    for repeat in range(repeats):
        for name, args in zip(names, (reference, candidate), strict=True):
            seconds, metrics = fit_seconds(args)
            times[name].append(seconds)
            own = f"  (monitor's own time {metrics['monitor_seconds']:.2f} s)" if "monitor_seconds" in metrics else ""
            print(f"run {repeat}: {name:>10} {seconds:7.2f} s  val/acc {metrics.get('val/acc', float('nan')):.4f}{own}")
    ref, cand = statistics.median(times[names[0]]), statistics.median(times[names[1]])
    ratio = cand / ref
    print(f"median {names[0]} {ref:.2f} s, {names[1]} {cand:.2f} s, ratio {names[1]}/{names[0]} = {ratio:.4f}")
    return ratio
