"""What the layer-objective term (``--model.objective_weight``) costs a training step, as a ratio against the same
step without it, measured in one run (median of 30 steps after 5 warm-up steps, the machine's threads).

    .venv/bin/python benchmarks/layer_objective_cost.py

Rows: the digits' default job (crate_nano, 16 px, 1 channel, batch 64, fp32) and a CIFAR-size step (32 px, 3
channels, batch 128) in fp32 and under bf16 autocast (the CIFAR-10 recipe's precision; the term itself stays
float32), each with the term read on 8, 4 and 2 images of the batch (``--model.objective_images``).
"""

from __future__ import annotations

import time

import torch

import crate  # noqa: F401
from crate.lit import ImageClassifier


def step_ms(weight: float, images: int, size: int, chans: int, batch: int, bf16: bool = False) -> float:
    torch.manual_seed(0)
    module = ImageClassifier(
        "crate_nano_patch4_32", in_chans=chans, img_size=size, objective_weight=weight, objective_images=max(images, 1)
    )
    x, y = torch.randn(batch, chans, size, size), torch.randint(0, 10, (batch,))
    optimizer = torch.optim.AdamW(module.parameters(), 1e-3)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(module(x), y)
            if module.layer_objective is not None:
                loss = loss + weight * module.layer_objective.term()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(30):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def main() -> None:
    print("| step | without the term (ms) | term on 8 images | on 4 | on 2 |")
    print("|---|---|---|---|---|")
    rows = (
        ("digits, 16 px, batch 64, fp32", 16, 1, 64, False),
        ("32 px RGB, batch 128, fp32", 32, 3, 128, False),
        ("32 px RGB, batch 128, bf16 autocast", 32, 3, 128, True),
    )
    for label, size, chans, batch, bf16 in rows:
        base = step_ms(0.0, 0, size, chans, batch, bf16)
        ratios = [step_ms(0.01, images, size, chans, batch, bf16) / base for images in (8, 4, 2)]
        print(f"| {label} | {base:.1f} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")


if __name__ == "__main__":
    main()
