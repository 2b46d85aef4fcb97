"""benchmarks/job_overhead.py (issue 27, 4): the fixed cost of a job in a worker that keeps its
device context, read from the executor's own per-job timing in ``jobs.log``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "job_overhead", ROOT / "benchmarks" / "job_overhead.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_job_times_groups_finished_training_jobs_by_worker_in_start_order(bench, tmp_path):
    rows = [
        {"kind": "train", "status": "done", "pid": 7, "started": 5.0, "seconds": 0.2},
        {"kind": "train", "status": "done", "pid": 7, "started": 1.0, "seconds": 2.5},
        {"kind": "train", "status": "failed", "pid": 7, "started": 9.0, "seconds": 9.9},
        {"kind": "fit", "status": "done", "pid": 7, "started": 0.5, "seconds": 4.0},
        {"kind": "train", "status": "done", "pid": 8, "started": 2.0, "seconds": 3.0},
    ]
    (tmp_path / "jobs.log").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the cold job (the worker's first) leads, whatever order the lines were written in
    assert bench.job_times(tmp_path) == {7: [2.5, 0.2], 8: [3.0]}


def test_runs_on_the_cpu_and_prints_cold_warm_and_outside(bench, capsys):
    assert bench.main(["--device", "cpu", "--jobs", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 training jobs" in out and "1 worker process" in out
    cold = float(re.search(r"\(cold\):\s+([\d.]+) s", out).group(1))
    warm = float(re.search(r"fixed cost\):\s+([\d.]+) s", out).group(1))
    assert cold > 0 and warm > 0
    assert "outside the jobs" in out


def test_refuses_too_few_jobs_for_a_cold_and_a_warm_job_per_worker(bench):
    with pytest.raises(SystemExit):
        bench.main(["--jobs", "3", "--workers", "2"])
