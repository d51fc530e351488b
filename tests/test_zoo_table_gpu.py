"""The converged zoo table's GPU runner, dry-run on the CPU: several runs at once after the first alone, each run
measured beside its initialisation, the sharing gain from the same model's two runs, and the windows merged."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import write_image_folder

from crate.run import build_model

REPO = Path(__file__).resolve().parents[1]
MEMBERS = ["crate_nano_patch4_32", "vit_nano_patch4_32"]


@pytest.mark.slow  # four train.py processes, two at once
def test_runs_share_the_device_after_the_first_alone_and_the_windows_merge_into_one_table(tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "images", ("cat", "dog"), 16, val_per_class=8, size=32, gray=False)
    out = tmp_path / "out"
    command = [sys.executable, "tools/gpu_jobs/zoo_table_gpu.py", "--dry-run", "--data", str(data), "--out", str(out)]
    command += ["--members", *MEMBERS, "--seeds", "0", "1", "--epochs", "2", "--parallel", "2", "--first-alone"]
    command += ["--report", "result.json", "--budget-s", "600"]
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'benchmarks'}")
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "zoo_table_cifar10_gpu.json").read_text())
    assert json.loads((out / "result.json").read_text()) == summary
    assert summary["not_finished"] == [] and sorted(summary["results"]) == sorted(MEMBERS)
    for name in MEMBERS:
        runs = summary["results"][name]["runs"]
        assert sorted(run["seed"] for run in runs) == [0, 1]
        for run in runs:
            assert run["exit_status"] == 0 and run["epochs_run"] == 2 and 0 <= run["accuracy"] <= 1
            assert run["best_accuracy"] >= run["accuracy"] and run["epoch_seconds"] > 0
            (log,) = (out / "runs" / f"{name}.seed{run['seed']}").glob("*/version_*/metrics.csv")
            rows = list(csv.DictReader(log.open()))
            assert run["accuracy"] == float([r["val/acc"] for r in rows if r["val/acc"]][-1])
            epoch_s = sorted(float(r["time/epoch_s"]) for r in rows if r["time/epoch_s"])  # 2 epochs: both count
            assert len(epoch_s) == 2 and run["epoch_seconds"] == round(epoch_s[1], 3)  # the upper median
            for key in ("redundancy", "rc_change", "rc_change_shared_null", "rc_before"):
                assert isinstance(run[key], float) and isinstance(run[f"{key}_init"], float)
            assert run["rc_before"] != run["rc_before_init"]  # two optimizer steps moved the weights
            kept = build_model(name, out / "runs" / run["weights"])[0]  # what comes back, through the one reader
            assert kept.num_classes == 2 and next(kept.parameters()).dtype == torch.float32
            assert not list((out / "runs").glob("**/*.ckpt"))
    first = {run["seed"]: run for run in summary["results"][MEMBERS[0]]["runs"]}
    assert first[0]["most_at_once"] == 1 and first[1]["most_at_once"] == 2  # alone, then beside the twin
    sharing = summary["sharing"]
    assert sharing["epoch_s_alone"] == first[0]["epoch_seconds"] and sharing["runs_at_once"] == 2
    assert sharing["aggregate_vs_alone"] == pytest.approx(
        2 * first[0]["epoch_seconds"] / first[1]["epoch_seconds"], abs=1e-3
    )

    later = json.loads(json.dumps(summary))  # a second window with other seeds of the same members
    for result in later["results"].values():
        for run in result["runs"]:
            run["seed"] += 10
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"result": later}))  # as the queue's record holds it
    table = tmp_path / "table.md"
    merge = [sys.executable, "tools/gpu_jobs/zoo_table_gpu.py", "--merge", str(out / "result.json"), str(second)]
    proc = subprocess.run([*merge, "--table", str(table)], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = json.loads(table.with_suffix(".json").read_text())
    for name in MEMBERS:
        assert sorted(run["seed"] for run in merged["results"][name]["runs"]) == [0, 1, 10, 11]
    text = table.read_text()
    assert all(f"| `{name}` |" in text for name in MEMBERS) and text.count("Sharing one GPU") == 2
