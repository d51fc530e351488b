"""A fit in 16-true (float16 weights and optimizer state, no loss scaling) is warned about before it starts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from conftest import REPO

CONFIG = str(REPO / "configs" / "crate_nano_digits.yaml")


def test_a_squared_gradient_of_the_zoo_s_size_underflows_float16() -> None:
    """The warning's reason: AdamW's second moment after one step is (1 - beta2) g^2; for a gradient of 1e-3 (the
    median size on crate_nano's first digits batch) that is 1e-9, below float16's smallest subnormal (6e-8)."""
    gradient = torch.tensor(1e-3, dtype=torch.float16)
    assert (1 - 0.999) * gradient * gradient == 0
    assert (1 - 0.999) * gradient.float() ** 2 > 0  # float32 keeps it


@pytest.mark.parametrize(
    ("subcommand", "precision", "warned"),
    [("fit", "16-true", True), ("fit", "bf16-true", False), ("fit", "32-true", False), ("validate", "16-true", False)],
)
def test_a_fit_in_16_true_is_warned_with_the_precisions_that_train(
    tmp_path: Path, subcommand: str, precision: str, warned: bool
) -> None:
    """On the digits a 16-true fit stayed at chance accuracy for 3 epochs while 32-true reached 0.86: it ran with
    no word. A fit says why and names bf16-true, bf16-mixed and 16-mixed; an evaluation in float16 is not warned."""
    from crate.lit import cli_main

    args = ["--config", CONFIG, "--trainer.precision", precision, "--log_root", str(tmp_path)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if subcommand == "fit":
            cli_main(args, run=False)  # the trainer a fit would run with, built
        else:
            quiet = ["--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "1"]
            cli_main([subcommand, *args, *quiet])
    said = [str(w.message) for w in caught if "16-true" in str(w.message)]
    assert len(said) == int(warned), said
    assert not warned or "train with bf16-true, bf16-mixed or 16-mixed (loss-scaled)" in said[0]
