"""Accuracy and training time of the default job, and of recipe variants given as train.py arguments.

    cd benchmarks && ../.venv/bin/python default_job.py                    # the default job as configured
    cd benchmarks && ../.venv/bin/python default_job.py --trainer.max_epochs 40 --model.ema_decay null

Prints the seconds spent in ``trainer.fit`` (setup not counted) and the final validation accuracy.
"""

from __future__ import annotations

import sys

from benchmarks.common import DEFAULT_CONFIG, fit_seconds


def main() -> None:
    seconds, metrics = fit_seconds(["--config", DEFAULT_CONFIG, *sys.argv[1:]])
    print(
        f"default job {' '.join(sys.argv[1:])}: {seconds:.1f} s in trainer.fit, final val/acc {metrics['val/acc']:.4f}"
    )


if __name__ == "__main__":
    main()
