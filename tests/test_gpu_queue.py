"""The GPU queue: its file is runnable as written (every job within one window, every script and config it names
there), the next jobs are picked in order within the time left, and ``gpu_suite.sh --next --dry-run`` runs the
window's jobs on the CPU and leaves what a GPU machine would send back."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tarfile
from pathlib import Path

import gpu_queue
import pytest
from gpu_queue import Job, QueueError, load_queue, next_jobs, pack

REPO = Path(__file__).resolve().parents[1]


def _job(name: str, device_s: int, done: str | None = None) -> Job:
    return Job(name, "a job", device_s, "{python} x.py --out {out} --data {data}", "result.json", done)


def test_the_committed_queue_is_runnable_as_written() -> None:
    jobs = load_queue()
    assert jobs and len({job.name for job in jobs}) == len(jobs)
    for job in jobs:
        assert 0 < job.device_s <= 480
        words = job.command("python", Path("/out"), "data/cifar10", dry=False)
        assert (REPO / words[1]).is_file(), f"{job.name}: {words[1]} does not exist"
        for flag, value in zip(words, words[1:], strict=False):
            if flag == "--extra-config":
                assert (REPO / value).is_file(), f"{job.name}: {value} does not exist"
            if flag == "--member":
                assert (REPO / "configs" / "cifar10" / f"{value}.yaml").is_file(), f"{job.name}: no recipe for {value}"
        assert job.command("python", Path("/out"), "d", dry=True)[-1] == "--dry-run"


def test_the_next_jobs_are_the_first_pending_ones_that_fit_the_time_left() -> None:
    jobs = [_job("a", 300, done="abc1234"), _job("b", 300), _job("c", 400), _job("d", 150), _job("e", 100)]
    assert [j.name for j in next_jobs(jobs, 480, max_jobs=6)] == ["b", "d"]  # c does not fit after b; d does
    assert [j.name for j in next_jobs(jobs, 299, max_jobs=6)] == ["d", "e"]
    assert next_jobs(jobs, 90, max_jobs=6) == []
    many = [_job(str(i), 10) for i in range(10)]
    assert [j.name for j in next_jobs(many, 480, max_jobs=3)] == ["0", "1", "2"]


_ENTRY = "jobs:\n  - name: a\n    what: x\n    run: r\n    writes: w\n    done: null\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "jobs:\n  - name: a\n    what: x\n    device_s: 900\n    run: r\n    writes: w\n    done: null\n",
            "one window",
        ),
        ("jobs:\n  - name: a\n    what: x\n    run: r\n    writes: w\n    done: null\n", "lacks device_s"),
        ("jobs: [\n", "cannot read"),
    ],
)
def test_a_queue_that_cannot_run_is_refused_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(text)
    with pytest.raises(QueueError, match=message):
        load_queue(path)
    assert gpu_queue.main(["--list", "--queue", str(path)]) == 2


def test_an_archive_over_the_limit_leaves_out_its_largest_files_by_name(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "job").mkdir(parents=True)
    (work / "job" / "small.txt").write_text("kept")
    (work / "job" / "large.bin").write_bytes(os.urandom(200_000))  # incompressible
    left_out = pack(work, tmp_path / "a.tar.gz", limit=100_000)
    assert left_out == ["job/large.bin"]
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert tar.getnames() == ["job/small.txt"]


def _check_suite_report(report: dict) -> None:
    """A GPU suite report (``tools/gpu_jobs/gpu_suite.py``) of a dry run: every step ran, and each derived figure is
    what the per-epoch records give."""
    assert report["dry_run"] is True and report["train"]["exit_status"] == 0
    assert "--config configs/cifar10/gpu.yaml" in report["train"]["command"]
    assert [e["epoch"] for e in report["epochs"]] == [0, 1, 2] and report["epochs_run"] == 3
    assert 0 < report["epoch_s"] and 0 < report["bare_step_ms"] and 0 < report["loop_vs_bare_gpu"]
    timed = sorted(e["epoch_s"] for e in report["epochs"][2:])  # past the first two epochs (compilation)
    assert report["epoch_s"] == round(timed[len(timed) // 2], 3)
    assert report["val_acc_last"] == report["epochs"][-1]["val_acc"]
    assert report["val_acc_best"] == max(e["val_acc"] for e in report["epochs"])
    assert 0 < report["val_s"] < report["epoch_s"]  # the validation pass is a part of the epoch
    for threshold, hit in report["time_to_val_acc"].items():  # the first validation at or above it, or null
        reaching = [e for e in report["epochs"] if e["val_acc"] >= float(threshold)]
        expected = reaching[0] if reaching else None
        assert hit == (
            expected
            and {"seconds": expected["elapsed_s"], "epoch": expected["epoch"] + 1, "val_acc": expected["val_acc"]}
        )
    assert sorted(report["time_to_val_acc"]) == ["0.70", "0.80", "0.85", "0.90"]
    elapsed = [e["elapsed_s"] for e in report["epochs"]]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= sum(e["epoch_s"] for e in report["epochs"][:-1])
    assert report["train_epoch_s"] == pytest.approx(report["epoch_s"] - report["val_s"], abs=1e-3)
    assert report["loop_vs_bare_gpu_train"] == pytest.approx(
        report["steps_per_epoch"] * report["bare_step_ms"] / 1000 / report["train_epoch_s"], abs=1e-3
    )
    assert report["loop_vs_bare_gpu"] == pytest.approx(
        report["steps_per_epoch"] * report["bare_step_ms"] / 1000 / report["epoch_s"], abs=1e-3
    )
    export = report["export"]
    assert export["exit_status"] == 0 and export["val_images"] == 16  # the stand-in folder's 16 val images
    assert 0 <= export["val_acc"] <= 1
    shipped = REPO / "checkpoints" / f"{report['model']}.cifar10.json"
    if shipped.is_file():  # a member that ships: the shipped file's figure beside the run's
        assert export["shipped_val_acc"] == json.loads(shipped.read_text())["val_accuracy"]


@pytest.mark.slow  # a train.py run, an export and a bare step in subprocesses
def test_the_dry_run_of_the_next_window_leaves_what_a_gpu_machine_sends_back(tmp_path: Path) -> None:
    proc = subprocess.run(
        # the old entry point, which forwards to tools/gpu_jobs/gpu_suite.sh: both are exercised
        ["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "--next", "--dry-run", "--time-left", "480",
         "--window-s", "480", "--max-files", "8", "--max-file-mib", "16"],
        cwd=REPO, env=dict(os.environ, OUT_DRY=str(tmp_path)), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    first = next_jobs(load_queue(), 480, max_jobs=6)
    assert first, "the queue has no pending job that fits a window"
    returned = sorted(p.name for p in tmp_path.iterdir() if p.is_file())  # images/ is the dry run's stand-in data
    assert returned == sorted([*(f"{job.name}.json" for job in first), "artifacts.tar.gz", "queue_run.json"])
    assert len(returned) <= 8 and all((tmp_path / name).stat().st_size <= 16 * 2**20 for name in returned)
    summary = json.loads((tmp_path / "queue_run.json").read_text())
    assert [entry["job"] for entry in summary["ran"]] == [job.name for job in first] and summary["dry_run"]
    for job in first:
        record = json.loads((tmp_path / f"{job.name}.json").read_text())
        assert record["exit_status"] == 0 and record["date"].startswith("20")
        assert record["environment"]["device"].startswith("cpu") and record["environment"]["torch"]
        assert shlex.split(record["command"])[-1] == "--dry-run"
        result = record["result"]
        assert result["train"]["exit_status"] == 0 and result["export"]["exit_status"] == 0
        assert result["epochs_run"] == 3 and 0 <= result["val_acc_last"] <= 1
        with tarfile.open(tmp_path / "artifacts.tar.gz") as tar:
            names = tar.getnames()
        member = result["model"]
        assert f"{job.name}/{member}.cifar10_gpu.safetensors" in names
        assert f"{job.name}/run/checkpoints/last.ckpt" in names and f"{job.name}/job.log" in names
        assert f"{job.name}/run/config.yaml" in names and f"{job.name}/train.log" in names
        if result.get("bare_step_ms") is not None:  # a GPU suite job: its report checked step by step
            _check_suite_report(result)


def test_the_machine_s_limits_are_arguments_the_window_keeps_to(tmp_path: Path) -> None:
    """--max-files bounds the jobs of one window (a JSON each beside the archive and queue_run.json), --window-s
    the longest job a queue may hold, --max-file-mib the archive; each refusal is one line."""
    queue = tmp_path / "queue.yaml"
    entry = (
        "  - name: {0}\n    what: x\n    device_s: 100\n    run: '{{python}} -c pass'\n    writes: w\n    done: null\n"
    )
    queue.write_text("jobs:\n" + "".join(entry.format(name) for name in "abcd"))
    out = tmp_path / "out"
    args = ["--next", "--queue", str(queue), "--out", str(out), "--time-left", "480"]
    assert gpu_queue.main([*args, "--max-files", "4", "--max-file-mib", "1"]) == 0
    summary = json.loads((out / "queue_run.json").read_text())
    assert [entry["job"] for entry in summary["ran"]] == ["a", "b"] and summary["pending_after"] == ["c", "d"]
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "artifacts.tar.gz", "b.json", "queue_run.json"]
    with pytest.raises(QueueError, match="one window holds 90"):
        load_queue(queue, window_s=90)
    assert gpu_queue.main([*args, "--window-s", "90"]) == 2
    assert gpu_queue.main([*args, "--max-files", "2"]) == 2


def test_the_queue_table_shows_what_a_finished_job_measured(tmp_path: Path) -> None:
    record = {
        "environment": {"device": "NVIDIA H100"},
        "date": "2026-11-27T10:00:00",
        "exit_status": 0,
        "result": {
            "export": {"val_acc": 0.8611},
            "epochs_run": 500,
            "epoch_s": 0.74,
            "loop_vs_bare_gpu": 0.81,
            "time_to_val_acc": {"0.70": {"seconds": 41.6, "epoch": 30, "val_acc": 0.7012}, "0.90": None},
        },
    }
    (tmp_path / "finished.json").write_text(json.dumps(record))
    table = gpu_queue.queue_table([_job("finished", 400, "abc1234"), _job("waiting", 300)], tmp_path)
    finished, waiting = table.splitlines()[2:]
    assert "done (abc1234)" in finished and "NVIDIA H100, 2026-11-27" in finished
    assert "val 0.8611 (exported file)" in finished and "500 epochs, 0.74 s each" in finished
    assert "loop 0.81 of the bare step" in finished and "val 0.70 at 42 s" in finished and "0.90" not in finished
    assert waiting.endswith("| pending | - |")
