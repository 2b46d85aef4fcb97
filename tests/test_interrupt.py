"""SIGTERM / SIGINT to a running ``graphwm`` (what a cluster scheduler or Ctrl-C sends) stop
its pool workers, leave the store consistent, exit 143 / 130 with a note on stderr, and a
rerun resumes.

The slow tests run the tiny preset in a real subprocess with two pool workers and longer
training (so the signal comes while both workers train; minutes on a loaded 2-core machine);
the signal goes to the graphwm process alone. The default run has fast variants: the CLI with
a real two-worker pool of sleeping jobs, the CLI in-process, and the workers' watchdog.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from graphwm.pipeline import RunPaths, preset_dict, training_jobs
from graphwm.stages.train import verify_trained
from graphwm.store.files import read_json
from graphwm.store.records import TrainRecord
from graphwm.store.results import ResultStore

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "src" / "graphwm" / "presets" / "tiny.toml"
# both jobs still train when the signal comes, a step after their checkpoint: long enough
# that the pool's worker starts (imports torch) while the driver trains the other job (a
# job no worker started by the time the driver is free is the driver's: graphwm.store.executors)
STEPS = 400
CHECKPOINT_EVERY = 5


def _preset(tmp_path: Path, envs: list[str], models: list[str]) -> Path:
    """tiny.toml with two workers, two seeds (two jobs of one model train at the same pace),
    longer training, frequent checkpoints, no ablations."""
    text = TINY.read_text()
    text = re.sub(r"(?m)^ablations = .*$", "ablations = []", text)
    text = re.sub(r"(?m)^seeds = .*$", "seeds = [0, 1]", text)
    text = re.sub(r"(?m)^workers = \d+$", "workers = 2", text)
    text = re.sub(r"(?m)^steps = \d+$", f"steps = {STEPS}", text)
    text = re.sub(r"(?m)^checkpoint_every = \d+$", f"checkpoint_every = {CHECKPOINT_EVERY}", text)
    preset = tomllib.loads(text)
    assert preset["workers"] == 2 and preset["train"]["steps"] == STEPS
    path = tmp_path / "preset.toml"
    path.write_text(text)
    return path


def _graphwm(*args: str) -> list[str]:
    return [sys.executable, "-m", "graphwm.cli", *args]


def _env() -> dict[str, str]:
    # each worker trains on one thread: the test machine's cores are shared
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _rows(log: Path) -> int:
    try:
        return max(0, len(log.read_text().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def _training_logs(run_dir: Path) -> list[Path]:
    """The ``log.csv`` files under ``run_dir/train``, read while the run writes them.

    ``os.walk`` skips a folder that vanishes mid-walk (a checkpoint's ``.latest_tmp`` is renamed
    away); ``Path.glob("**")`` raises ``FileNotFoundError`` on it."""
    return [
        Path(folder) / "log.csv"
        for folder, _, files in os.walk(run_dir / "train")
        if "log.csv" in files
    ]


def _kill_tree(proc: subprocess.Popen) -> str:
    """Kill ``proc`` and everything it started; return the end of its stderr."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    proc.kill()
    return proc.communicate(timeout=30)[1][-3000:]


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen) -> Iterator[list[psutil.Process]]:
    """A list for the pool workers of ``proc``: on leaving, whatever failed, ``proc`` (if still
    running) and every listed worker are killed, so that nothing stays running."""
    workers: list[psutil.Process] = []
    try:
        yield workers
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()


def _wait_until_training(proc: subprocess.Popen, run_dir: Path, logs: int, timeout: float):
    """Wait until ``logs`` training logs hold a checkpoint's worth of rows (the workers train
    and have a checkpoint to resume from); return the pool workers and their descendants."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"graphwm ended before training: {_kill_tree(proc)}")
        busy = [p for p in _training_logs(run_dir) if _rows(p) >= CHECKPOINT_EVERY]
        if len(busy) >= logs:
            return psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.1)
    pytest.fail(f"training did not start within {timeout} s: {_kill_tree(proc)}")


def _assert_gone(procs: list[psutil.Process], timeout: float = 15.0) -> None:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    assert not alive, f"processes left running: {[(p.pid, p.cmdline()[:3]) for p in alive]}"


def _assert_store_consistent(run_dir: Path, preset: dict) -> None:
    """Every visible store file reads; every stored training record's checkpoint is intact."""
    for path in run_dir.rglob("*.json"):
        if not path.name.startswith(".tmp"):
            json.loads(path.read_text())
    store = ResultStore(RunPaths(run_dir).jobs)
    for job in training_jobs(preset):
        if store.has(job):
            record = store.load(job)
            assert isinstance(record, TrainRecord)
            verify_trained(run_dir, record)


def _interrupt_and_resume(tmp_path: Path, sig: signal.Signals, command: str) -> None:
    envs, models = ["SAR"], ["gdm"]
    preset_path = _preset(tmp_path, envs, models)
    run_dir = tmp_path / "run"
    args = _graphwm(command, "--preset", str(preset_path), "--out", str(run_dir), "--quiet")
    args += ["--envs", *envs, "--models", *models]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    # generous: on a loaded machine starting the workers (torch imports) takes minutes
    workers = _wait_until_training(proc, run_dir, logs=2, timeout=600)
    assert len(workers) >= 2
    proc.send_signal(sig)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"graphwm did not end within 60 s of {sig.name}: {_kill_tree(proc)}")
    try:
        _assert_gone(workers)
    finally:  # leave nothing running, whatever failed
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert f"interrupted by {sig.name}" in stderr
    assert re.search(r"stopped \d+ unfinished job\(s\)", stderr)
    assert stderr.count(" SAR gdm\n") == 2, stderr  # both seeds' jobs named
    assert f"graphwm {command} --preset" in stderr  # how to resume

    preset = preset_dict(str(preset_path), {"envs": envs, "models": models})
    _assert_store_consistent(run_dir, preset)
    store = ResultStore(RunPaths(run_dir).jobs)
    interrupted = [job for job in training_jobs(preset) if not store.has(job)]
    assert len(interrupted) == 2, "a job finished before the signal: it came too late"
    checkpointed = [job for job in interrupted if (job.dir(run_dir) / "ckpt/latest").is_dir()]
    assert checkpointed

    # the rerun runs in-process (--workers does not enter any job key): two fewer processes
    # to start, and the resume is the same
    rerun = subprocess.run(
        [*args, "--workers", "1"], capture_output=True, text=True, env=_env(), timeout=1800
    )  # reproduce's rerun evaluates and trains agents too: minutes on a loaded machine
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _assert_store_consistent(run_dir, preset)
    for job in interrupted:
        assert store.load(job).steps == STEPS
    for job in checkpointed:  # resumed from the checkpoint the interrupted run left
        assert store.load(job).resumed_from >= CHECKPOINT_EVERY
    events = [json.loads(line) for line in (run_dir / "jobs.log").read_text().splitlines()]
    assert not [e for e in events if e["status"] == "failed"]
    assert read_json(run_dir / "run.json")


@pytest.mark.slow
def test_sigterm_stops_the_workers_and_a_rerun_resumes(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGTERM, "train")


@pytest.mark.slow
def test_sigint_stops_the_workers_and_a_rerun_resumes(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGINT, "train")


_SLEEPING_RUN = """
import os, sys, time
from pathlib import Path
from graphwm import cli
from graphwm.store.executors import run_jobs
from graphwm.store.results import ResultStore


class Job:
    kind, env, model = "train", "SAR", "gdm"

    def __init__(self, seed, marker_dir):
        self.key = f"train-sleep{{seed}}"
        self.seed = seed
        # where a started job says so: an absolute path of the driver's machine (a Ray job
        # runs in a private run directory of its node, the driver-owned store's design)
        self.marker_dir = str(marker_dir)

    def describe(self):
        return {{"kind": self.kind}}


def sleep_job(job, run_dir):
    {started}
    time.sleep(300)


def run(args):
    root = Path(sys.argv[1])
    run_jobs(sleep_job, [Job(i, root) for i in range(3)], ResultStore(root / "store"), root,
             progress=False, {executor})
    return 0


if __name__ == "__main__":
    cli._run = run
    sys.exit(cli.main(["train", "--preset", "tiny", "--out", "runs/x"]))
"""

# a graphwm.cli.main process running three jobs that sleep once started: two pool workers
SLEEPING_POOL = _SLEEPING_RUN.format(
    started='print("started", flush=True)', executor="max_workers=2"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_stops_the_pool_workers_at_once(tmp_path, sig):
    """The fast variant of the tests below: a real ``graphwm.cli.main`` process with two pool
    workers busy in (sleeping) jobs and one job queued gets the signal: it ends the workers,
    names the three unfinished jobs and exits ``128 + signal``."""
    script = tmp_path / "sleeping_pool.py"
    script.write_text(SLEEPING_POOL)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    with _reaped(proc) as workers:
        for _ in range(2):  # both workers are in a job
            assert proc.stdout.readline() == "started\n"
        workers += psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        _assert_gone(workers)
    assert proc.returncode == 128 + sig, stderr
    assert f"interrupted by {sig.name}; stopped 3 unfinished job(s)" in stderr
    assert all(f"  train-sleep{i} SAR gdm\n" in stderr for i in range(3)), stderr
    assert "graphwm train --preset tiny --out runs/x" in stderr
    # graphwm's message only: no concurrent.futures traceback, no leaked-semaphore warning
    assert stderr.startswith(f"graphwm: interrupted by {sig.name}"), stderr
    assert "Traceback" not in stderr and "leaked" not in stderr, stderr


# ... and the same on a local Ray, whose workers do not print to the driver: a file says the
# job started (and holds the worker's pid)
SLEEPING_RAY = _SLEEPING_RUN.format(
    started='(Path(job.marker_dir) / f"started-{job.seed}").write_text(str(os.getpid()))',
    executor='executor="ray"',
)


# SIGINT takes the same path as SIGTERM (graphwm.store.interrupts); its Ray run (~35 s) is in
# the slow set, the pool test above covers both signals in the default run
@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
    ids=lambda s: s.name,
)
def test_a_signal_stops_a_local_ray_run_and_its_workers(tmp_path, sig):
    """The Ray executor under SIGTERM / SIGINT: a ``graphwm.cli.main`` process that started a
    local Ray with two tasks sleeping in their jobs and one queued ends them (the task workers
    and the local Ray it started), names the unfinished jobs and exits ``128 + signal``."""
    pytest.importorskip("ray")
    script = tmp_path / "sleeping_ray.py"
    script.write_text(SLEEPING_RAY)
    env = _env()
    env.pop("RAY_ADDRESS", None)  # a local Ray, started (and shut down) by this run
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    with _reaped(proc) as workers:
        deadline = time.monotonic() + 120
        started: list[Path] = []
        while len(started) < 2:  # the 2 cores' worth of tasks are in a job
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray tasks did not start: {_kill_tree(proc)}")
            started = list(tmp_path.glob("started-*"))
            time.sleep(0.2)
        time.sleep(0.5)  # both pid files are written
        task_workers = [psutil.Process(int(p.read_text())) for p in started]
        ray_processes = psutil.Process(proc.pid).children(recursive=True)  # raylet, GCS, ...
        workers += task_workers + ray_processes
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
        _assert_gone(task_workers + ray_processes, timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert f"interrupted by {sig.name}; stopped" in stderr, stderr
    unfinished = re.search(r"stopped (\d+) unfinished job", stderr)
    assert unfinished and int(unfinished.group(1)) >= 2, stderr
    assert all(f"  train-sleep{p.name.split('-')[1]} SAR gdm" in stderr for p in started)
    assert "Traceback" not in stderr


WATCHED_POOL = """
import sys, time, multiprocessing as mp, os
from concurrent.futures import ProcessPoolExecutor
from graphwm.store.executors import _init_worker
pool = ProcessPoolExecutor(
    2, mp_context=mp.get_context("spawn"), initializer=_init_worker, initargs=(os.getpid(),)
)
futures = [pool.submit(time.sleep, 300) for _ in range(2)]
while len(pool._processes) < 2:
    time.sleep(0.05)
print(" ".join(map(str, pool._processes)), flush=True)
time.sleep(300)
"""


def test_pool_workers_end_when_the_main_process_is_killed():
    """SIGKILL (a scheduler's after its grace period) cannot be handled: the workers notice
    their parent is gone and end themselves instead of training on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHED_POOL], stdout=subprocess.PIPE, text=True, env=_env()
    )
    with _reaped(proc) as workers:
        workers += [psutil.Process(int(pid)) for pid in proc.stdout.readline().split()]
        assert len(workers) == 2
        time.sleep(1.0)  # the workers are sleeping in their jobs
        assert all(w.is_running() for w in workers)
        proc.kill()
        proc.wait(timeout=30)
        _assert_gone(workers, timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_cli_exits_128_plus_the_signal_naming_the_stopped_jobs(tmp_path, monkeypatch, capsys, sig):
    """In-process: the signal reaches the CLI while the executor runs a job (sequentially);
    the job is logged as interrupted and the message says how to resume."""
    from graphwm import cli
    from graphwm.store.executors import run_jobs
    from graphwm.store.records import Record

    class Job:
        key, kind, env, model = "train-0123", "train", "SAR", "gdm"

        def describe(self):
            return {"kind": self.kind}

    def job_fn(job, run_dir) -> Record:
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("the signal did not interrupt the job")

    def run(args):
        run_jobs(job_fn, [Job()], ResultStore(tmp / "store"), tmp, max_workers=1, progress=False)
        return 0

    tmp = tmp_path
    monkeypatch.setattr(cli, "_run", run)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    code = cli.main(["train", "--preset", "tiny", "--out", "runs/x"])
    assert code == 128 + sig
    assert {s: signal.getsignal(s) for s in previous} == previous  # handlers restored
    err = capsys.readouterr().err
    assert f"interrupted by {sig.name}; stopped 1 unfinished job(s)" in err
    assert "  train-0123 SAR gdm\n" in err
    assert "graphwm train --preset tiny --out runs/x" in err
    events = [json.loads(line) for line in (tmp / "jobs.log").read_text().splitlines()]
    assert [e["status"] for e in events] == ["interrupted"]


@pytest.mark.slow
def test_sigterm_to_reproduce_stops_the_workers_and_a_rerun_completes(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGTERM, "reproduce")


def test_a_plain_keyboard_interrupt_after_sigterm_stays_sigterm():
    """A library that catches the handler's ``Interrupted`` and raises a plain
    ``KeyboardInterrupt`` (Ray's ``ray.wait`` does) keeps the signal that came: SIGTERM."""
    from graphwm.store.interrupts import Interrupted, raise_on_signals

    with raise_on_signals():
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
        assert Interrupted.of(KeyboardInterrupt()).signum == signal.SIGTERM
    # outside a block (no signal received) a plain KeyboardInterrupt is Ctrl-C
    assert Interrupted.of(KeyboardInterrupt()).signum == signal.SIGINT
