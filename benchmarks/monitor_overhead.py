"""Training wall time of the default job with and without the CodingRateMonitor, as a ratio.

    .venv/bin/python benchmarks/monitor_overhead.py --repeats 3

Runs alternate (off, on, off, on, ...) in one process so drift of a noisy machine hits both sides alike.
"""

from __future__ import annotations

import argparse

from timing import DEFAULT_CONFIG, compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--repeats", type=int, default=3)
    options, extra = parser.parse_known_args()
    base = ["--config", options.config, *extra]
    compare(
        [*base, "--rate_monitor.enabled", "false"],
        [*base, "--rate_monitor.enabled", "true"],
        options.repeats,
        ("without", "with"),
    )


if __name__ == "__main__":
    main()
