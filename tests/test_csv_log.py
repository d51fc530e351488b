"""metrics.csv across resumes: the rows of a continuation that a resume from an older checkpoint replaces are
set aside, nothing else moves, and nothing is lost."""

from __future__ import annotations

import csv
from pathlib import Path

from crate.lit.csv_log import SUPERSEDED_FILE, ContinuingCSVLogger, set_aside_rows_after

FIELDS = ["epoch", "rate/R", "step", "train/loss", "val/acc"]


def _rows(steps_per_epoch: int, epochs: int, branch: str) -> list[dict[str, str]]:
    """The rows a run logs, in Lightning's numbering: per epoch a training loss at its last batch and a val/acc
    (both at the index of the step they follow, with the epoch), and a coding-rate row at the step count."""
    rows = []
    for epoch in range(epochs):
        last = (epoch + 1) * steps_per_epoch - 1
        rows.append({"epoch": str(epoch), "step": str(last), "train/loss": f"{branch}{epoch}"})
        rows.append({"rate/R": f"{branch}{epoch}", "step": str(last + 1)})
        rows.append({"epoch": str(epoch), "step": str(last), "val/acc": f"{branch}{epoch}"})
    return rows


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(handle)]


def test_a_resume_from_an_earlier_epoch_sets_the_abandoned_rows_aside(tmp_path: Path) -> None:
    """Resumed from the checkpoint written at the end of epoch 1 of 4 (5 steps each, 10 steps done): epochs 0-1
    stay, epochs 2-3 of the abandoned continuation move, in order, to the file beside it; a second resume
    from epoch 0 appends its own set-aside rows there."""
    metrics = tmp_path / "metrics.csv"
    first = _rows(5, 4, "a")
    _write(metrics, first)
    assert set_aside_rows_after(metrics, step=10) == 6
    assert _read(metrics) == first[:6]
    assert _read(tmp_path / SUPERSEDED_FILE) == first[6:]
    assert set_aside_rows_after(metrics, step=10) == 0  # nothing logged after the checkpoint: nothing moves
    assert set_aside_rows_after(metrics, step=5) == 3
    assert _read(metrics) == first[:3]
    assert _read(tmp_path / SUPERSEDED_FILE) == first[6:] + first[3:6]


def test_a_resume_mid_epoch_keeps_the_steps_before_it(tmp_path: Path) -> None:
    """Interrupted after 7 steps (a SIGTERM's checkpoint): the row logged at step index 6 stays, 7 and on move."""
    metrics = tmp_path / "metrics.csv"
    rows = [{"epoch": "1", "step": str(step), "train/loss": str(step)} for step in range(5, 10)]
    _write(metrics, rows)
    assert set_aside_rows_after(metrics, step=7) == 3
    assert [row["step"] for row in _read(metrics)] == ["5", "6"]
    assert [row["step"] for row in _read(tmp_path / SUPERSEDED_FILE)] == ["7", "8", "9"]


def test_the_logger_sets_rows_aside_only_for_a_resume(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "version_0"
    folder.mkdir(parents=True)
    _write(folder / "metrics.csv", _rows(5, 3, "a"))
    evaluation = ContinuingCSVLogger(save_dir=tmp_path, name="run", version=0)  # validate or test: nothing moves
    evaluation.log_metrics({"val/acc": 0.25}, step=14)
    evaluation.save()
    assert len(_read(folder / "metrics.csv")) == 10 and not (folder / SUPERSEDED_FILE).exists()
    logger = ContinuingCSVLogger(save_dir=tmp_path, name="run", version=0, resumed_step=5)
    logger.log_metrics({"val/acc": 0.5, "epoch": 1}, step=9)
    logger.save()
    kept = _read(folder / "metrics.csv")
    assert kept[:3] == _rows(5, 3, "a")[:3] and kept[3] == {"epoch": "1", "step": "9", "val/acc": "0.5"}
    assert len(kept) == 4 and len(_read(folder / SUPERSEDED_FILE)) == 7  # the evaluation's row too


def test_only_rank_zero_makes_the_folder_and_sets_rows_aside(tmp_path: Path, monkeypatch) -> None:
    """The logger's writer made its version folder (and on a resume moved metrics.csv's rows) in every process of
    a distributed run: the other ranks wrote into the folder rank zero wrote into, or made an empty one beside it.
    As Lightning's own CSVLogger, only rank zero does."""
    from lightning.pytorch.utilities import rank_zero_only

    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    rows = [{"epoch": "0", "step": "9", "val/acc": "0.5"}, {"epoch": "1", "step": "19", "val/acc": "0.6"}]
    with (run / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    before = (run / "metrics.csv").read_text()
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    ContinuingCSVLogger(tmp_path, name="run", version=0, resumed_step=10).experiment  # noqa: B018
    ContinuingCSVLogger(tmp_path, name="run", version=1).experiment  # noqa: B018
    assert (run / "metrics.csv").read_text() == before and not (run / SUPERSEDED_FILE).exists()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["version_0"]
