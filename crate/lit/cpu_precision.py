"""Whether bf16 autocast pays on this CPU, and a warning before a run that would crawl under it."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["cpu_has_native_bf16", "warn_if_slow_bf16"]


def cpu_has_native_bf16() -> bool:
    """True where the CPU has bf16 matmul instructions (AVX-512 BF16 or AMX), which oneDNN uses under bf16
    autocast. Without them (an AVX2-only CPU, for one) bf16 matmuls are emulated: a crate_nano training step
    measured 15x slower than fp32 on such a CPU. Unknown where torch cannot tell (reported as True)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    probes = [probe for probe in probes if probe is not None]
    if not probes:
        return True
    return any(probe() for probe in probes)


def warn_if_slow_bf16(trainer: L.Trainer, resumes: str | Path | None = None) -> None:
    """Warn when a run asks for bf16 on a CPU that has no bf16 instructions: it trains correctly, only many
    times slower than in fp32, so the run is not refused but the way out is named. A resume of a bf16 run
    (``resumes``: its checkpoint) keeps its precision, so its way out is a new run from its weights."""
    on_cpu = trainer.strategy.root_device.type == "cpu"
    if on_cpu and str(trainer.precision).startswith("bf16") and not cpu_has_native_bf16():
        way_out = "pass --trainer.precision 32-true"
        if resumes is not None:
            way_out = (
                "a resume keeps the precision its run was trained with; to train on in fp32 from its weights, start "
                f"a new run with --trainer.precision 32-true --model.pretrained_file {resumes} (and no --ckpt_path)"
            )
        rank_zero_warn(
            f"precision {trainer.precision} on a CPU without bf16 instructions (torch reports "
            f"{torch.backends.cpu.get_cpu_capability()}): bf16 matmuls are emulated here and run many times slower "
            f"than fp32; {way_out}"
        )
