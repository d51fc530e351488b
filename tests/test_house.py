"""The house's rules that no single feature test sees: the benchmarks are one package that imports its own modules
by name (no ``sys.path`` edits, anywhere the project keeps code), each of them runs as ``python -m benchmarks.<name>``,
and the package's rooms import each other without a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("crate", "benchmarks", "scripts", "tools", "tests")


def _code_files() -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py"))]


def test_no_module_edits_the_import_path() -> None:
    edits = []
    for path in _code_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                edits.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert edits == [], f"sys.path is edited at {edits}"


def test_the_benchmarks_are_one_package_whose_modules_import_each_other_through_it() -> None:
    package = REPO / "benchmarks"
    assert (package / "__init__.py").is_file()
    names = {path.stem for path in package.glob("*.py")} - {"__init__"}
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                assert node.module.split(".")[0] not in names, f"{path.name} imports {node.module} outside the package"
            if isinstance(node, ast.Import):
                assert not {alias.name.split(".")[0] for alias in node.names} & names, f"{path.name}: a bare import"


def test_a_benchmark_runs_as_a_module_from_the_repository_root() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.attention_scaling", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--tokens" in proc.stdout, proc.stderr[-2000:]


def test_the_rooms_import_each_other_without_a_circle() -> None:
    from scripts.architecture import picture

    assert picture().startswith("| floor | room | imports |")  # it raises SystemExit naming a circle
