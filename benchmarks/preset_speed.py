"""Training wall time of the default job with a trainer preset against without it, as a ratio of
medians (runs interleaved in one process), with final accuracies.

    .venv/bin/python benchmarks/preset_speed.py --repeats 2                                  # bf16-mixed
    .venv/bin/python benchmarks/preset_speed.py --preset configs/trainer/bf16_compile.yaml   # bf16 + compile
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timing import DEFAULT_CONFIG, REPO, compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--preset", default=str(REPO / "configs" / "trainer" / "bf16.yaml"))
    parser.add_argument("--repeats", type=int, default=2)
    options, extra = parser.parse_known_args()
    base = ["--config", options.config, *extra]
    preset = str((REPO / options.preset) if not Path(options.preset).is_absolute() else options.preset)
    compare(base, [*base, "--config", preset], options.repeats, ("fp32", Path(preset).stem))


if __name__ == "__main__":
    main()
