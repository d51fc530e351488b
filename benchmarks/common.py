"""What the benchmarks share: the repository's root, the default job's config, one way to time a train.py fit
in this process, one bare training step, one image folder of seeded pixels (the GPU jobs' dry runs and the tests
use it), and the record of the machine a figure was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = str(REPO / "configs" / "crate_nano_digits.yaml")


def fit_seconds(args: list[str]) -> tuple[float, dict[str, float]]:
    """Seconds spent in ``trainer.fit`` for the given train.py arguments, and the final logged metrics."""
    from crate.lit import cli_main

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


def training_step(
    model_name: str, num_classes: int, device: torch.device, compile_mode: str | None = None
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One bare optimiser step of ``model_name`` as a function of a batch: AdamW (fused on a GPU), label-smoothed
    cross-entropy, bf16 autocast on a GPU, ``torch.compile`` with ``compile_mode`` where one is given; no data
    loading, logging or callbacks (what a training loop adds is measured against it)."""
    import timm

    import crate  # noqa: F401  (registers the zoo with timm)

    torch.manual_seed(0)
    model = timm.create_model(model_name, num_classes=num_classes).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    forward = torch.compile(model, mode=compile_mode) if compile_mode else model
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = criterion(forward(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def write_image_folder(
    root: Path,
    classes: int | Sequence[str] = 2,
    per_class: int = 6,
    *,
    val_per_class: int | None = None,
    size: int | tuple[int, int] = (20, 24),
    suffix: str = ".png",
    gray: bool = True,
    seed: int = 0,
) -> Path:
    """An image folder laid out as a user's: ``root/{train,val}/<class>/<i><suffix>`` of seeded random pixels.
    ``classes``: a count (folders ``class_0``, ``class_1``, ...) or the class names; ``size``: a side or (height,
    width); with ``gray`` every other image is grayscale and the rest RGB (a user's folder mixes modes), else all
    RGB; ``val_per_class`` images a class in ``val/`` (default ``per_class``). Returns ``root``."""
    names = [f"class_{c}" for c in range(classes)] if isinstance(classes, int) else list(classes)
    height, width = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("val", per_class if val_per_class is None else val_per_class)):
        for name in names:
            folder = Path(root) / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                if gray:
                    image = Image.fromarray(rng.integers(0, 256, size=(height, width), dtype=np.uint8), mode="L")
                    image = image.convert("RGB") if i % 2 else image
                else:
                    image = Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))
                image.save(folder / f"{i}{suffix}")
    return Path(root)


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
