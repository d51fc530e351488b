"""What the layer-objective term (``--model.objective_weight``) costs a training step, as a ratio against the same
step without it, measured in one run: the two steps timed in turn, step by step (medians of 30 steps each after 5
warm-up steps, the machine's threads).

    .venv/bin/python -m benchmarks.layer_objective_cost

Rows: the digits' default job (crate_nano, 16 px, 1 channel, batch 64, fp32) and a CIFAR-size step (32 px, 3
channels, batch 128) in fp32 and under bf16 autocast (the CIFAR-10 recipe's precision; the term itself stays
float32), each with the term read on 8, 4 and 2 images of the batch (``--model.objective_images``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import crate  # noqa: F401
from crate.lit import ImageClassifier


def _step(weight: float, images: int, size: int, chans: int, batch: int, bf16: bool) -> Callable[[], None]:
    """One training step of crate_nano (forward, the term where ``weight`` > 0, backward, AdamW), as a call."""
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

    return step


def ratio(images: int, size: int, chans: int, batch: int, bf16: bool, steps: int = 30) -> tuple[float, float]:
    """The step without the term (median ms) and the ratio of the step with it to that, the two timed in turn,
    step by step, so that a slow spell of the machine falls on both."""
    plain, with_term = _step(0.0, 0, size, chans, batch, bf16), _step(0.01, images, size, chans, batch, bf16)
    for _ in range(5):
        plain(), with_term()
    times: dict[Callable[[], None], list[float]] = {plain: [], with_term: []}
    for _ in range(steps):
        for step in (plain, with_term):
            start = time.perf_counter()
            step()
            times[step].append(time.perf_counter() - start)
    base, term = (statistics.median(times[step]) for step in (plain, with_term))
    return 1000 * base, term / base


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no settings
    print("| step | without the term (ms) | term on 8 images | on 4 | on 2 |")
    print("|---|---|---|---|---|")
    rows = (
        ("digits, 16 px, batch 64, fp32", 16, 1, 64, False),
        ("32 px RGB, batch 128, fp32", 32, 3, 128, False),
        ("32 px RGB, batch 128, bf16 autocast", 32, 3, 128, True),
    )
    for label, size, chans, batch, bf16 in rows:
        measured = [ratio(images, size, chans, batch, bf16) for images in (8, 4, 2)]
        base = statistics.median(ms for ms, _ in measured)
        ratios = [r for _, r in measured]
        print(f"| {label} | {base:.1f} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")


if __name__ == "__main__":
    main()
