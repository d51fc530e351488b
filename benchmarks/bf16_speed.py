"""Training wall time of the default job in bf16-mixed against fp32, as a ratio, with final accuracies.

.venv/bin/python benchmarks/bf16_speed.py --repeats 2
"""

from __future__ import annotations

import argparse

from timing import DEFAULT_CONFIG, REPO, compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--repeats", type=int, default=2)
    options, extra = parser.parse_known_args()
    base = ["--config", options.config, *extra]
    bf16 = ["--config", str(REPO / "configs" / "trainer" / "bf16.yaml")]
    compare(base, [*base, *bf16], options.repeats, ("fp32", "bf16"))


if __name__ == "__main__":
    main()
