"""What the benchmarks share: the repository's root, the default job's config, one way to time a train.py fit
in this process, and the record of the machine a figure was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

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


def environment() -> dict[str, Any]:
    """The machine and library versions a figure was measured with (the GPU's name, memory and driver where
    there is one, else the CPU's)."""
    import lightning
    import timm
    import torchmetrics

    report: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": lightning.__version__,
        "timm": timm.__version__,
        "torchmetrics": torchmetrics.__version__,
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        report.update(device=properties.name, multiprocessors=properties.multi_processor_count)
        report["memory_gib"] = round(properties.total_memory / 2**30, 1)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True)
        report["driver"] = smi.stdout.decode().strip()
    else:
        report["device"] = f"cpu ({platform.processor() or platform.machine()})"
    return report
