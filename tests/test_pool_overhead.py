"""The pool benchmarks' scripts: benchmarks/pool_overhead.py (issue 48, 1: the wall time of a
whole ``graphwm reproduce`` per worker count, for this tree or another one, the gaps between
stages and the per-stage timeline its ``jobs.log`` shows) and benchmarks/job_overhead.py
(issue 27, 4: the fixed cost of a job in a worker that keeps its device context, read from the
executor's own per-job timing in ``jobs.log``)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("pool_overhead")


@pytest.fixture(scope="module")
def job_bench():
    return _load("job_overhead")


def _jobs_log(tmp_path: Path, rows: list[dict]) -> Path:
    """A run's ``jobs.log`` of ``rows`` (every field the scripts read: kind, status, pid,
    started, seconds; env and model where given)."""
    path = tmp_path / "jobs.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(kind: str, pid: int, started: float, seconds: float, status: str = "done", **more):
    return {"kind": kind, "status": status, "pid": pid, "started": started, "seconds": seconds,
            **more}  # fmt: skip


def test_stage_summary_counts_worker_processes_and_the_gaps_between_stages(bench, tmp_path):
    log = _jobs_log(tmp_path, [
        _row("collect", 1, 0.0, 1.0),
        _row("train", 7, 10.0, 2.0),
        _row("train", 8, 10.5, 3.0),
        _row("train", 9, 40.0, 9.0, status="failed"),
        _row("single_step", 8, 20.0, 1.0),
        _row("self_gdd", 7, 15.5, 1.0),
    ])  # fmt: skip
    processes, gaps = bench.stage_summary(log)
    assert processes == 2  # the driver's collect and a failed job's pid are not counted
    # in run order: train ends at 13.5, self_gdd starts at 15.5 and ends at 16.5
    assert gaps == [("self_gdd", 2.0), ("single_step", 3.5)]


def test_busy_summary_times_the_first_job_and_each_process(bench, tmp_path):
    log = _jobs_log(tmp_path, [
        _row("fit", 1, 100.5, 4.0),
        _row("train", 7, 110.0, 2.0),
        _row("train", 8, 111.0, 3.0),
        _row("self_gdd", 7, 113.0, 0.5),
    ])  # fmt: skip
    # the command started at 100: its first pool-stage job 10 s later; 5.5 s of jobs, of
    # which the busiest process ran 3
    assert bench.busy_summary(log, 100.0) == (10.0, 5.5, 3.0)


def test_timeline_gives_each_stage_its_busy_idle_and_gap_seconds_and_longest_job(
    bench, tmp_path, capsys
):
    log = _jobs_log(tmp_path, [
        _row("fit", 1, 0.0, 1.0, env="SAR"),
        _row("train", 1, 2.0, 6.0, env="SAR", model="gdm"),
        _row("train", 7, 3.0, 2.0, env="SAR", model="vanilla-gwm"),
        _row("train", 7, 5.0, 9.0, status="failed"),
        _row("self_gdd", 7, 9.0, 1.0, env="SAR"),
    ])  # fmt: skip
    fit, train, self_gdd = bench.timeline(log, workers=2)
    assert (fit["stage"], fit["gap"]) == ("fit", 0.0)
    # train: 8 busy seconds over a span of 6 (2 to 8) on 2 workers, after 1 s of the driver's
    assert train["stage"] == "train" and (train["busy"], train["span"]) == (8.0, 6.0)
    assert (train["idle"], train["gap"], train["processes"]) == (4.0, 1.0, 2)
    assert train["longest"] == (6.0, "SAR gdm")
    assert (self_gdd["gap"], self_gdd["idle"]) == (1.0, 1.0)
    assert bench.main(["--timeline-of", str(tmp_path), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^train +2 +8\.0 +6\.0 +33 +1\.0  6\.0 s SAR gdm$", out, re.M), out


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


def test_job_times_groups_finished_training_jobs_by_worker_in_start_order(job_bench, tmp_path):
    # (kind, pid, started, seconds, status) per line, in the order written
    lines = [("train", 7, 5.0, 0.2, "done"), ("train", 7, 1.0, 2.5, "done"),
             ("train", 7, 9.0, 9.9, "failed"), ("fit", 7, 0.5, 4.0, "done"),
             ("train", 8, 2.0, 3.0, "done")]  # fmt: skip
    _jobs_log(tmp_path, [_row(*line) for line in lines])
    # the cold job (the worker's first) leads, whatever order the lines were written in
    assert job_bench.job_times(tmp_path) == {7: [2.5, 0.2], 8: [3.0]}


def test_runs_on_the_cpu_and_prints_cold_warm_and_outside(job_bench, capsys):
    assert job_bench.main(["--device", "cpu", "--jobs", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 training jobs" in out and "1 worker process" in out
    cold = float(re.search(r"\(cold\):\s+([\d.]+) s", out).group(1))
    warm = float(re.search(r"fixed cost\):\s+([\d.]+) s", out).group(1))
    assert cold > 0 and warm > 0
    assert "outside the jobs" in out


def test_refuses_too_few_jobs_for_a_cold_and_a_warm_job_per_worker(job_bench):
    with pytest.raises(SystemExit):
        job_bench.main(["--jobs", "3", "--workers", "2"])
