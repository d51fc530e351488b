"""Images per second of an ImageNet-shaped folder of JPEGs through each input path, beside the training steps
they feed: ``benchmarks/results/input_path_<device>.json``.

    .venv/bin/python -m benchmarks.input_path                       # on a GPU: 1,024 images, batch 256, 16 workers
    .venv/bin/python -m benchmarks.input_path --images 64 --batch 8 --workers 2 --batches 6 --steps 2  # a CPU

In one run:

1. **The folder**: ``--images`` JPEGs written once into ``--folder`` (quality 90) in two classes, shaped like
   ImageNet's: most 500 pixels on the long side, landscape three times as often as portrait, the short side
   drawn from 375 (most), 333, 281 and 400-499, a few squares and a few larger photos. Pixels have natural-image
   statistics rather than noise: a luminance field with a 1/f^1.15 amplitude spectrum (random phases) and two
   weaker, smoother colour-difference fields, which gives about 110 KB a file (the mean is reported).
2. **timm's PIL path**: ``ImageFolderDataModule`` (decode ``cpu``: each worker decodes, crops, flips and
   normalises with timm's transforms) at 224 pixels with ``--workers`` workers: images/s over the folder after the
   first batch, the batches moved to the device.
3. **The device path**: the same DataModule with decode ``device``: workers read bytes, each batch is decoded
   and transformed on the device (:mod:`crate.data.device_decode`): images/s, the device synchronised.
   Beside it, each of its stages alone (``device_stages``): the workers reading bytes, the decode of one
   resident batch, and the training transform of that batch decoded; the slowest bounds the path.
4. **The bare training step** of each ``--models`` model on one resident batch (bf16 autocast and
   ``torch.compile`` on a GPU, fp32 eager on a CPU; AdamW): ms and images/s.
5. **Fed**: the same step fed by each path (next batch, its transform, the step), images/s, and fed/resident,
   the share of the resident step's rate that the path keeps.

On a CPU the loader's workers and the step share the same cores, so the fed figures there say little about a
GPU machine; the file records them with the machine's description.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from benchmarks.common import environment, training_step

REPO = Path(__file__).resolve().parents[1]

MODELS = ("crate_tiny_patch16_224", "crate_base_patch16_224")
SPECTRUM = 1.15  # amplitude ~ 1/f^SPECTRUM: natural images lie near 1


def _field(rng: np.random.Generator, height: int, width: int, exponent: float) -> np.ndarray:
    """A zero-mean, unit-variance random field whose amplitude spectrum falls as 1/f^exponent."""
    fy, fx = np.fft.fftfreq(height)[:, None], np.fft.rfftfreq(width)[None, :]
    frequency = np.hypot(fx, fy)
    frequency[0, 0] = 1.0
    spectrum = frequency**-exponent * np.exp(2j * np.pi * rng.random(frequency.shape))
    field = np.fft.irfft2(spectrum, s=(height, width))
    return (field - field.mean()) / field.std()


def natural_image(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """An RGB image with a 1/f luminance field and two smoother, weaker colour-difference fields."""
    lum = _field(rng, height, width, SPECTRUM)
    red_green, blue_yellow = (0.35 * _field(rng, height, width, SPECTRUM + 0.3) for _ in range(2))
    rgb = np.stack([lum + red_green, lum - 0.5 * red_green + blue_yellow, lum - 0.5 * red_green - blue_yellow], -1)
    return Image.fromarray((rgb * 55 + 115).clip(0, 255).astype(np.uint8))


def imagenet_size(rng: np.random.Generator) -> tuple[int, int]:
    """``(width, height)`` drawn like ImageNet's photos (module docstring)."""
    if rng.random() < 0.05:  # a larger photo
        long_side = int(rng.integers(800, 1400))
        return long_side, int(long_side * 0.75)
    if rng.random() < 0.05:
        return 500, 500
    short = int(rng.choice([375, 333, 281, int(rng.integers(400, 500))], p=[0.6, 0.2, 0.1, 0.1]))
    return (500, short) if rng.random() < 0.75 else (short, 500)


def _write_one(path: Path, seed: tuple[int, ...]) -> None:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    natural_image(rng, *imagenet_size(rng)[::-1]).save(buffer, "JPEG", quality=90)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def write_folder(root: Path, count: int, seed: int = 0, processes: int = 1) -> dict[str, float]:
    """``count`` JPEGs in ``root/train/{a,b}`` and 16 in ``root/val/{a,b}``, each drawn from its own seed, in
    ``processes`` processes; a folder already holding ``count`` training images is kept."""
    files = sorted(root.glob("train/*/*.jpg"))
    if len(files) != count:
        jobs = [
            (root / split / "ab"[index % 2] / f"{index:05d}.jpg", (seed, split == "val", index))
            for split, n in (("train", count), ("val", 16))
            for index in range(n)
        ]
        with ProcessPoolExecutor(max(processes, 1)) as pool:
            list(pool.map(_write_one, *zip(*jobs, strict=True)))
        files = sorted(root.glob("train/*/*.jpg"))
    sizes = [Image.open(f).size for f in files]
    return {
        "images": len(files),
        "mean_kb": round(float(np.mean([f.stat().st_size for f in files])) / 1000, 1),
        "median_long_side": float(np.median([max(size) for size in sizes])),
        "median_short_side": float(np.median([min(size) for size in sizes])),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _batches(data: Any, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The training batches of a DataModule, on ``device``, ready for the model (either input path)."""
    from crate.data import decode_batch

    for batch in data.train_dataloader():
        if isinstance(batch, dict):  # the device path
            images = decode_batch(batch["payloads"], batch["paths"], device)
            yield data.device_transform.train(images, batch["seeds"].tolist()), batch["labels"].to(device)
        else:
            images, labels = batch[0], batch[1]
            yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def loader_rate(data: Any, device: torch.device, batches: int) -> float:
    """Images/s of ``batches`` training batches after the first (worker start-up), the device synchronised."""
    stream = _batches(data, device)
    next(stream)
    _sync(device)
    start, seen = time.perf_counter(), 0
    for _ in range(batches):
        try:
            images, _ = next(stream)
        except StopIteration:
            stream = _batches(data, device)
            images, _ = next(stream)
        seen += len(images)
    _sync(device)
    return seen / (time.perf_counter() - start)


def device_stages(data: Any, device: torch.device, batches: int) -> dict[str, float]:
    """Images/s of each stage of the device path on its own, to say which one bounds it: the workers reading
    bytes (the batches iterated, nothing decoded), the decode of one resident batch of payloads
    (:func:`crate.data.decode_batch`, repeated ``batches`` times), and the training transform of that batch once
    decoded (:meth:`crate.data.DeviceImageTransform.train`, repeated), the device synchronised after each
    stage's timing; and the transform's host time per image (``transform_host_us_per_image``, on 16-pixel
    images, where the arithmetic is negligible): at 8,000 images/s the main process has 125 us an image."""
    from crate.data import decode_batch

    loader = iter(data.train_dataloader())
    first = next(loader)
    start, seen = time.perf_counter(), 0
    for _ in range(batches):
        try:
            seen += len(next(loader)["paths"])
        except StopIteration:
            loader = iter(data.train_dataloader())
            seen += len(next(loader)["paths"])
    rates = {"bytes_images_s": seen / (time.perf_counter() - start)}
    payloads, paths, seeds = first["payloads"], first["paths"], first["seeds"].tolist()
    images = decode_batch(payloads, paths, device)  # warm-up: the decoder's first call
    _sync(device)
    start = time.perf_counter()
    for _ in range(batches):
        images = decode_batch(payloads, paths, device)
    _sync(device)
    rates["decode_images_s"] = batches * len(payloads) / (time.perf_counter() - start)
    data.device_transform.train(images, seeds)
    _sync(device)
    start = time.perf_counter()
    for _ in range(batches):
        data.device_transform.train(images, seeds)
    _sync(device)
    rates["transform_images_s"] = batches * len(payloads) / (time.perf_counter() - start)
    # The same transform on 16x16 images to 8x8: the arithmetic is negligible, what is left is the host's
    # dispatch per image (crop draws, per-image resize and flip calls), which no device can overlap.
    tiny_transform = dataclasses.replace(data.device_transform, size=8)
    tiny = [torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8, device=device) for _ in payloads]
    tiny_transform.train(tiny, seeds)
    _sync(device)
    start = time.perf_counter()
    for _ in range(batches):
        tiny_transform.train(tiny, seeds)
    _sync(device)
    rates["transform_host_us_per_image"] = 1e6 * (time.perf_counter() - start) / (batches * len(payloads))
    return {key: round(value, 1) for key, value in rates.items()}


def step_rates(step: Callable, data: dict[str, Any], batch: int, steps: int, device: torch.device) -> dict[str, float]:
    """Images/s of the step on a resident batch and fed by each input path."""
    images = torch.randn(batch, 3, 224, 224, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    for _ in range(3):  # compilation, warm-up
        step(images, labels)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step(images, labels)
    _sync(device)
    rates = {"resident_images_s": batch * steps / (time.perf_counter() - start)}
    for path, module in data.items():
        stream = _batches(module, device)
        step(*next(stream))  # workers started
        _sync(device)
        start, seen = time.perf_counter(), 0
        for _ in range(steps):
            try:
                fed = next(stream)
            except StopIteration:
                stream = _batches(module, device)
                fed = next(stream)
            step(*fed)
            seen += len(fed[0])
        _sync(device)
        rates[f"fed_{path}_images_s"] = seen / (time.perf_counter() - start)
        rates[f"fed_{path}_vs_resident"] = rates[f"fed_{path}_images_s"] / rates["resident_images_s"]
    return {key: round(value, 3) for key, value in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", default="data/input_path_jpegs", help="where the synthetic folder is written")
    parser.add_argument("--images", type=int, default=1024, help="training images in the folder")
    parser.add_argument("--batch", type=int, default=256, help="batch size (the recipes' per-device batch)")
    parser.add_argument("--workers", type=int, default=16, help="DataLoader workers of both paths")
    parser.add_argument("--batches", type=int, default=8, help="batches timed per input path")
    parser.add_argument("--steps", type=int, default=10, help="training steps timed per model and path")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models whose step is fed")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results"), help="folder for the JSON")
    parser.add_argument("--report", default=None, help="the JSON's file name (default input_path_<device>.json)")
    parser.add_argument("--dry-run", action="store_true", help="tiny limits on the CPU (the GPU queue's dry run)")
    args = parser.parse_args()
    if args.dry_run:
        args.images, args.batch, args.workers, args.batches, args.steps = 8, 4, 0, 1, 1
        args.models, args.folder = MODELS[0], tempfile.mkdtemp(prefix="input_path_dry_")
    from crate.lit.data import Augmentation, ImageFolderDataModule

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result: dict[str, Any] = {
        "environment": environment(),
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "folder": write_folder(Path(args.folder), args.images, processes=args.workers),
        "batch_size": args.batch,
        "workers": args.workers,
    }
    settings = dict(img_size=224, in_chans=3, batch_size=args.batch, num_workers=args.workers, class_weights=None)
    photo = Augmentation(color_jitter=0.0)  # the device path does not jitter colour: neither path does here
    data = {
        path: ImageFolderDataModule(args.folder, augmentation=photo, decode=path, **settings)
        for path in ("cpu", "device")
    }
    for path, module in data.items():
        module.setup("fit")
        result[f"loader_{path}_images_s"] = round(loader_rate(module, device, args.batches), 1)
        print(f"{path} path: {result[f'loader_{path}_images_s']} images/s", flush=True)
    result["device_stages"] = device_stages(data["device"], device, args.batches)
    print(f"device path by stage: {result['device_stages']} images/s", flush=True)
    result["steps"] = {}
    for model_name in args.models.split(","):
        step = training_step(model_name, 1000, device, "default" if device.type == "cuda" else None)
        result["steps"][model_name] = step_rates(step, data, args.batch, args.steps, device)
        print(model_name, result["steps"][model_name], flush=True)
    tag = (
        "cpu"
        if device.type == "cpu"
        else re.sub(r"[^a-z0-9]+", "_", result["environment"]["device"].lower()).strip("_")
    )
    out = Path(args.out) / (args.report or f"input_path_{'dry_run_' if args.dry_run else ''}{tag}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
