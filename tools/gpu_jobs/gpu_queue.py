"""The GPU queue (``tools/gpu_jobs/gpu_queue.yaml``): pick the next pending jobs that fit a window, run them, and
leave everything they measured in one folder that comes back from the GPU machine whole.

    python tools/gpu_jobs/gpu_queue.py --next --data data/cifar10 --out $OUT [--time-left 480] [--dry-run]
    python tools/gpu_jobs/gpu_queue.py --next --jobs NAME [NAME ...] ...   # only these jobs, done or not
    python tools/gpu_jobs/gpu_queue.py --list

Started by ``tools/gpu_jobs/gpu_suite.sh --next``, which installs the carried wheels and the data first. The folder
holds, for each job run, ``<job>.json`` (the job, its command, the date, its exit status and wall time, the
environment and what the job's own ``result.json`` measured), and ``artifacts.tar.gz`` with each job's other files
under ``<job>/``; ``queue_run.json`` says which jobs ran and which were left for later windows. The lending
machine's limits are arguments: ``--window-s`` (the longest a job may take), ``--max-files`` and ``--max-file-mib``
(what comes back): at most ``max_files - 2`` jobs run at once (a JSON each, beside the archive and
``queue_run.json``), and an archive over the size limit is written without its largest members (each named in
``queue_run.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
QUEUE = REPO / "tools" / "gpu_jobs" / "gpu_queue.yaml"
RESULTS = REPO / "benchmarks" / "results" / "gpu_queue"  # each finished job's <job>.json, committed
FIELDS = ("name", "what", "device_s", "run", "writes", "done")


class QueueError(ValueError):
    """A queue file that cannot be run as it is."""


@dataclass(frozen=True)
class Job:
    name: str
    what: str
    device_s: int
    run: str
    writes: str
    done: str | None

    def command(self, python: str, out: Path, data: str, dry: bool) -> list[str]:
        """The job's command with its placeholders filled in (and ``--dry-run`` for a dry run)."""
        words = shlex.split(self.run.format(python=shlex.quote(python), out=shlex.quote(str(out)), data=data))
        return [*words, "--dry-run"] if dry else words


def load_queue(path: Path = QUEUE, window_s: float = 480) -> list[Job]:
    """The queue's jobs, checked: every field present, names unique, each job within one window of ``window_s``
    device seconds (start-up, compilation and export included)."""
    try:
        entries = (yaml.safe_load(path.read_text()) or {}).get("jobs") or []
    except (OSError, yaml.YAMLError) as err:
        raise QueueError(f"cannot read the GPU queue {path}: {err}") from err
    jobs, seen = [], set()
    for index, entry in enumerate(entries):
        missing = [field for field in FIELDS if not isinstance(entry, dict) or field not in entry]
        if missing:
            raise QueueError(f"{path}: job {index + 1} lacks {', '.join(missing)}")
        job = Job(**{field: entry[field] for field in FIELDS})
        if job.name in seen:
            raise QueueError(f"{path}: two jobs are named {job.name}")
        if not 0 < int(job.device_s) <= window_s:
            raise QueueError(
                f"{path}: job {job.name} needs {job.device_s} device seconds; one window holds {window_s:g}"
            )
        seen.add(job.name)
        jobs.append(job)
    return jobs


def next_jobs(jobs: list[Job], time_left: float, max_jobs: int, names: list[str] | None = None) -> list[Job]:
    """The pending jobs, in queue order, that fit ``time_left`` device seconds together (a job too long for what
    is left is passed over for a shorter one behind it); at most ``max_jobs``. ``names``: only these jobs, done
    or not (to run one again, or a chosen few)."""
    unknown = sorted(set(names or ()) - {job.name for job in jobs})
    if unknown:
        raise QueueError(f"the queue has no job {', '.join(unknown)} (gpu_queue.py --list names them)")
    chosen: list[Job] = []
    for job in jobs:
        wanted = job.name in names if names else job.done is None
        if wanted and job.device_s <= time_left and len(chosen) < max_jobs:
            chosen.append(job)
            time_left -= job.device_s
    return chosen


def run_job(job: Job, work: Path, out: Path, data: str, dry: bool, python: str = sys.executable) -> dict[str, Any]:
    """Run one job in ``work/<name>``; write and return its record (``out/<name>.json``)."""
    folder = work / job.name
    folder.mkdir(parents=True)
    command = job.command(python, folder, data, dry)
    record: dict[str, Any] = {
        "job": job.name,
        "what": job.what,
        "command": shlex.join(command),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dry_run": dry,
        "device_s_estimate": job.device_s,
    }
    print(f"gpu_queue: {job.name}: {record['command']}", flush=True)
    start = time.perf_counter()
    with (folder / "job.log").open("w") as log:
        try:
            status = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=job.device_s + 60)
            record["exit_status"] = status.returncode
        except subprocess.TimeoutExpired:
            record["exit_status"] = 124
    record["wall_s"] = round(time.perf_counter() - start, 1)
    result = folder / "result.json"
    if result.is_file():
        measured = json.loads(result.read_text())
        record["environment"] = measured.pop("environment", None)
        record["result"] = measured
        result.unlink()
    if record["exit_status"] != 0:
        record["log_tail"] = (folder / "job.log").read_text()[-3000:]
    (out / f"{job.name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record


def pack(work: Path, archive: Path, limit: int) -> list[str]:
    """Every file under ``work`` into ``archive`` (gzip), the largest left out until it fits ``limit``; returns
    what was left out."""
    files = sorted((p for p in work.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    left_out: list[str] = []
    while True:
        with tarfile.open(archive, "w:gz") as tar:
            for path in files:
                tar.add(path, arcname=str(path.relative_to(work)))
        if archive.stat().st_size <= limit or not files:
            return left_out
        left_out.append(str(files.pop().relative_to(work)))


def _measured(record: dict[str, Any]) -> str:
    """What a finished job measured, in one cell: val accuracy (exported file), epochs and epoch time, the loop,
    and the fit's seconds to each val accuracy it reached."""
    result = record.get("result") or {}
    device = (record.get("environment") or {}).get("device", "?")
    parts = [f"{device}, {record.get('date', '?')[:10]}"]
    export = result.get("export") or {}
    if export.get("val_acc") is not None:
        parts.append(f"val {export['val_acc']:.4f} (exported file)")
    if result.get("epochs_run"):
        parts.append(f"{result['epochs_run']} epochs, {result.get('epoch_s', '?')} s each")
    if result.get("loop_vs_bare_gpu") is not None:
        parts.append(f"loop {result['loop_vs_bare_gpu']} of the bare step")
    reached = {t: hit for t, hit in (result.get("time_to_val_acc") or {}).items() if hit}
    if reached:
        parts.append("val " + ", ".join(f"{t} at {hit['seconds']:.0f} s" for t, hit in reached.items()))
    if record.get("exit_status"):
        parts.append(f"exit status {record['exit_status']}")
    return "; ".join(parts)


def queue_table(jobs: list[Job] | None = None, results: Path = RESULTS) -> str:
    """The queue as markdown (tools/gpu_jobs/GPU_JOBS.md): each job, its estimate, and what it measured once done."""
    lines = ["| # | job | what it runs | device s | status | measured |", "|---|---|---|---|---|---|"]
    for index, job in enumerate(jobs if jobs is not None else load_queue(), start=1):
        record_path = results / f"{job.name}.json"
        measured = _measured(json.loads(record_path.read_text())) if record_path.is_file() else "-"
        status = f"done ({job.done})" if job.done else "pending"
        what = " ".join(job.what.split()).replace("|", "/")
        lines.append(f"| {index} | `{job.name}` | {what} | {job.device_s} | {status} | {measured} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--next", action="store_true", help="run the next pending jobs that fit --time-left")
    parser.add_argument("--list", action="store_true", help="print the queue and exit")
    parser.add_argument("--jobs", nargs="+", default=None, help="with --next: only these jobs (by name), done or not")
    parser.add_argument("--time-left", type=float, default=480, help="device seconds this window has left")
    parser.add_argument("--window-s", type=float, default=480, help="the most device seconds one job may take")
    parser.add_argument("--max-files", type=int, default=8, help="how many files the machine sends back")
    parser.add_argument("--max-file-mib", type=float, default=16, help="the largest file it sends back, in MiB")
    parser.add_argument("--dry-run", action="store_true", help="the same jobs on the CPU with tiny limits")
    parser.add_argument("--data", default="data/cifar10", help="the CIFAR-10 image folder (train/, val/)")
    parser.add_argument("--out", default=None, help="the folder that comes back (default: a new temporary one)")
    parser.add_argument("--queue", default=str(QUEUE), help="the queue file")
    args = parser.parse_args(argv)
    try:
        if args.max_files < 3:
            raise QueueError(
                f"--max-files {args.max_files}: a window needs 3 (a job's JSON, the archive, queue_run.json)"
            )
        jobs = load_queue(Path(args.queue), args.window_s)
        chosen = next_jobs(jobs, args.time_left, max_jobs=args.max_files - 2, names=args.jobs)
    except QueueError as err:
        print(f"gpu_queue: error: {err}", file=sys.stderr)
        return 2
    if args.list or not args.next:
        for job in jobs:
            print(f"{job.name:<28} {job.device_s:>4} s  {'done ' + str(job.done) if job.done else 'pending'}")
        return 0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_queue_"))
    out.mkdir(parents=True, exist_ok=True)
    if not chosen:
        print(f"gpu_queue: no pending job fits {args.time_left:.0f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_queue_work_"))
    records = [run_job(job, work, out, args.data, args.dry_run) for job in chosen]
    left_out = pack(work, out / "artifacts.tar.gz", int(args.max_file_mib * 2**20)) if chosen else []
    shutil.rmtree(work, ignore_errors=True)
    summary = {
        "ran": [{"job": r["job"], "exit_status": r["exit_status"], "wall_s": r["wall_s"]} for r in records],
        "pending_after": [job.name for job in jobs if job.done is None and job not in chosen],
        "time_left_s": args.time_left,
        "dry_run": args.dry_run,
        "archive_left_out": left_out,
    }
    (out / "queue_run.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"gpu_queue: wrote {out} ({', '.join(r['job'] for r in records) or 'no job'})", flush=True)
    return 0 if all(r["exit_status"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
