"""Training wall time of the default job with and without the CodingRateMonitor, as a ratio.

    .venv/bin/python benchmarks/monitor_overhead.py --repeats 3

Runs are interleaved (off, on, off, on, ...) in one process so drift of a noisy machine hits both
sides alike; prints every run and the ratio of the medians (with monitor / without).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from crate.lit import cli_main

REPO = Path(__file__).resolve().parents[1]


def fit_seconds(config: str, monitor: bool, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as log_root:
        args = ["--config", config, "--log_root", log_root, "--rate_monitor.enabled", str(monitor).lower()]
        args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", *extra]
        cli = cli_main(args, run=False)
        start = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "crate_nano_digits.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="further train.py overrides, e.g. --trainer.max_epochs=10")
    options = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(options.repeats):
        for monitor in (False, True):
            seconds = fit_seconds(options.config, monitor, options.extra)
            times[monitor].append(seconds)
            print(f"run {repeat}: monitor={'on ' if monitor else 'off'} {seconds:7.2f} s", flush=True)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"median without monitor {off:.2f} s, with monitor {on:.2f} s, ratio {on / off:.4f}")


if __name__ == "__main__":
    main()
