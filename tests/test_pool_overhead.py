"""benchmarks/pool_overhead.py (issue 48, 1): the wall time of a whole ``graphwm reproduce`` per
worker count, for this tree or another one, and the gaps between stages its ``jobs.log``
shows."""

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
        "pool_overhead", ROOT / "benchmarks" / "pool_overhead.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stage_summary_counts_worker_processes_and_the_gaps_between_stages(bench, tmp_path):
    rows = [
        {"kind": "collect", "status": "done", "pid": 1, "started": 0.0, "seconds": 1.0},
        {"kind": "train", "status": "done", "pid": 7, "started": 10.0, "seconds": 2.0},
        {"kind": "train", "status": "done", "pid": 8, "started": 10.5, "seconds": 3.0},
        {"kind": "train", "status": "failed", "pid": 9, "started": 40.0, "seconds": 9.0},
        {"kind": "single_step", "status": "done", "pid": 8, "started": 20.0, "seconds": 1.0},
        {"kind": "self_gdd", "status": "done", "pid": 7, "started": 15.5, "seconds": 1.0},
    ]
    (tmp_path / "jobs.log").write_text("".join(json.dumps(r) + "\n" for r in rows))
    processes, gaps = bench.stage_summary(tmp_path / "jobs.log")
    assert processes == 2  # the driver's collect and a failed job's pid are not counted
    # in run order: train ends at 13.5, self_gdd starts at 15.5 and ends at 16.5
    assert gaps == [("self_gdd", 2.0), ("single_step", 3.5)]


def test_busy_summary_times_the_first_job_and_each_process(bench, tmp_path):
    rows = [
        {"kind": "fit", "status": "done", "pid": 1, "started": 100.5, "seconds": 4.0},
        {"kind": "train", "status": "done", "pid": 7, "started": 110.0, "seconds": 2.0},
        {"kind": "train", "status": "done", "pid": 8, "started": 111.0, "seconds": 3.0},
        {"kind": "self_gdd", "status": "done", "pid": 7, "started": 113.0, "seconds": 0.5},
    ]
    (tmp_path / "jobs.log").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the command started at 100: its first pool-stage job 10 s later; 5.5 s of jobs, of
    # which the busiest process ran 3
    assert bench.busy_summary(tmp_path / "jobs.log", 100.0) == (10.0, 5.5, 3.0)


def test_refuses_a_tree_without_its_environment(bench, tmp_path):
    with pytest.raises(SystemExit, match="no .venv/bin/python"):
        bench.main(["--tree", str(tmp_path), "--workers", "1"])


def test_refuses_a_worker_count_below_one(bench):
    with pytest.raises(SystemExit):
        bench.main(["--workers", "0"])


# slow: two whole runs of the narrowed tiny preset (about a minute on an idle 2-core machine)
@pytest.mark.slow
def test_times_this_tree_for_each_worker_count(bench, capsys):
    narrowed = ["--envs", "SAR", "--models", "vanilla-gwm"]
    assert bench.main(["--workers", "1", "2", "--", *narrowed]) == 0
    out = capsys.readouterr().out
    walls = re.findall(r"--workers (\d): ([\d.]+) s wall; jobs ran in (\d+) process", out)
    assert [w for w, _, _ in walls] == ["1", "2"] and all(float(s) > 0 for _, s, _ in walls)
    # the two-worker run's stages all ran on one pool of two processes
    assert int(walls[1][2]) <= 2
    assert "median" in out
