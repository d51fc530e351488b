"""The tensor-store data path against the PIL image-folder path, and whether it keeps the model fed.

In one run, on one image folder (CIFAR-10's copy by default, ``make cifar10-data``):

- ``path_images_per_s``: training batches of the store path, from the loader to augmented, normalised
  tensors, with the PIL path's augmentation (padded crop and flip); ``..._recipe_augmentation``: the same
  with the recipe's (its TrivialAugment-style policy included);
- ``pil_images_per_s``: the same folder through ``ImageFolderDataModule`` (PIL decoding and timm's
  per-image transforms, padded crop and flip), the faster of 2 loader workers and the main process;
- ``step_fed_ratio``: training steps of ``crate_micro_patch4_32`` (bf16 autocast where the CPU has bf16
  instructions, fp32 where it has not: ``--precision``; AdamW, the recipe's batch)
  each fed a new batch by the store path (the recipe's augmentation), over the same steps on one batch
  already in memory. The kinds alternate step by step (resident, fed, fed with crop and flip only, again), so
  that the machine's drift falls on all alike, and each step is timed with its batch's preparation: the ratio
  is the resident step's median time over the fed step's; ``step_fed_ratio_crop_flip`` the same fed with
  padded crop and flip only. (Blocks of several steps per kind were tried first: on a shared 2-core machine
  their spread, 0.79-1.00 from block to block, hid an effect of a few percent.)

    .venv/bin/python benchmarks/data_throughput.py            # writes benchmarks/results/data_throughput.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import timm
import torch
import yaml

import crate  # noqa: F401 - registers the zoo
from crate.lit.cpu_precision import cpu_has_native_bf16
from crate.lit.data import Augmentation, BatchAugmentation, ImageFolderDataModule, StoredImageFolderDataModule

REPO = Path(__file__).resolve().parents[1]


def _recipe_augmentation(config: Path) -> tuple[BatchAugmentation, int]:
    data = yaml.safe_load(config.read_text())["data"]["init_args"]
    return BatchAugmentation(**data.get("augmentation", {})), int(data.get("batch_size", 128))


def _images_per_s(batches, count: int, prepare=lambda b: b) -> float:
    iterator = iter(batches)
    prepare(next(iterator))  # the first batch pays for starting workers
    seen, start = 0, time.perf_counter()
    for _ in range(count):
        images, _ = prepare(next(iterator))
        seen += len(images)
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(REPO / "data" / "cifar10"))
    parser.add_argument("--config", default=str(REPO / "configs" / "cifar10.yaml"), help="recipe (augmentation, batch)")
    parser.add_argument("--model", default="crate_micro_patch4_32")
    parser.add_argument("--batches", type=int, default=60, help="batches per throughput measurement")
    parser.add_argument("--steps", type=int, default=40, help="timed training steps of each kind (interleaved)")
    parser.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="auto: bf16 where the CPU has bf16 instructions",
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "data_throughput.json"))
    options = parser.parse_args()
    augmentation, batch_size = _recipe_augmentation(Path(options.config))

    model = timm.create_model(options.model, num_classes=10)
    stored = StoredImageFolderDataModule(options.root, img_size=32, batch_size=batch_size, augmentation=augmentation)
    stored.transforms_from(model)
    start = time.perf_counter()
    stored.setup("fit")
    store_seconds = time.perf_counter() - start
    prepare = lambda batch: stored.on_after_batch_transfer(batch, 0)  # noqa: E731
    recipe_rate = _images_per_s(stored.train_dataloader(), options.batches, prepare)
    print(f"store path, the recipe's augmentation: {recipe_rate:.0f} images/s (stores ready in {store_seconds:.1f} s)")
    stored.augmentation = BatchAugmentation(padding=4, hflip=0.5)  # the PIL path's augmentation below
    path_rate = _images_per_s(stored.train_dataloader(), options.batches, prepare)
    stored.augmentation = augmentation
    print(f"store path, padded crop and flip: {path_rate:.0f} images/s")

    pil_rates = {}
    for workers in (2, 0):
        pil = ImageFolderDataModule(
            options.root, img_size=32, batch_size=batch_size, num_workers=workers, augmentation=Augmentation(padding=4)
        )
        pil.transforms_from(model)
        pil.setup("fit")
        pil_rates[workers] = _images_per_s(pil.train_dataloader(), options.batches)
        print(f"PIL path, {workers} workers: {pil_rates[workers]:.0f} images/s")

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    bf16 = options.precision == "bf16" or (options.precision == "auto" and cpu_has_native_bf16())

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    loader = (batch for _ in itertools.count() for batch in stored.train_dataloader())  # epoch after epoch
    resident = prepare(next(loader))
    for _ in range(3):  # warm-up
        step(*resident)
    crop_flip = BatchAugmentation(padding=4, hflip=0.5)
    seconds: dict[str, list[float]] = {"resident": [], "fed": [], "fed_crop_flip": []}
    for _ in range(options.steps):
        for kind in seconds:
            stored.augmentation = crop_flip if kind == "fed_crop_flip" else augmentation
            start = time.perf_counter()
            step(*(resident if kind == "resident" else prepare(next(loader))))
            seconds[kind].append(time.perf_counter() - start)
    stored.augmentation = augmentation
    median = {kind: statistics.median(times) for kind, times in seconds.items()}
    fed_ratio, crop_flip_ratio = median["resident"] / median["fed"], median["resident"] / median["fed_crop_flip"]
    fed, held = batch_size / median["fed"], batch_size / median["resident"]
    print(f"{options.model} steps: fed {fed:.0f} images/s, resident {held:.0f} images/s, ratio {fed_ratio:.3f}")
    print(f"  fed with padded crop and flip only: ratio {crop_flip_ratio:.3f}")

    result = {
        "path_images_per_s": path_rate,
        "path_images_per_s_recipe_augmentation": recipe_rate,
        "pil_images_per_s": max(pil_rates.values()),
        "pil_images_per_s_by_workers": {str(k): v for k, v in pil_rates.items()},
        "path_over_pil": path_rate / max(pil_rates.values()),
        "step_fed_ratio": fed_ratio,
        "step_fed_images_per_s": fed,
        "step_resident_images_per_s": held,
        "step_fed_ratio_crop_flip": crop_flip_ratio,
        "step_seconds": seconds,
        "store_ready_s": store_seconds,
        "model": options.model,
        "batch_size": batch_size,
        "store_augmentation": asdict(augmentation),
        "path_augmentation": "padded crop (4) and horizontal flip, batched (as the PIL path's)",
        "pil_augmentation": "padded crop (4) and horizontal flip, timm's transforms per image",
        "precision": "bf16 autocast" if bf16 else "fp32",
        "cpu_has_native_bf16": cpu_has_native_bf16(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "root": options.root,
    }
    Path(options.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
