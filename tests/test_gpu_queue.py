"""The GPU queue: its file is runnable as written (every job within one window, every script and config it names
there), the next jobs are picked in order within the time left, and ``gpu_suite.sh --next --dry-run`` runs the
window's jobs on the CPU and leaves what a GPU machine would send back."""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import tarfile
from pathlib import Path

import gpu_queue
import pytest
import torch
from gpu_queue import Job, QueueError, load_queue, next_jobs, pack

from crate.run import build_model

REPO = Path(__file__).resolve().parents[1]


def _job(name: str, device_s: int, done: str | None = None) -> Job:
    return Job(name, "a job", device_s, "{python} x.py --out {out} --data {data}", "result.json", done)


def test_the_committed_queue_is_runnable_as_written() -> None:
    jobs = load_queue()
    assert jobs and len({job.name for job in jobs}) == len(jobs)
    for job in jobs:
        assert 0 < job.device_s <= 480
        words = job.command("python", Path("/out"), "data/cifar10", dry=False)
        if words[1] == "-m":  # a module of the repository's packages: python -m benchmarks.input_path
            words = [words[0], words[2].replace(".", "/") + ".py", *words[3:]]
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
    # by name: a done job runs again, in queue order, within the same time and file limits
    assert [j.name for j in next_jobs(jobs, 480, max_jobs=6, names=["d", "a"])] == ["a", "d"]
    assert [j.name for j in next_jobs(jobs, 480, max_jobs=6, names=["c", "b"])] == ["b"]
    with pytest.raises(QueueError, match="no job zz"):
        next_jobs(jobs, 480, max_jobs=6, names=["b", "zz"])


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


# one job of each kind the queue holds: a member's training, export and bare step (gpu_suite.py), a window of the
# converged zoo table (zoo_table_gpu.py), the input-path benchmark, and SimDINO (gpu_simdino.py)
DRY_JOBS = ("crate_cct4_200_epochs_lr2e3", "zoo_converged_window_1", "input_path_imagenet_jpegs", "simdino_crate_nano")


@pytest.fixture(scope="module")
def dry_window(tmp_path_factory) -> Path:
    """The one dry run of the whole pipeline: ``gpu_suite.sh --next --dry-run`` (the old entry point, which forwards
    to tools/gpu_jobs/gpu_suite.sh: both are exercised) over one job of each kind, within the machine's limits
    given as arguments (the archive may hold 32 MiB: four windows' jobs in one; each alone fits 16); the folder it
    leaves is what a GPU machine sends back."""
    out = tmp_path_factory.mktemp("dry_window")
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "--next", "--dry-run", "--jobs", *DRY_JOBS,
         "--time-left", "1700", "--window-s", "480", "--max-files", "8", "--max-file-mib", "32"],
        cwd=REPO, env=dict(os.environ, OUT_DRY=str(out)), capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(out / "artifacts.tar.gz") as tar:
        tar.extractall(out / "artifacts", filter="data")
    return out


def _record(out: Path, job: str) -> dict:
    record = json.loads((out / f"{job}.json").read_text())
    assert record["exit_status"] == 0, record.get("log_tail")
    return record


@pytest.mark.slow  # every job's programs in subprocesses
def test_the_dry_run_leaves_what_a_gpu_machine_sends_back(dry_window: Path) -> None:
    jobs = {job.name: job for job in load_queue()}
    returned = sorted(p.name for p in dry_window.iterdir() if p.is_file())  # images/: the stand-in data
    assert returned == sorted([*(f"{name}.json" for name in DRY_JOBS), "artifacts.tar.gz", "queue_run.json"])
    assert len(returned) <= 8 and all((dry_window / name).stat().st_size <= 32 * 2**20 for name in returned)
    summary = json.loads((dry_window / "queue_run.json").read_text())
    assert [entry["job"] for entry in summary["ran"]] == list(DRY_JOBS) and summary["dry_run"]
    assert summary["archive_left_out"] == []
    for name in DRY_JOBS:
        record = _record(dry_window, name)
        assert record["date"].startswith("20") and record["device_s_estimate"] == jobs[name].device_s
        assert record["environment"]["device"].startswith("cpu") and record["environment"]["torch"]
        words = shlex.split(record["command"])  # the job's command as written, its placeholders filled in
        assert words[1:3] == jobs[name].command("python", Path("/out"), "d", dry=True)[1:3] and words[-1] == "--dry-run"
        assert (dry_window / "artifacts" / name / "job.log").is_file()


@pytest.mark.slow
def test_a_member_job_trains_exports_and_times_the_bare_step(dry_window: Path) -> None:
    result = _record(dry_window, DRY_JOBS[0])["result"]
    assert result["train"]["exit_status"] == 0 and result["export"]["exit_status"] == 0
    assert result["epochs_run"] == 3 and 0 <= result["val_acc_last"] <= 1
    folder = dry_window / "artifacts" / DRY_JOBS[0]
    assert (folder / f"{result['model']}.cifar10_gpu.safetensors").is_file()
    assert (folder / "run" / "checkpoints" / "last.ckpt").is_file() and (folder / "run" / "config.yaml").is_file()
    assert (folder / "train.log").is_file()
    _check_suite_report(result)


@pytest.mark.slow
def test_a_zoo_window_shares_the_device_after_the_first_run_alone(dry_window: Path) -> None:
    """Several runs at once after the first alone, each run measured beside its initialisation, the sharing gain
    from the same model's two runs, and what comes back read through the one model reader."""
    record = _record(dry_window, DRY_JOBS[1])
    summary, words = record["result"], shlex.split(record["command"])
    members = words[words.index("--members") + 1 : words.index("--seeds")]
    runs_folder = dry_window / "artifacts" / DRY_JOBS[1] / "runs"
    assert summary["not_finished"] == [] and sorted(summary["results"]) == sorted(members)
    for name in members:
        runs = summary["results"][name]["runs"]
        assert sorted(run["seed"] for run in runs) == [0, 1]
        for run in runs:
            assert run["exit_status"] == 0 and run["epochs_run"] == 2 and 0 <= run["accuracy"] <= 1
            assert run["best_accuracy"] >= run["accuracy"] and run["epoch_seconds"] > 0
            (log,) = (runs_folder / f"{name}.seed{run['seed']}").glob("*/version_*/metrics.csv")
            rows = list(csv.DictReader(log.open()))
            assert run["accuracy"] == float([r["val/acc"] for r in rows if r["val/acc"]][-1])
            epoch_s = sorted(float(r["time/epoch_s"]) for r in rows if r["time/epoch_s"])  # 2 epochs: both count
            assert len(epoch_s) == 2 and run["epoch_seconds"] == round(epoch_s[1], 3)  # the upper median
            for key in ("rc_change", "rc_change_shared_null", "rc_before"):
                assert isinstance(run[key], float) and isinstance(run[f"{key}_init"], float)
            # head redundancy needs attention maps: every member but ToST (token statistics, no maps) has them
            has_maps = not name.startswith("tost_")
            assert isinstance(run["redundancy"], float) == isinstance(run["redundancy_init"], float) == has_maps
            assert run["rc_before"] != run["rc_before_init"]  # two optimizer steps moved the weights
            kept = build_model(name, runs_folder / run["weights"])[0]
            assert kept.num_classes == 2 and next(kept.parameters()).dtype == torch.float32
    assert not list(runs_folder.glob("**/*.ckpt"))
    first = {run["seed"]: run for run in summary["results"][members[0]]["runs"]}
    assert first[0]["most_at_once"] == 1 and first[1]["most_at_once"] > 1  # alone, then beside the others
    sharing = summary["sharing"]
    assert sharing["epoch_s_alone"] == first[0]["epoch_seconds"] and sharing["runs_at_once"] == first[1]["most_at_once"]
    assert sharing["aggregate_vs_alone"] == pytest.approx(
        sharing["runs_at_once"] * first[0]["epoch_seconds"] / first[1]["epoch_seconds"], abs=1e-3
    )


@pytest.mark.slow
def test_the_zoo_windows_merge_into_one_table(dry_window: Path, tmp_path: Path) -> None:
    import zoo_table_gpu

    record = _record(dry_window, DRY_JOBS[1])
    later = json.loads(json.dumps(record))  # a second window with other seeds of the same members
    for result in later["result"]["results"].values():
        for run in result["runs"]:
            run["seed"] += 10
    second = tmp_path / "second.json"
    second.write_text(json.dumps(later))
    table = tmp_path / "table.md"
    zoo_table_gpu.main(["--merge", str(dry_window / f"{DRY_JOBS[1]}.json"), str(second), "--table", str(table)])
    merged = json.loads(table.with_suffix(".json").read_text())
    members = sorted(record["result"]["results"])
    for name in members:
        assert sorted(run["seed"] for run in merged["results"][name]["runs"]) == [0, 1, 10, 11]
    text = table.read_text()
    assert all(f"| `{name}` |" in text for name in members) and text.count("Sharing one GPU") == 2


@pytest.mark.slow
def test_the_input_path_job_measures_both_paths_and_the_fed_step(dry_window: Path) -> None:
    record = _record(dry_window, DRY_JOBS[2])
    result = record["result"]
    assert record["environment"]["device"] and result["folder"]["images"] == 8
    assert result["loader_cpu_images_s"] > 0 and result["loader_device_images_s"] > 0
    assert set(result["device_stages"]) == {
        "bytes_images_s",
        "decode_images_s",
        "transform_images_s",
        "transform_host_us_per_image",
    }
    assert all(rate > 0 for rate in result["device_stages"].values())
    step = result["steps"]["crate_tiny_patch16_224"]
    for path in ("cpu", "device"):
        assert step[f"fed_{path}_vs_resident"] == pytest.approx(
            step[f"fed_{path}_images_s"] / step["resident_images_s"], abs=2e-3
        )


@pytest.mark.slow
def test_the_simdino_job_calibrates_trains_and_brings_back_its_run(dry_window: Path) -> None:
    report = _record(dry_window, DRY_JOBS[3])["result"]
    run = report["runs"]["simdino"]
    assert set(report["runs"]) == {"simdino"} and run["exit_status"] == 0 and run["calibration"]["exit_status"] == 0
    assert "--objective simdino fit" in run["command"] and "--trainer.limit_val_batches 0" in run["calibration_command"]
    assert run["epochs_run"] == run["epochs_planned"] == len(run["knn_by_epoch"]) == len(run["epoch_s"]) == 1
    assert 0 <= run["knn_by_epoch"][0] <= 1 and 0 < run["calibration"]["step_s"]
    folder = dry_window / "artifacts" / DRY_JOBS[3]
    assert (folder / "simdino" / "checkpoints" / "last.ckpt").is_file()
    assert (folder / "simdino" / "config.yaml").is_file() and (folder / "simdino_train.log").is_file()


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
