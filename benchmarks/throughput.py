"""Training-step and inference throughput of the zoo against a literal reference of the official layout.

    make bench        # .venv/bin/python -m benchmarks.throughput
    .venv/bin/python -m benchmarks.throughput --models crate_tiny_patch16_224 --dtypes bf16 --modes compiled

The reference is the independent re-implementation of the official CRATE (and CRATE-alpha) code in
``benchmarks/official_layouts.py``: explicit softmax attention (einsum, softmax, einsum), the three-matmul ISTA
step, the same weights (the zoo model is loaded from the reference's state dict through the zoo's
checkpoint conversion, and the logits are checked equal before anything is timed). The ViT twin has no
official CRATE layout of its own; it is timed against the official CRATE of the same size, so its ratio
says what CRATE's layout costs against a ViT.

Every (model, dtype, mode) case runs in its own Python process (a case measured after others in one
process inherits their allocator state and compiled-code caches). Within a case the zoo model and its
reference run interleaved, ``--repeats`` times ``--steps`` steps each; the figures are medians. A training
step is forward, cross-entropy, backward and an AdamW step (torch's fused AdamW, as the zoo's recipes use,
for both models); inference is a forward pass without gradients in eval mode. bf16 is CPU/CUDA autocast
(weights and optimizer in float32). Compiled means ``torch.compile`` of both models (compilation is done
in warm-up steps, not timed); a compiled row also times the reference uncompiled, as the official code
runs (``vs ref eager``), in the same interleaved rounds.

Model FLOPs utilisation (MFU): the model FLOPs of one training step, three times the forward pass's matmul
FLOPs counted by ``torch.utils.flop_counter`` with the attention formula of ``flops.py``, the same on every
torch release (the backward of a matmul is two matmuls of its size; the optimizer is not counted), per
second, over the matmul peak of the same dtype (a square matmul of ``--peak-size``, timed ``--steps``
times in every round between the training steps it is compared with; the median of the rounds). Memory:
on CUDA the peak allocated; on CPU the bytes of the activations saved for the backward pass (what grows with batch and
depth), counted by a saved-tensors hook.

``--vit`` also times timm's ``VisionTransformer`` of the same width, depth, heads and tokens (MLP ratio 4)
in the same rounds, compiled or not like the zoo model (columns "vs timm ViT"). CRATE-S and CRATE-B at 224
are GPU cases (``--models crate_small_patch16_224,crate_base_patch16_224``); ``--batch`` sets the batch of
every case (128 on a GPU, where 16 leaves it idle).

Writes ``benchmarks/results/latest.json`` (or ``--out``) and prints a table; ``--timm-csv PATH`` also writes
the rows in the columns of timm's ``benchmark.py`` (``infer_samples_per_sec``, ``train_samples_per_sec``,
``*_step_time`` in ms, ``*_batch_size``, ``*_img_size``, ``infer_gmacs``, ``param_count`` in millions).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

import crate  # noqa: F401  (registers the zoo)
from benchmarks.flops import flop_counter
from benchmarks.official_layouts import OfficialCRATE, OfficialCrateAlpha
from crate.lit.optimization import fused_kwargs
from crate.models.convert import checkpoint_filter_fn

REPO = Path(__file__).resolve().parents[1]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Case:
    """A zoo model, the sizes of its official reference (and of timm's matched ViT), and its input batch."""

    name: str
    img: int
    patch: int
    dim: int
    depth: int
    heads: int
    classes: int
    batch: int
    reference: str = "crate"  # "crate" or "crate_alpha": which official layout
    same_model: bool = True  # the reference computes the same function (logits checked equal)

    def official(self) -> nn.Module:
        layout = OfficialCrateAlpha if self.reference == "crate_alpha" else OfficialCRATE
        return layout(
            image=self.img, patch=self.patch, classes=self.classes, dim=self.dim, depth=self.depth, heads=self.heads
        )

    def timm_vit(self) -> nn.Module:
        """timm's ViT of the same width, depth, heads and tokens (MLP ratio 4, timm's default)."""
        return VisionTransformer(
            img_size=self.img,
            patch_size=self.patch,
            num_classes=self.classes,
            embed_dim=self.dim,
            depth=self.depth,
            num_heads=self.heads,
        )


CASES = {
    case.name: case
    for case in (
        Case("crate_tiny_patch16_224", 224, 16, 384, 12, 6, 1000, batch=16),
        Case("crate_small_patch16_224", 224, 16, 576, 12, 12, 1000, batch=16),
        Case("crate_base_patch16_224", 224, 16, 768, 12, 12, 1000, batch=16),
        Case("crate_nano_patch4_32", 32, 4, 96, 4, 4, 10, batch=64),
        Case("crate_alpha_nano_patch4_32", 32, 4, 96, 4, 4, 10, batch=64, reference="crate_alpha"),
        Case("vit_nano_patch4_32", 32, 4, 96, 4, 4, 10, batch=64, same_model=False),
    )
}
# `make bench` on a CPU: the CPU-scale families and CRATE-T (S and B are for GPUs: --models ...).
CPU_DEFAULT = ["crate_tiny_patch16_224", "crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"]


def _build(case: Case, device: torch.device) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    reference = case.official().to(device)
    model = timm.create_model(case.name, num_classes=case.classes).to(device)
    if case.same_model:
        model.load_state_dict(checkpoint_filter_fn(reference.state_dict(), model))
        x = torch.randn(2, 3, case.img, case.img, device=device)
        model.eval(), reference.eval()
        with torch.no_grad():
            difference = (model(x) - reference(x)).abs().max().item()
        if difference > 1e-3:
            raise RuntimeError(f"{case.name}: zoo and reference logits differ by {difference:.2e}; not timing")
    return model, reference


def _autocast(device: torch.device, dtype: str) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Runner:
    """One model's training step or inference pass, ready to be timed."""

    def __init__(self, model: nn.Module, case: Case, device: torch.device, dtype: str, train: bool, compiled: bool):
        self.model, self.device, self.dtype, self.train = model.train(train), device, dtype, train
        self.step_model = torch.compile(model) if compiled else model
        generator = torch.Generator(device="cpu").manual_seed(1)
        self.x = torch.randn(case.batch, 3, case.img, case.img, generator=generator).to(device)
        self.y = torch.randint(0, case.classes, (case.batch,), generator=generator).to(device)
        params = list(model.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=1e-4, **fused_kwargs("adamw", params)) if train else None

    def step(self) -> None:
        if self.train:
            with _autocast(self.device, self.dtype):
                loss = F.cross_entropy(self.step_model(self.x), self.y)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad(), _autocast(self.device, self.dtype):
                self.step_model(self.x)

    def time(self, steps: int) -> float:
        _sync(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        _sync(self.device)
        return (time.perf_counter() - start) / steps


def _train_flops(model: nn.Module, case: Case, device: torch.device) -> int:
    """Model FLOPs of one training step: three times the matmul FLOPs of a training-mode forward pass.

    The backward pass of every matmul is two matmuls of the same size, so 3x forward is the step's model
    FLOPs by the usual convention; counting a backward pass directly would add what a kernel recomputes
    (SDPA's backward recomputes the scores) and count implementations rather than the model.
    """
    x = torch.randn(case.batch, 3, case.img, case.img, device=device)
    model.train()
    with torch.no_grad(), flop_counter() as counter:
        model(x)
    return 3 * counter.get_total_flops()


def _memory_bytes(runner: Runner) -> int:
    """Peak allocated (CUDA) or bytes saved for backward (CPU) in one training forward."""
    if runner.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        runner.step()
        return torch.cuda.max_memory_allocated()
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), _autocast(runner.device, runner.dtype):
        F.cross_entropy(runner.model(runner.x), runner.y).backward()
    runner.model.zero_grad(set_to_none=True)
    return sum(seen.values())


class MatmulPeak:
    """A square matmul of ``size`` in ``dtype``, timed like a runner; ``flop_s`` converts a time to FLOP/s."""

    def __init__(self, device: torch.device, dtype: str, size: int) -> None:
        self.device, self.size = device, size
        self.a = torch.randn(size, size, device=device, dtype=DTYPES[dtype])
        self.b = torch.randn(size, size, device=device, dtype=DTYPES[dtype])

    def time(self, steps: int) -> float:
        _sync(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.a @ self.b
        _sync(self.device)
        return (time.perf_counter() - start) / steps

    def flop_s(self, seconds: float) -> float:
        return 2 * self.size**3 / seconds


def measure(
    case: Case, device: torch.device, dtype: str, compiled: bool, steps: int, repeats: int, peak_size: int, vit: bool
) -> dict[str, Any]:
    torch._dynamo.reset()  # a fresh cache when called more than once in a process (compiled code is per function)
    model, reference = _build(case, device)
    flops = _train_flops(model, case, device)
    peak = MatmulPeak(device, dtype, peak_size)
    row: dict[str, Any] = {"model": case.name, "dtype": dtype, "mode": "compiled" if compiled else "eager"}
    row["batch"] = case.batch
    row["img_size"] = case.img
    row["param_count"] = sum(p.numel() for p in model.parameters())
    row["reference"] = "official layout" if case.same_model else "official CRATE of the same size"
    baseline = None
    if vit:
        torch.manual_seed(0)
        baseline = case.timm_vit().to(device)
        row["vit_train_gflop_per_step"] = _train_flops(baseline, case, device) / 1e9
    peaks: list[float] = []
    peak.time(1)
    for phase, train in (("train", True), ("infer", False)):
        runners = {"ours": Runner(model, case, device, dtype, train, compiled)}
        runners["reference"] = Runner(reference, case, device, dtype, train, compiled)
        if compiled:  # the official code as it ships: not compiled
            runners["reference_eager"] = Runner(reference, case, device, dtype, train, False)
        if baseline is not None:  # timm's ViT of the same size, compiled or not like the zoo model
            runners["vit"] = Runner(baseline, case, device, dtype, train, compiled)
        for runner in runners.values():  # warm-up (compilation happens here)
            runner.time(2)
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(repeats):
            for name, runner in runners.items():
                times[name].append(runner.time(steps))
            if train:  # the peak is timed between the steps it is compared with
                peaks.append(peak.flop_s(peak.time(steps)))
        median = {name: statistics.median(values) for name, values in times.items()}
        row[f"{phase}_img_s"] = case.batch / median["ours"]
        row[f"{phase}_reference_img_s"] = case.batch / median["reference"]
        row[f"{phase}_ratio"] = median["reference"] / median["ours"]
        if compiled:
            row[f"{phase}_reference_eager_img_s"] = case.batch / median["reference_eager"]
            row[f"{phase}_ratio_vs_reference_eager"] = median["reference_eager"] / median["ours"]
        if baseline is not None:
            row[f"{phase}_vit_img_s"] = case.batch / median["vit"]
            row[f"{phase}_ratio_vs_vit"] = median["vit"] / median["ours"]
        if train:
            row["matmul_peak_flop_s"] = statistics.median(peaks)
            row["train_mfu"] = flops / median["ours"] / row["matmul_peak_flop_s"]
            reference_mfu = flops / median["reference"] / row["matmul_peak_flop_s"]
            row["train_reference_mfu"] = reference_mfu if case.same_model else None
            row["train_gflop_per_step"] = flops / 1e9
            row["memory_mib"] = _memory_bytes(runners["ours"]) / 2**20
            row["reference_memory_mib"] = _memory_bytes(runners["reference"]) / 2**20
            if baseline is not None:
                row["vit_train_mfu"] = row["vit_train_gflop_per_step"] * 1e9 / median["vit"] / row["matmul_peak_flop_s"]
                row["vit_memory_mib"] = _memory_bytes(runners["vit"]) / 2**20
    return row


TIMM_COLUMNS = (
    "model",
    "dtype",
    "mode",
    "infer_samples_per_sec",
    "infer_step_time",
    "infer_batch_size",
    "infer_img_size",
    "infer_gmacs",
    "train_samples_per_sec",
    "train_step_time",
    "train_batch_size",
    "train_img_size",
    "param_count",
)


def timm_benchmark_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row in the columns of timm's ``benchmark.py`` CSV: samples/s, step time in ms, batch, image size,
    GMACs per sample of a forward pass (half the counted forward FLOPs), parameters in millions."""
    batch = row["batch"]
    forward_flops = row["train_gflop_per_step"] * 1e9 / 3  # the counted step is three forward passes
    return {
        "model": row["model"],
        "dtype": row["dtype"],
        "mode": row["mode"],
        "infer_samples_per_sec": round(row["infer_img_s"], 2),
        "infer_step_time": round(1000 * batch / row["infer_img_s"], 3),
        "infer_batch_size": batch,
        "infer_img_size": row["img_size"],
        "infer_gmacs": round(forward_flops / 2 / batch / 1e9, 4),
        "train_samples_per_sec": round(row["train_img_s"], 2),
        "train_step_time": round(1000 * batch / row["train_img_s"], 3),
        "train_batch_size": batch,
        "train_img_size": row["img_size"],
        "param_count": round(row["param_count"] / 1e6, 2),
    }


def _write_timm_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=TIMM_COLUMNS)
        writer.writeheader()
        writer.writerows(timm_benchmark_row(row) for row in rows)


def _ratio(row: dict[str, Any], key: str) -> str:
    return f"{row[key]:.2f}x" if key in row else "-"


def _table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the rows; the timm ViT columns only when some row timed it."""
    vit = any("train_ratio_vs_vit" in r for r in rows)
    head = (
        "| model | dtype | mode | train img/s (ref) | train ratio | vs ref eager | MFU (peak GFLOP/s) | "
        "infer img/s (ref) | infer ratio | vs ref eager | memory MiB (ref) |"
    )
    if vit:
        head += " train vs timm ViT | infer vs timm ViT | timm ViT MFU | timm ViT memory MiB |"
    lines = [head, "|---" * head.count(" | ") + "|---|"]
    for r in rows:
        train = f"{r['train_img_s']:.1f} ({r['train_reference_img_s']:.1f})"
        infer = f"{r['infer_img_s']:.1f} ({r['infer_reference_img_s']:.1f})"
        line = (
            f"| {r['model']} | {r['dtype']} | {r['mode']} | {train} | {r['train_ratio']:.2f}x | "
            f"{_ratio(r, 'train_ratio_vs_reference_eager')} | "
            f"{r['train_mfu']:.0%} ({r['matmul_peak_flop_s'] / 1e9:.0f}) | {infer} | {r['infer_ratio']:.2f}x | "
            f"{_ratio(r, 'infer_ratio_vs_reference_eager')} | {r['memory_mib']:.0f} ({r['reference_memory_mib']:.0f}) |"
        )
        if vit:
            vit_mfu = f"{r['vit_train_mfu']:.0%}" if "vit_train_mfu" in r else "-"
            vit_memory = f"{r['vit_memory_mib']:.0f}" if "vit_memory_mib" in r else "-"
            vit_ratios = f"{_ratio(r, 'train_ratio_vs_vit')} | {_ratio(r, 'infer_ratio_vs_vit')}"
            line += f" {vit_ratios} | {vit_mfu} | {vit_memory} |"
        lines.append(line)
    return "\n".join(lines)


def _measure_in_subprocess(args: argparse.Namespace, name: str, dtype: str, mode: str) -> dict[str, Any]:
    """One case in a fresh interpreter: a case run after others in the same process inherits their
    allocator state, thread pools and compiled-code caches, and was measured up to 20% slower."""
    with tempfile.TemporaryDirectory() as tmp:
        row_out = Path(tmp) / "row.json"
        command = [sys.executable, "-m", "benchmarks.throughput", "--models", name, "--dtypes", dtype, "--modes", mode]
        command += ["--steps", str(args.steps), "--repeats", str(args.repeats), "--peak-size", str(args.peak_size)]
        command += ["--device", args.device, "--row-out", str(row_out)]
        command += (["--batch", str(args.batch)] if args.batch else []) + (["--vit"] if args.vit else [])
        proc = subprocess.run(command, cwd=REPO, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"the {name} {dtype} {mode} case failed (exit {proc.returncode}); see its output above")
        return json.loads(row_out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CPU_DEFAULT), help=f"comma-separated, of {list(CASES)}")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--steps", type=int, default=3, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timings per model; medians")
    parser.add_argument("--batch", type=int, help="images per step instead of each model's default")
    parser.add_argument("--vit", action="store_true", help="also time timm's ViT of the same width, depth, heads")
    parser.add_argument("--peak-size", type=int, default=2048)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "latest.json"))
    parser.add_argument("--timm-csv", help="also write the rows in the columns of timm's benchmark.py CSV")
    parser.add_argument("--row-out", help=argparse.SUPPRESS)  # internal: one case, its row written here
    args = parser.parse_args()
    device = torch.device(args.device)
    names, dtypes, modes = args.models.split(","), args.dtypes.split(","), args.modes.split(",")
    for name in names:
        if name not in CASES:
            parser.error(f"unknown model {name!r}; choose from {list(CASES)}")
    for dtype in dtypes:
        if dtype not in DTYPES:
            parser.error(f"unknown dtype {dtype!r}; choose from {list(DTYPES)}")
    for mode in modes:
        if mode not in ("eager", "compiled"):
            parser.error(f"unknown mode {mode!r}; choose from ['eager', 'compiled']")
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be a positive number of images, got {args.batch}")
    if args.row_out:
        compiled = modes[0] == "compiled"
        case = replace(CASES[names[0]], batch=args.batch) if args.batch else CASES[names[0]]
        row = measure(case, device, dtypes[0], compiled, args.steps, args.repeats, args.peak_size, args.vit)
        Path(args.row_out).write_text(json.dumps(row))
        return
    rows = []
    for name in names:
        for dtype in dtypes:
            for mode in modes:
                row = _measure_in_subprocess(args, name, dtype, mode)
                rows.append(row)
                print(_table([row]).splitlines()[2], flush=True)
    table = _table(rows)
    print(table)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    result = {
        "device": device_name,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "rows": rows,
        "command": " ".join(sys.argv),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out}")
    if args.timm_csv:
        _write_timm_csv(rows, Path(args.timm_csv))
        print(f"written: {args.timm_csv}")


if __name__ == "__main__":
    main()
