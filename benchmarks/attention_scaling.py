"""``make attention-scaling``: forward + backward time of one attention layer against the number of tokens.

    .venv/bin/python -m benchmarks.attention_scaling                    # 64 ... 4096 tokens
    .venv/bin/python -m benchmarks.attention_scaling --tokens 64 256 --repeats 3 --out /tmp/scaling

One layer of width d = 384 with 6 heads (CRATE-T's) on a batch of one sequence of N tokens, fp32, for:
softmax MSSA (CRATE's attention, the reference), TSSA (ToST), CBSA (CBT: 8 x 8 representatives, the authors'
pooling, which takes any N), linear kernel attention (elu + 1) and
Attention-SH (half the heads on keys and values pooled by 2), plus timm's softmax attention, the layout
the linear and SH layers share (three projections where MSSA and TSSA have one). At each N the layers are
timed interleaved, medians of the repeats, and reported as a ratio to softmax MSSA at the same N
(below 1: faster). Writes ``docs/attention_scaling.{md,png}`` and ``benchmarks/results/attention_scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from matplotlib.figure import Figure
from timm.layers import Attention
from torch import nn

from benchmarks.common import REPO
from crate.layers import CBSA, MSSA, TSSA, AttentionSH, LinearKernelAttention

DIM, HEADS = 384, 6
LAYERS: dict[str, Callable[[], nn.Module]] = {
    "softmax MSSA": lambda: MSSA(DIM, HEADS),
    "TSSA": lambda: TSSA(DIM, HEADS, qkv_bias=True),
    "CBSA (64 representatives)": lambda: CBSA(DIM, HEADS),
    "linear (elu+1)": lambda: LinearKernelAttention(DIM, num_heads=HEADS, qkv_bias=True),
    "Attention-SH": lambda: AttentionSH(DIM, num_heads=HEADS, qkv_bias=True),
    "softmax (timm Attention)": lambda: Attention(DIM, num_heads=HEADS, qkv_bias=True),
}
REFERENCE = "softmax MSSA"


def step_seconds(layer: nn.Module, x: torch.Tensor, steps: int) -> float:
    """Mean seconds of forward + backward over ``steps`` calls."""
    start = time.perf_counter()
    for _ in range(steps):
        layer(x).sum().backward()
    return (time.perf_counter() - start) / steps


def measure(tokens: list[int], repeats: int) -> dict[str, dict[int, float]]:
    """Median seconds per layer and size; the layers timed interleaved at each size."""
    torch.manual_seed(0)
    layers = {name: build() for name, build in LAYERS.items()}
    seconds: dict[str, dict[int, float]] = {name: {} for name in layers}
    for n in tokens:
        x = torch.randn(1, n, DIM, requires_grad=True)
        steps = max(1, min(20, 4096 // n))
        for layer in layers.values():
            step_seconds(layer, x, 1)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in layers}
        for _ in range(repeats):
            for name, layer in layers.items():
                times[name].append(step_seconds(layer, x, steps))
        for name in layers:
            seconds[name][n] = statistics.median(times[name])
        ratios = ", ".join(f"{name} {seconds[name][n] / seconds[REFERENCE][n]:.2f}" for name in layers)
        print(f"N={n}: {REFERENCE} {1e3 * seconds[REFERENCE][n]:.2f} ms; ratios {ratios}", flush=True)
    return seconds


def crossover(seconds: dict[str, dict[int, float]], name: str) -> int | None:
    """The smallest measured N from which ``name`` stays faster than the reference."""
    sizes = sorted(seconds[REFERENCE])
    for index, n in enumerate(sizes):
        if all(seconds[name][m] < seconds[REFERENCE][m] for m in sizes[index:]):
            return n
    return None


def figure(seconds: dict[str, dict[int, float]], path: Path) -> None:
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for name, by_size in seconds.items():
        sizes = sorted(by_size)
        left.plot(sizes, [1e3 * by_size[n] for n in sizes], marker="o", label=name)
        right.plot(sizes, [by_size[n] / seconds[REFERENCE][n] for n in sizes], marker="o", label=name)
    left.set(xscale="log", yscale="log", xlabel="tokens N", ylabel="ms per forward + backward", title="one layer")
    right.set(xscale="log", yscale="log", xlabel="tokens N", ylabel=f"time / {REFERENCE}", title="ratio")
    right.axhline(1.0, color="gray", lw=0.8)
    left.legend(fontsize=8)
    fig.suptitle(f"attention layer, d = {DIM}, {HEADS} heads, batch 1, fp32, {torch.get_num_threads()} CPU threads")
    fig.savefig(path, dpi=110)


def markdown(seconds: dict[str, dict[int, float]], command: str) -> str:
    sizes = sorted(seconds[REFERENCE])
    lines = [
        "# Attention cost against the number of tokens\n",
        f"Written by `{command}` (`make attention-scaling`) on {time.strftime('%Y-%m-%d')}, "
        f"{torch.get_num_threads()} CPU threads. One layer, d = {DIM}, {HEADS} heads, batch 1, fp32, forward + "
        f"backward; time as a ratio to {REFERENCE} at the same N (below 1: faster), medians of interleaved "
        f"repeats. Absolute time of {REFERENCE} in the last row.\n",
        "![scaling](attention_scaling.png)\n",
        "| layer | " + " | ".join(f"N={n}" for n in sizes) + " | faster than softmax MSSA from |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for name, by_size in seconds.items():
        ratios = " | ".join(f"{by_size[n] / seconds[REFERENCE][n]:.2f}" for n in sizes)
        first = crossover(seconds, name) if name != REFERENCE else None
        lines.append(f"| {name} | {ratios} | {'-' if name == REFERENCE else (first or 'never (measured)')} |")
    lines.append(f"| {REFERENCE}, ms | " + " | ".join(f"{1e3 * seconds[REFERENCE][n]:.2f}" for n in sizes) + " | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "docs"), help="folder for attention_scaling.{md,png}")
    args = parser.parse_args()
    seconds = measure(args.tokens, args.repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figure(seconds, out / "attention_scaling.png")
    command = " ".join(["python", "-m", "benchmarks.attention_scaling", *sys.argv[1:]])
    (out / "attention_scaling.md").write_text(markdown(seconds, command))
    results = REPO / "benchmarks" / "results" / "attention_scaling.json"
    if out == REPO / "docs":
        results.write_text(json.dumps({"dim": DIM, "heads": HEADS, "seconds": seconds}, indent=1))
    print((out / "attention_scaling.md").read_text())


if __name__ == "__main__":
    main()
