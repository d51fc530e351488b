"""bf16 on a CPU without bf16 instructions: detected from the CPU's own flags, and warned about before a run."""

from __future__ import annotations

import platform
import warnings
from pathlib import Path

import lightning as L
import pytest

from crate.lit import cpu_precision


@pytest.mark.skipif(
    not Path("/proc/cpuinfo").is_file() or platform.machine() != "x86_64", reason="reads x86 Linux CPU flags"
)
def test_native_bf16_matches_the_cpu_flags_the_kernel_reports() -> None:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    assert cpu_precision.cpu_has_native_bf16() == bool(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})


def _trainer(precision: str) -> L.Trainer:
    return L.Trainer(accelerator="cpu", precision=precision, logger=False, enable_checkpointing=False)


@pytest.mark.parametrize("resumes", [None, "logs/run/version_0/checkpoints/last.ckpt"])
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_bf16_without_cpu_support_warns_with_the_way_out(
    monkeypatch: pytest.MonkeyPatch, native: bool, precision: str, resumes: str | None
) -> None:
    """A new run's way out is fp32; a resume keeps its run's precision (another is refused), so its way out is a
    new fp32 run from the checkpoint's weights."""
    monkeypatch.setattr(cpu_precision, "cpu_has_native_bf16", lambda: native)
    trainer = _trainer(precision)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu_precision.warn_if_slow_bf16(trainer, resumes)
    messages = [str(w.message) for w in caught if "bf16 instructions" in str(w.message)]
    if precision == "bf16-mixed" and not native:
        assert len(messages) == 1 and "--trainer.precision 32-true" in messages[0]
        assert ("--model.pretrained_file" in messages[0]) == (resumes is not None)
        assert resumes is None or f"--model.pretrained_file {resumes} " in messages[0]
    else:
        assert messages == []


def test_train_cli_warns_before_a_bf16_run_on_such_a_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from conftest import REPO

    from crate.lit import cli_main

    monkeypatch.setattr(cpu_precision, "cpu_has_native_bf16", lambda: False)
    config = str(REPO / "configs" / "crate_nano_digits.yaml")
    with pytest.warns(UserWarning, match="without bf16 instructions"):
        cli = cli_main(
            ["--config", config, "--trainer.precision", "bf16-mixed", "--log_root", str(tmp_path)], run=False
        )
    assert str(cli.trainer.precision) == "bf16-mixed"
