"""``make docs-tables``: every results table of the README and the docs, written from the committed files.

    .venv/bin/python -m scripts.docs_tables           # rewrite what is stale (from the repository's root)
    .venv/bin/python -m scripts.docs_tables --check   # exit 1 naming each stale file, write nothing

What it writes, and from what:
- the shipped tags (README.md, docs/checkpoints.md, between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``)
  from ``results/results-<dataset>.csv`` (``make results``: each tag measured through timm on its split) and
  each tag's card (``checkpoints/<tag>.json``: parameters, epochs);
- the shipped encoders (the same two files, ``table:shipped-encoders``) from their cards: the k-NN and probe
  accuracy ``crate.export`` measured on each file, beside the controls it scored with it;
- the zoo tables (``docs/zoo_table*.md``) from the runs saved beside them
  (``python -m benchmarks.zoo_table --from-json``);
- the compression controls of the shipped weights (``docs/controls_cifar10.md``) from its JSON
  (``python -m benchmarks.controls_table --from-json``);
- the package's rooms and imports (``CONTRIBUTING.md``, ``table:architecture``) from the code
  (``scripts/architecture.py``);
- the GPU queue (``tools/gpu_jobs/GPU_JOBS.md``, ``table:gpu-queue``) from ``tools/gpu_jobs/gpu_queue.yaml`` and the
  finished jobs' JSONs in ``benchmarks/results/gpu_queue/``.
The tests run ``--check``: a committed table that differs from what this writes fails them.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

__all__ = ["REPO", "encoders_table", "main", "rendered", "shipped_rows", "tags_table"]

DATASET_NAMES = {
    "digits": "digits (scikit-learn's 8x8 images)",
    "cifar10": "CIFAR-10 (val 5,000)",
    "cifar10_10k": "CIFAR-10 subset (train 10,000, val 2,000)",
}


def _test_top1(dataset: str) -> dict[str, str]:
    """Each tag's top-1 on the data set's official test split (``results-<dataset>-test.csv``), where scored."""
    path = REPO / "results" / f"results-{dataset}-test.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as handle:
        return {row["model"]: row["top1"] for row in csv.DictReader(handle)}


def shipped_rows() -> list[dict[str, str]]:
    """One row per shipped tag, from the results CSVs (within a data set: best test top-1 first where the tags
    were scored on a test split, else best val top-1), with the card's parameters and epochs."""
    rows = []
    for path in sorted((REPO / "results").glob("results-*.csv")):
        dataset = path.stem.removeprefix("results-")
        if dataset.endswith("-test"):
            continue
        test = _test_top1(dataset)
        found = []
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                card_path = REPO / "checkpoints" / f"{row['model']}.json"
                card = json.loads(card_path.read_text()) if card_path.is_file() else {}
                extra = dict(dataset=dataset, parameters=card.get("parameters"), epochs=card.get("epochs"))
                found.append(dict(row, test_top1=test.get(row["model"]), **extra))
        if test:
            found.sort(key=lambda row: -float(row["test_top1"] or -1))
        rows += found
    return rows


def tags_table(rows: list[dict[str, str]], full: bool, card_prefix: str | None) -> str:
    """Markdown of the shipped tags; ``card_prefix`` links each card (None: the card's path as code)."""
    head = "| tag | data | parameters | epochs | val top-1 | test top-1 | "
    head += ("val top-5 | img size | " if full else "") + "card |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        card = f"checkpoints/{row['model']}.md"
        card_cell = f"[card]({card_prefix}{row['model']}.md)" if card_prefix is not None else f"`{card}`"
        parameters = f"{row['parameters']:,}" if isinstance(row["parameters"], int) else f"{row['param_count']} M"
        cells = [f"`{row['model']}`", DATASET_NAMES.get(row["dataset"], row["dataset"]), parameters]
        test = f"{float(row['test_top1']):.2f}" if row.get("test_top1") else "-"
        cells += [str(row["epochs"] or "-"), f"{float(row['top1']):.2f}", test]
        if full:
            cells += [f"{float(row['top5']):.2f}", row["img_size"]]
        lines.append("| " + " | ".join([*cells, card_cell]) + " |")
    return "\n".join(lines)


def encoders_table(card_prefix: str | None) -> str:
    """Markdown of the shipped encoders (cards with frozen-feature scores): k-NN / probe top-1 of the file and of
    each control its card scored."""
    lines = ["| tag | data | parameters | epochs | encoder | k-NN top-1 | probe top-1 | card |", "|" + "---|" * 8]
    from crate.results import dataset_name

    for path in sorted((REPO / "checkpoints").glob("*.json")):
        card = json.loads(path.read_text())
        if not card.get("frozen_features"):
            continue
        name = card["name"]
        link = f"[card]({card_prefix}{name}.md)" if card_prefix is not None else f"`checkpoints/{name}.md`"
        dataset = dataset_name(card["data_config"]) if card.get("data_config") else "-"
        about = [f"`{name}`", DATASET_NAMES.get(dataset, dataset), f"{card['parameters']:,}", str(card["epochs"])]
        for index, (label, entry) in enumerate(card["frozen_features"].items()):
            first = index == 0
            cells = about if first else [""] * 4
            cells = cells + [label, f"{100 * entry['knn_top1']:.2f}", f"{100 * entry['linear_probe_top1']:.2f}"]
            lines.append("| " + " | ".join([*cells, link if first else ""]) + " |")
    return "\n".join(lines)


def _replace_block(text: str, name: str, body: str, path: Path) -> str:
    pattern = re.compile(rf"(<!-- table:{name} -->\n)(?:.*?\n)?(<!-- /table:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs_tables.py: {path} has no <!-- table:{name} --> ... <!-- /table:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def rendered() -> dict[Path, Callable[[], str]]:
    """Each generated file and how to write it now."""
    from benchmarks import controls_table, zoo_table
    from tools.gpu_jobs import gpu_queue

    rows = shipped_rows()

    def with_tags(path: Path, full: bool, card_prefix: str | None) -> Callable[[], str]:
        def render() -> str:
            text = _replace_block(path.read_text(), "shipped-tags", tags_table(rows, full, card_prefix), path)
            return _replace_block(text, "shipped-encoders", encoders_table(card_prefix), path)

        return render

    files: dict[Path, Callable[[], str]] = {
        REPO / "README.md": with_tags(REPO / "README.md", False, "checkpoints/"),
        REPO / "docs" / "checkpoints.md": with_tags(REPO / "docs" / "checkpoints.md", True, None),
    }
    for table in sorted((REPO / "docs").glob("zoo_table*.md")):
        if table.with_suffix(".json").is_file():
            files[table] = lambda table=table: zoo_table.rendered_from_json(table)
    controls = REPO / "docs" / "controls_cifar10.md"
    files[controls] = lambda: controls_table.rendered_from_json(controls)
    from scripts import architecture

    contributing = REPO / "CONTRIBUTING.md"
    files[contributing] = lambda: _replace_block(
        contributing.read_text(), "architecture", architecture.picture(), contributing
    )
    gpu = REPO / "tools" / "gpu_jobs" / "GPU_JOBS.md"
    files[gpu] = lambda: _replace_block(gpu.read_text(), "gpu-queue", gpu_queue.queue_table(), gpu)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale file")
    args = parser.parse_args(argv)
    stale = []
    for path, render in rendered().items():
        text = render()
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path.relative_to(REPO))
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print("stale tables (run make docs-tables): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    print("rewritten: " + (", ".join(map(str, stale)) if stale else "nothing, every table is current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
