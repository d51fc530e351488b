"""The examples in the package's docstrings (``>>>``, as torchmetrics writes its metrics') run as written and print
what they show."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "crate"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py")
    if ">>>" in path.read_text()
)


def test_the_metrics_show_an_example_each() -> None:
    assert {"crate.metrics.coding_rate", "crate.metrics.top1_accuracy"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_a_module_s_docstring_examples_print_what_they_show(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, name
