"""One worker pool per run (issue 48, 1): the stages of one command share the local
executor's worker processes (a spawned worker imports torch and the packages once per run, not
once per stage), and a reused worker starts each job from the state it had before its first
job (the jobs of a later stage do not see the seeds, thread counts or flags an earlier job
set).

The fast test runs two stub stages of two probe jobs each with ``max_workers=2`` in a real
``shared_pool`` block (a script in a subprocess: a spawned worker imports the job function from
it): the driver runs one job of each stage and the pool's spawned worker the other; each probe
waits until both are in a job of its stage. That every stage of a pipeline command runs in
one block is checked on the tiny preset by ``tests/test_pipeline.py``
(``test_tiny_preset_end_to_end``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

PROBE_RUN = """
import hashlib, json, os, random, sys, time
from pathlib import Path

import numpy as np
import torch

from graphwm.store.executors import run_jobs, shared_pool
from graphwm.store.results import ResultStore


class Job:
    kind, env = "self_gdd", "SAR"

    def __init__(self, stage, seed, root, threads):
        self.key = f"probe-{stage}{seed}"
        self.stage, self.seed, self.root, self.threads = stage, seed, root, threads

    def describe(self):
        return {"key": self.key}


def digest(state):
    return hashlib.sha256(repr(state).encode()).hexdigest()[:16]


def probe(job, run_dir):
    root = Path(job.root)
    (root / f"in-{job.key}").touch()
    deadline = time.time() + 600
    while len(list(root.glob(f"in-probe-{job.stage}*"))) < 2:  # both workers in this stage
        assert time.time() < deadline, "the other worker never took a job of this stage"
        time.sleep(0.05)
    seen = {
        "pid": os.getpid(),
        "torch": digest(torch.random.get_rng_state().tolist()),
        "numpy": digest(np.random.get_state()[1].tolist()),
        "random": digest(random.getstate()),
        "threads": torch.get_num_threads(),
        "dtype": str(torch.get_default_dtype()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "grad": torch.is_grad_enabled(),
        "cwd": os.getcwd(),
    }
    print("SEEN " + json.dumps(seen))
    # what a job may leave behind for the next one on its worker
    torch.manual_seed(1234 + job.seed)
    np.random.seed(99)
    random.seed(7)
    torch.set_num_threads(3)
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(False)
    os.chdir(root)
    from graphwm.store.records import COMPONENTS, SelfGddRecord

    return SelfGddRecord(kind="self_gdd", env="SAR", seed=job.seed, size=7, gdd=0.5,
                         components=dict.fromkeys(COMPONENTS, 0.0))


if __name__ == "__main__":
    root = Path(sys.argv[1])
    print("DRIVER", os.getpid(), flush=True)
    with shared_pool():
        for stage, threads in (("a", 2), ("b", 1)):
            jobs = [Job(stage, i, str(root), threads) for i in range(2)]
            run_jobs(probe, jobs, ResultStore(root / "store"), root, max_workers=2,
                     progress=False)
"""


def _seen(run_dir: Path, key: str) -> dict:
    (line,) = [x for x in (run_dir / "jobs" / f"{key}.log").read_text().splitlines()
               if x.startswith("SEEN ")]  # fmt: skip
    return json.loads(line[len("SEEN ") :])


def _run_script(tmp_path: Path, source: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``source`` as a script (a spawned worker imports its job function from it) with a
    fresh run directory as its argument; it must succeed."""
    script = tmp_path / "run_script.py"
    script.write_text(source)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(run_dir)],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, run_dir


def _driver(done: subprocess.CompletedProcess) -> int:
    return int(done.stdout.split("DRIVER ", 1)[1].split()[0])


def _log(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "jobs.log").read_text().splitlines()]


def test_two_stages_run_on_the_same_workers_each_job_from_a_fresh_state(tmp_path):
    done, run_dir = _run_script(tmp_path, PROBE_RUN)
    driver = _driver(done)
    a = {s["pid"]: s for s in (_seen(run_dir, f"probe-a{i}") for i in range(2))}
    b = {s["pid"]: s for s in (_seen(run_dir, f"probe-b{i}") for i in range(2))}
    # the driver and the same pool worker ran both stages (a pool per stage: a new worker)
    assert len(a) == 2 and set(a) == set(b) and driver in a
    (worker,) = set(a) - {driver}
    for pid in a:
        # a job's thread count is its own (``job.threads``), never a previous job's
        assert a[pid]["threads"] == 2 and b[pid]["threads"] == 1
    # the seeds, flags and working directory the stage-a job set on the pool worker are gone:
    # the stage-b job starts where the worker's first job started
    same = ("torch", "numpy", "random", "dtype", "deterministic", "grad", "cwd")
    assert {k: b[worker][k] for k in same} == {k: a[worker][k] for k in same}
    assert a[worker]["dtype"] == "torch.float32" and a[worker]["grad"] is True
    # jobs.log names the worker of each job: the pids the probes saw
    assert {ln["pid"] for ln in _log(run_dir)} == set(a)


#: the scripts' start: a job of a key, and the record a job returns
SCRIPT_START = """
import os, sys, time
from pathlib import Path

from graphwm.store.executors import run_jobs, shared_pool
from graphwm.store.results import ResultStore


class Job:
    kind, env = "self_gdd", "SAR"

    def __init__(self, key):
        self.key = key

    def describe(self):
        return {"key": self.key}


def record():
    from graphwm.store.records import COMPONENTS, SelfGddRecord

    return SelfGddRecord(kind="self_gdd", env="SAR", seed=0, size=7, gdd=0.5,
                         components=dict.fromkeys(COMPONENTS, 0.0))
"""


BROKEN_RUN = (
    SCRIPT_START
    + """

from graphwm.store.outcomes import JobsFailed


def job_fn(job, run_dir):
    marker = Path(run_dir) / "dying"
    if job.key == "dies":
        marker.touch()
        os._exit(1)  # the worker dies (killed, out of memory): the pool is broken
    deadline = time.time() + 600
    while not marker.exists():  # the driver's jobs: not done before the worker took "dies"
        assert time.time() < deadline, "the pool's worker never took its job"
        time.sleep(0.05)
    if job.key.startswith("second"):  # both in a job: the new pool's worker runs one
        (Path(run_dir) / f"in-{job.key}").touch()
        while len(list(Path(run_dir).glob("in-second*"))) < 2:
            assert time.time() < deadline, "the new pool's worker never took its job"
            time.sleep(0.05)
    print("PID", os.getpid())
    return record()


if __name__ == "__main__":
    root = Path(sys.argv[1])
    store = ResultStore(root / "store")
    with shared_pool():
        try:
            # the first job goes to the pool's worker, the driver takes the next ones
            run_jobs(job_fn, [Job("dies"), Job("first"), Job("third")], store, root,
                     max_workers=2, progress=False)
        except JobsFailed as err:
            print("FAILED", " ".join(sorted(job.key for _, job, _ in err.failures)))
        run_jobs(job_fn, [Job("second-0"), Job("second-1")], store, root, max_workers=2,
                 progress=False)
    print("DONE")
"""
)


def test_a_stage_after_a_dead_worker_runs_on_a_new_pool(tmp_path):
    """A pool worker that dies breaks the pool (its job fails, not deterministically: a rerun
    runs it; the driver runs the stage's other jobs); the next stage starts a new pool."""
    done, run_dir = _run_script(tmp_path, BROKEN_RUN)
    assert "FAILED dies\n" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("DONE")
    store = run_dir / "store"
    assert all((store / f"{k}.json").exists() for k in ("first", "third", "second-0", "second-1"))
    pid = {ln["key"]: ln["pid"] for ln in _log(run_dir)}
    # the driver ran the first stage's other jobs (and stored the dead worker's failure), the
    # second stage's first job ran in a new pool's worker
    assert pid["first"] == pid["third"] == pid["second-1"] == pid["dies"] != pid["second-0"]
    assert not (store / "dies.failure").exists()  # a machine failure: not recorded


HELD_RUN = (
    SCRIPT_START
    + """
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import graphwm.store.executors as executors


def job_fn(job, run_dir):
    return record()


def held(parent):
    # a worker whose start-up outlasts the run (as a slow import would); it gives up after
    # a minute, saying so, where a block end waited for it
    print("WORKER", os.getpid(), flush=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.05)
    Path(os.environ["LATE"]).touch()
    executors._init_worker(parent)


def held_pool(workers):
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=held,
                               initargs=(os.getpid(),))


if __name__ == "__main__":
    root = Path(sys.argv[1])
    os.environ["LATE"] = str(root / "late")
    executors._new_pool = held_pool
    print("DRIVER", os.getpid(), flush=True)
    with shared_pool():
        run_jobs(job_fn, [Job("a"), Job("b"), Job("c")], ResultStore(root / "store"), root,
                 max_workers=2, progress=False)
    print("DONE", flush=True)
"""
)


def test_the_driver_takes_a_job_no_worker_started_and_the_run_never_waits_for_it(tmp_path):
    """A stage never waits for a pool worker's start-up: with no job left to take, the driver
    runs the job it gave the pool that no worker started yet (no job runs twice), and the
    block's end ends a worker still starting instead of waiting for it (a run too short for
    the worker to take a job does not pay the rest of its start-up)."""
    done, run_dir = _run_script(tmp_path, HELD_RUN)
    assert done.stdout.rstrip().endswith("DONE")
    driver = _driver(done)
    lines = _log(run_dir)
    assert sorted(ln["key"] for ln in lines) == ["a", "b", "c"]  # each job once
    assert {ln["pid"] for ln in lines} == {driver}
    assert all((run_dir / "store" / f"{k}.json").exists() for k in "abc")
    # the held worker was ended with the block, not waited for until it gave up
    worker = int(done.stdout.split("WORKER ", 1)[1].split()[0])
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie"
    assert not (run_dir / "late").exists()


FED_RUN = (
    SCRIPT_START
    + """


COST = {"small": 1.0, "middle": 2.0, "large": 3.0}


def job_fn(job, run_dir):
    root = Path(run_dir)
    (root / f"in-{job.key}").touch()
    if job.key == "middle":  # the driver's: busy until the worker has run its second job
        deadline = time.time() + 240
        while not (root / "done-small").exists() and time.time() < deadline:
            time.sleep(0.05)
    (root / f"done-{job.key}").touch()
    return record()


if __name__ == "__main__":
    root = Path(sys.argv[1])
    print("DRIVER", os.getpid(), flush=True)
    with shared_pool():
        # given cheapest first: started longest first
        run_jobs(job_fn, [Job("small"), Job("middle"), Job("large")],
                 ResultStore(root / "store"), root, max_workers=2, progress=False,
                 cost=lambda job: COST[job.key])
"""
)


def test_jobs_start_longest_first_and_a_worker_takes_its_next_job_while_the_driver_works(tmp_path):
    """Jobs start in decreasing cost: the pool's worker takes the largest, the driver the
    next; the worker, done, takes the smallest at once, while the driver is still in its job
    (every job is queued on the pool: a busy driver need not hand it over)."""
    done, run_dir = _run_script(tmp_path, FED_RUN)
    driver = _driver(done)
    by_key = {ln["key"]: ln for ln in _log(run_dir)}
    assert by_key["middle"]["pid"] == driver
    assert by_key["large"]["pid"] == by_key["small"]["pid"] != driver
    middle_end = by_key["middle"]["started"] + by_key["middle"]["seconds"]
    assert by_key["small"]["started"] < middle_end  # not after the driver's job ended
    assert (run_dir / "done-small").exists()


def test_longest_first_orders_by_decreasing_cost_keeping_ties_in_order():
    from graphwm.store.executors import longest_first

    class Job:
        def __init__(self, key: str, cost: float) -> None:
            self.key, self.cost = key, cost

    jobs = [Job("a", 1.0), Job("b", 3.0), Job("c", 1.0), Job("d", 2.0)]
    assert [j.key for j in longest_first(jobs, lambda j: j.cost)] == ["b", "d", "a", "c"]
    assert [j.key for j in longest_first(jobs, None)] == ["a", "b", "c", "d"]
