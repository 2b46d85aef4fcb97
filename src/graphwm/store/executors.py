"""Executors: run a list of jobs through a job function, locally or on Ray.

A job function is a module-level callable ``fn(job, run_dir) -> record`` (so it pickles for a
process pool or Ray). Finished jobs (an intact record in the store) are skipped. Each job runs
through :func:`graphwm.store.outcomes.execute` (its thread count, its output captured, an
exception of its own caught as its failure) wherever it runs, and this process stores each
outcome as it comes (:func:`graphwm.store.outcomes.store_outcome`): the run store has one
writer. A corrupt record stops the run naming the file, or with ``RunPaths.redo_corrupt`` is
quarantined and its job rerun.

A failing job never stops the others: every job runs, then
:class:`~graphwm.store.outcomes.JobsFailed` names the failures; a deterministic failure is
recorded and not rerun unless ``retry_failed`` (docs/cluster.md, "Failed jobs").

On Ray the run store stays this process's (:mod:`graphwm.store.shipping`): a job's inputs
travel to its node, its outputs come back, a training job sends its resumable state back while
it runs, and a job lost with its node is submitted again and resumes.

SIGINT or SIGTERM (a ``KeyboardInterrupt``, :class:`~graphwm.store.interrupts.Interrupted`
under the CLI) stops the workers at once: the local pool's processes and their children are
terminated (killed if they outlive a grace period), Ray tasks are cancelled. A job's record is
written atomically after the job, so an interrupted job has no record and a rerun runs it
again (training resumes from its last checkpoint). The exception raised is
:class:`~graphwm.store.interrupts.Interrupted`, naming the jobs that were running or queued.

The local executor runs ``max_workers`` jobs at a time: one in this process (the driver,
which needs no start-up) and the others in ``max_workers - 1`` spawned pool workers. Inside
:func:`shared_pool` (every pipeline command enters one: :mod:`graphwm.pipeline`) the pool's
workers are started once and serve every stage: a spawned worker imports torch and the
packages (seconds to tens of seconds), which a pool per stage paid again at every stage; the
driver works meanwhile, and runs a job it gave a worker that has not started it rather than
wait (each job runs once: :func:`_claim`). A stage queues all its jobs on the pool at once,
longest first where the caller estimates their cost (:func:`longest_first`), so a worker
that ends a job takes the next one while the driver is still in its own; the block's end
ends the idle workers at once (one still starting is not waited for). A reused pool worker
starts each job from the state it had before its first job (:func:`_pooled_execute`: the
global random generators, torch's thread count and flags, the working directory), so a job's
result never depends on which jobs its worker ran before it, nor on the worker count. A pool
worker that dies breaks the pool (the job it was running fails as a machine failure would),
the driver runs the stage's other jobs, and the next stage starts a new pool.

A job with ``parts`` (several jobs run as one unit of work, e.g. the members of a training
ensemble) yields one record per part: its function returns, in the order of ``parts``, each
part's record or the exception that part failed with. The parts' records are stored like
jobs' records, a failed part as a failed job. The unit is finished when every part is.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from tqdm.auto import tqdm

from graphwm.store.files import CorruptFileError, open_log
from graphwm.store.interrupts import Interrupted
from graphwm.store.outcomes import (
    Failure,
    JobsFailed,
    Outcome,
    execute,
    failure_path,
    read_failure,
    store_outcome,
)
from graphwm.store.paths import RunPaths
from graphwm.store.records import Record
from graphwm.store.results import Job, ResultStore, parts_of

JobFn = Callable[[Any, str], Record]
R = TypeVar("R", bound=Record)


GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for a worker that does not stop
WATCHDOG_SECONDS = 1.0  # how often a pool worker checks that its parent is alive


def default_workers() -> int:
    """Local jobs at a time (the driver and its pool workers): one per core."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class _Unit:
    """A job as :func:`run_jobs` handles it: its parts (:func:`~graphwm.store.results.parts_of`)
    and their descriptions (:func:`describe_job`), worked out once."""

    job: Job
    parts: tuple[Job, ...]
    names: tuple[str, ...]


def _unit(job: Job) -> _Unit:
    parts = parts_of(job)
    return _Unit(job, parts, tuple(describe_job(part) for part in parts))


def _finished(
    unit: _Unit, store: ResultStore, paths: RunPaths, verify: Callable[[Any, Any], None] | None
) -> bool:
    """Whether every part of ``unit`` has an intact record (each corrupt one is recovered,
    not only the first: :meth:`RunPaths.recover`)."""
    finished = True
    for part in unit.parts:
        try:
            if store.has(part) and verify is not None:
                verify(store.load(part), part)
            elif store.has(part):
                store.load(part)
            else:
                finished = False
        except CorruptFileError as err:
            paths.recover(err, store.path(part))
            finished = False
    return finished


def run_jobs(
    fn: Callable[[Any, str], R],
    jobs: Sequence[Job],
    store: ResultStore,
    paths: RunPaths | Path,
    *,
    executor: str = "local",
    max_workers: int | None = None,
    num_gpus_per_job: float = 0.0,
    desc: str = "jobs",
    progress: bool = True,
    verify: Callable[[R, Any], None] | None = None,
    retry_failed: bool = False,
    cost: Callable[[Any], float] | None = None,
) -> list[R]:
    """Run every unfinished job; return all records in the order of ``jobs`` (a job with
    ``parts``: its parts' records in their order).

    A failing job never stops the others: every job runs (or is skipped for a failure
    recorded by an earlier run, unless ``retry_failed``), then :class:`JobsFailed` is raised
    naming each failed job and its cause, with the records of the others.

    Args:
        executor: ``"local"`` (``max_workers`` jobs at a time, this process and
            ``max_workers - 1`` pool processes; ``max_workers=1`` runs in this process) or
            ``"ray"`` (Ray tasks; connects to ``RAY_ADDRESS`` if set, else starts a local Ray;
            the run store stays this process's: :mod:`graphwm.store.shipping`).
        num_gpus_per_job: GPUs requested per Ray task (1 for ``--device cuda`` training, a
            fraction for evaluation).
        verify: an extra integrity check ``verify(record, job)`` of a stored record (raises
            ``CorruptFileError``).
        retry_failed: run again the jobs whose failure an earlier run recorded.
        cost: an estimate of a job's run time (any unit): jobs start longest first
            (:func:`longest_first`); in the order of ``jobs`` without it.
    """
    paths = paths if isinstance(paths, RunPaths) else RunPaths(Path(paths))
    run_dir = paths.root
    retry_failed = retry_failed or paths.retry_failed
    units = {job.key: _unit(job) for job in jobs}  # one per key, parts and names once
    todo = [unit for unit in units.values() if not _finished(unit, store, paths, verify)]
    failed: dict[str, tuple[str, Job, Failure]] = {}
    runnable = []
    for unit in todo:
        earlier = [
            (part, name, f)
            for part, name in zip(unit.parts, unit.names, strict=True)
            if not store.has(part) and (f := read_failure(store, part)) is not None
        ]
        if earlier and not retry_failed:
            for part, name, f in earlier:  # failed deterministically before: not run again
                cause = f"{f.cause} (recorded by an earlier run; --retry-failed runs it again)"
                failed[part.key] = (name, part, Failure(cause, f.traceback))
            continue
        for part in unit.parts:
            failure_path(store, part).unlink(missing_ok=True)
        runnable.append(unit.job)

    def done(job: Job, outcome: Outcome) -> None:
        unit = units[job.key]
        store_outcome(store, run_dir, job, unit.parts, outcome)
        for part, name, result in zip(unit.parts, unit.names, outcome.results, strict=True):
            if isinstance(result, Failure):
                failed[part.key] = (name, part, result)

    if runnable:
        if executor == "local":
            workers = max_workers or default_workers()
            _run_local(fn, runnable, run_dir, workers, desc, progress, done, cost)
        elif executor == "ray":
            ordered = longest_first(runnable, cost)
            _run_ray(fn, ordered, run_dir, num_gpus_per_job, desc, progress, done)
        else:
            raise ValueError(f"unknown executor {executor!r}; choose 'local' or 'ray'")
    # each stored record is fn's (the job key holds its kind)
    records = [
        cast(R, store.load(part)) if part.key not in failed else None
        for job in jobs
        for part in units[job.key].parts
    ]
    if failed:
        raise JobsFailed(list(failed.values()), records)
    return cast(list[R], records)


def longest_first(jobs: Iterable[Job], cost: Callable[[Any], float] | None) -> list[Job]:
    """``jobs`` in decreasing ``cost`` (equal costs in their order; all in their order without
    a cost): started so, the longest jobs do not end a stage alone while other cores idle
    (the order never changes a result: each job's is its own)."""
    jobs = list(jobs)
    return jobs if cost is None else sorted(jobs, key=lambda job: -cost(job))


def describe_job(job: Job) -> str:
    """One line naming a job: its key, env and model where it has them."""
    parts = [job.key, *(str(v) for k in ("env", "model") if (v := getattr(job, k, None)))]
    return " ".join(parts)


def _init_worker(parent: int) -> None:
    """Pool worker initializer.

    A terminal's Ctrl-C reaches the whole process group: the main process alone handles it
    (and stops the workers), so SIGINT is ignored here. A main process that dies without
    stopping its workers (SIGKILL, e.g. a scheduler's after its grace period) would leave
    them training, or waiting for work, forever: a watchdog thread ends the worker once its
    parent (``parent``, the pid of the process that made the pool) is gone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_SECONDS)
        os._exit(1)  # no clean-up to wait for: the job's record is never half written

    threading.Thread(target=watch, name="graphwm-parent-watchdog", daemon=True).start()


#: what a pool worker's global state was before its first job (:func:`_pooled_execute`)
_BASELINE: dict[str, Any] | None = None


def _worker_state() -> dict[str, Any]:
    """The global state of this process a job may change and the next job could see."""
    import random

    import numpy as np
    import torch

    return {
        "random": random.getstate(),
        # the legacy global generator: a library may draw from it
        "numpy": np.random.get_state(),  # noqa: NPY002
        "torch_rng": torch.random.get_rng_state(),
        "torch_seed": torch.initial_seed(),
        "threads": torch.get_num_threads(),
        "dtype": torch.get_default_dtype(),
        "grad": torch.is_grad_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cwd": os.getcwd(),
    }


def _restore_worker_state(state: dict[str, Any]) -> None:
    """Put back ``state`` (:func:`_worker_state`): a job in a reused worker starts where the
    worker's first job started."""
    import random

    import numpy as np
    import torch

    random.setstate(state["random"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    torch.random.set_rng_state(state["torch_rng"])
    if torch.cuda.is_initialized():  # CUDA started by an earlier job: its generators too
        torch.cuda.manual_seed_all(state["torch_seed"])
    torch.set_num_threads(state["threads"])
    torch.set_default_dtype(state["dtype"])
    torch.set_grad_enabled(state["grad"])
    torch.use_deterministic_algorithms(
        state["deterministic"], warn_only=state["deterministic_warn_only"]
    )
    if os.getcwd() != state["cwd"]:
        os.chdir(state["cwd"])


def _claim(claims: str, job: Job) -> bool:
    """Whether this process takes ``job``: the first of the driver and a pool worker to
    create its claim file (atomically) runs it, the other leaves it."""
    try:
        os.close(os.open(Path(claims) / job.key, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except (FileExistsError, FileNotFoundError):  # taken, or its run_jobs call is over
        return False
    return True


def _pooled_execute(fn: Any, job: Job, run_dir: str, claims: str) -> Outcome | None:
    """:func:`~graphwm.store.outcomes.execute` in a pool worker, from the worker's state
    before its first job (recorded then, restored before every later job); None when the
    driver took the job first (:func:`_claim`)."""
    global _BASELINE
    if not _claim(claims, job):
        return None
    if _BASELINE is None:
        _BASELINE = _worker_state()
    else:
        _restore_worker_state(_BASELINE)
    return execute(fn, job, run_dir)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes (started as jobs are submitted)."""
    import multiprocessing as mp

    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),  # torch and fork do not mix
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )


class _SharedPool:
    """The worker pool of a :func:`shared_pool` block, made by the first parallel stage."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None
        self.workers = 0

    def get(self, workers: int) -> ProcessPoolExecutor:
        """The block's pool of ``workers`` processes (a new one if the size asked changed or
        a worker died: a broken pool runs nothing more)."""
        if self.pool is not None and (self.workers != workers or _broken(self.pool)):
            self.close()
        if self.pool is None:
            self.pool, self.workers = _new_pool(workers), workers
        return self.pool

    def discard(self, pool: ProcessPoolExecutor) -> None:
        """Forget ``pool`` (stopped by the caller, or broken): the next stage starts anew."""
        if self.pool is pool:
            self.pool = None

    def close(self) -> None:
        """End the pool's workers at once. Every stage waited for its jobs, so they hold
        none; a worker still starting (importing torch: seconds) is not waited for, which
        a clean shutdown would do (a run too short for the worker to take a job paid its
        whole start-up at the end)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            _stop_pool(pool, [])


def _broken(pool: ProcessPoolExecutor) -> bool:
    return bool(getattr(pool, "_broken", False))


_SHARED: ContextVar[_SharedPool | None] = ContextVar("graphwm_shared_pool", default=None)


def active_pool() -> ProcessPoolExecutor | None:
    """The started worker pool of the enclosing :func:`shared_pool` block, for work beside
    the driver's that needs no job record (the report's figures: its workers are idle once
    the stages are done); None outside a block, before its first parallel stage, or once a
    worker died."""
    scope = _SHARED.get()
    if scope is None or scope.pool is None or _broken(scope.pool):
        return None
    return scope.pool


@contextlib.contextmanager
def shared_pool() -> Iterator[None]:
    """Run every local parallel stage inside the block on one worker pool.

    The pool starts with the first :func:`run_jobs` call that needs one (``executor="local"``,
    ``max_workers`` > 1, more than one job) and serves every later call asking for as many
    workers, so its workers import torch and the packages once per block instead of once per
    stage. Its workers are ended at once when the block ends (they hold no job then; one
    still starting is not waited for). A block inside another uses the outer block's pool.
    """
    if _SHARED.get() is not None:
        yield
        return
    scope = _SharedPool()
    token = _SHARED.set(scope)
    try:
        yield
    finally:
        _SHARED.reset(token)
        scope.close()


def warm_pool(workers: int, modules: Sequence[str]) -> None:
    """Start the enclosing :func:`shared_pool` block's pool for ``workers`` jobs at a time now
    (``workers - 1`` processes: the driver is the other worker), each process importing
    ``modules`` at once. The workers then import torch and the job modules while the driver
    checks, collects and fits on one core, instead of in their first jobs. Nothing outside a
    block or for fewer than 2 workers. A module that fails to import is left to the job that
    needs it (which raises its error)."""
    scope = _SHARED.get()
    if scope is None or workers < 2:
        return
    pool = scope.get(workers - 1)
    with contextlib.suppress(BrokenProcessPool):
        for _ in range(workers - 1):
            pool.submit(_import_modules, tuple(modules))


def _import_modules(modules: Sequence[str]) -> list[str]:
    """Import ``modules`` in a pool worker (:func:`warm_pool`); the names imported."""
    done = []
    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
            done.append(name)
    return done


def _run_local(fn, todo, run_dir, workers, desc, progress, done, cost=None) -> None:
    """The local executor: ``workers`` jobs at a time, one in this process (the driver) and
    the others in pool worker processes.

    Jobs start in decreasing ``cost`` (when given; ties in the order of ``todo``), so the
    longest ones do not end the stage alone on one core. Every job is queued on the pool at
    once, in that order: a worker that ends a job takes the next without the driver (busy in
    a job of its own) having to hand it over. The driver takes the first job that no worker
    has claimed, its first pick leaving the first ``workers - 1`` jobs to the pool; whichever
    claims a job first runs it (:func:`_claim`), so each job runs once and no stage waits for
    a worker's start-up. A pool worker that dies fails the job it was running (not
    deterministically: a rerun runs it); the driver runs the stage's other jobs.
    """
    import shutil
    import tempfile

    order = longest_first(todo, cost)
    bar = tqdm(total=len(order), desc=desc, disable=not progress)
    if workers <= 1 or len(order) == 1:
        for job in order:
            try:
                outcome = execute(fn, job, str(run_dir))
            except KeyboardInterrupt as err:
                bar.close()
                raise Interrupted.of(err, [describe_job(job)]) from None
            done(job, outcome)
            bar.update()
        bar.close()
        return
    scope = _SHARED.get()
    size = workers - 1  # the pool's processes: the driver is the other worker
    pool = _new_pool(min(size, len(order) - 1)) if scope is None else scope.get(size)
    claims = tempfile.mkdtemp(prefix="graphwm-claims-")
    unstored = {job.key: job for job in order}  # running or queued (an interrupt names them)
    futures: dict[Future, Job] = {}  # queued on the pool, outcome not stored yet
    taken: set[str] = set()  # claimed, by the driver or a pool worker
    broken = False

    def store(future: Future) -> None:
        nonlocal broken
        job = futures.pop(future)
        try:
            outcome = future.result()
        except Exception as err:  # the worker died (killed, out of memory)
            broken = broken or isinstance(err, BrokenProcessPool)
            if job.key not in unstored or not (Path(claims) / job.key).exists():
                return  # the driver ran it, or no worker started it: the driver's loop takes it
            failure = Failure.of(err, deterministic=False)
            outcome = Outcome(job.key, [failure] * len(parts_of(job)), failure.traceback)
        if outcome is None:  # the driver claimed it first
            return
        finish(job, outcome)

    def finish(job: Job, outcome: Outcome) -> None:
        done(job, outcome)
        del unstored[job.key]
        bar.update()

    def claim_next(skip: int) -> Job | None:
        for job in order[skip:]:
            if job.key in unstored and job.key not in taken:
                taken.add(job.key)
                if _claim(claims, job):
                    return job
        return None

    try:
        for job in order:
            try:  # submitting starts a worker: a signal may come meanwhile
                futures[pool.submit(_pooled_execute, fn, job, str(run_dir), claims)] = job
            except BrokenProcessPool:
                broken = True
                break
        skip = min(size, len(futures))  # the workers' first jobs
        while unstored:
            mine = claim_next(skip)
            skip = 0
            if mine is not None:
                finish(mine, execute(fn, mine, str(run_dir)))
            elif futures:
                wait(futures, return_when=FIRST_COMPLETED)
            else:  # every job claimed, none queued: a claimed job's outcome got lost
                raise RuntimeError(f"jobs claimed but never stored: {sorted(unstored)}")
            for future in [f for f in futures if f.done()]:
                store(future)
        if scope is None:  # idle now: a worker still starting is not waited for
            _stop_pool(pool, [])
        elif broken:  # a worker died: the pool runs nothing more, the next stage's is new
            scope.discard(pool)
            _stop_pool(pool, [])
    except KeyboardInterrupt as err:
        unfinished = [describe_job(job) for job in unstored.values()]
        _stop_pool(pool, futures)
        if scope is not None:
            scope.discard(pool)
        bar.close()
        raise Interrupted.of(err, unfinished) from None
    except BaseException:
        # the driver failed (storing an outcome): the pool's jobs are not waited for
        if any(not f.done() for f in futures):
            _stop_pool(pool, futures)
            if scope is not None:
                scope.discard(pool)
        raise
    finally:
        shutil.rmtree(claims, ignore_errors=True)
    bar.close()


def _stop_pool(pool: ProcessPoolExecutor, futures: Iterable[Future]) -> None:
    """Cancel the queued jobs and end the workers (and whatever they started) now.

    The pool's manager thread then marks the cancelled futures broken, which raises
    ``InvalidStateError: CANCELLED`` there (a known race of ``concurrent.futures``); that
    thread's traceback is noise on a clean stop, so it is not printed (any other thread error
    still is).
    """
    from concurrent.futures import InvalidStateError

    previous = threading.excepthook

    def quiet(args: threading.ExceptHookArgs) -> None:
        if not isinstance(args.exc_value, InvalidStateError):
            previous(args)

    threading.excepthook = quiet
    try:
        for future in futures:
            future.cancel()
        workers = list((getattr(pool, "_processes", None) or {}).values())
        terminate_processes([p.pid for p in workers if p.pid is not None])
        # the pool sees its workers gone and closes its queues: nothing is left to wait for
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        threading.excepthook = previous


def terminate_processes(pids: Sequence[int], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM ``pids`` and their descendants; SIGKILL those alive after ``grace`` seconds."""
    import psutil

    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(pid)
            procs += [*parent.children(recursive=True), parent]
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)


#: how often a job lost to a failure of its node or worker is submitted again (it resumes
#: from the last state its node sent back)
SYSTEM_RETRIES = 3
#: how long the start-up check waits for a node to answer
PROBE_SECONDS = 300.0

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    """``text`` without terminal colour codes (Ray colours its task headers)."""
    return _ANSI.sub("", text)


def ray_runtime_env() -> dict | None:
    """The explicit ``runtime_env`` of the Ray job graphwm starts (``ray.init``): the four
    packages' source folders as ``py_modules``, so every node runs the driver's code whatever
    it has installed (their dependencies must be installed on the nodes).

    None (ship nothing) with ``GRAPHWM_RAY_SHIP_CODE=0`` (the nodes' own install is used),
    and inside a job started by ``ray job submit`` (its ``--working-dir`` or
    ``--runtime-env`` is the job's, set by the submission). Either way every node's code is
    checked against the driver's before any work (:func:`check_nodes`)."""
    if os.environ.get("GRAPHWM_RAY_SHIP_CODE", "1") == "0":
        return None
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):  # a submitted job: its own env
        return None
    from graphwm.store.versions import package_dirs

    return {"py_modules": package_dirs()}


def ray_job_function(ray: Any, num_gpus: float, num_cpus: float = 1) -> Any:
    """The Ray remote function that runs one job (:func:`graphwm.store.shipping.run_shipped`).

    It asks for the CPUs the job runs threads on (``num_cpus``, the job's ``threads``) and
    ``num_gpus``. ``max_calls=0``: a Ray worker runs any number of jobs, so its CUDA context
    (about 3 s per process on an H200, imports aside) is made once per worker, not once per
    job (Ray's default for GPU tasks is a fresh worker per call, ``max_calls=1``; the caching
    allocator hands a finished job's GPU memory to the next one). ``max_retries=0``: a job lost
    with its node is submitted again by the driver, with the state it sent back
    (:data:`SYSTEM_RETRIES`)."""
    from graphwm.store.shipping import run_shipped

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=0, max_calls=0)(run_shipped)


def _probe() -> str:
    from graphwm.store.versions import code_digest

    return code_digest()


def check_nodes(ray: Any) -> None:
    """Before any work: every alive node with CPUs runs the driver's code (the shipped
    ``runtime_env`` works there and its code digest is the driver's); else refuse naming the
    node (address and node id) and the fix: a node whose raylet died or that does not answer
    is named as such, not as a node that lacks graphwm's dependencies."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from graphwm.store.versions import CodeMismatchError, code_digest

    expected = code_digest()
    probes = {}
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0:
            where = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            remote = ray.remote(num_cpus=0, scheduling_strategy=where)(_probe)
            name = f"{node.get('NodeManagerAddress')} (node id {node.get('NodeID')})"
            probes[remote.remote()] = name
    if not probes:
        return
    ready, _ = ray.wait(list(probes), num_returns=len(probes), timeout=PROBE_SECONDS)
    for ref, node in probes.items():
        if ref not in ready:
            raise CodeMismatchError(
                f"Ray node {node} did not answer within {PROBE_SECONDS:g} s: its raylet may have "
                "died or the node is unreachable; restart Ray there or remove the node "
                "(`ray status`, docs/cluster.md)"
            )
        try:
            digest = ray.get(ref)
        except Exception as err:
            raise CodeMismatchError(_probe_failure(node, err)) from None
        if digest != expected:
            raise CodeMismatchError(
                f"Ray node {node} runs graphwm code {digest}, this driver {expected}: ship the "
                "code (GRAPHWM_RAY_SHIP_CODE=1, the default) or install the same checkout "
                "there (docs/cluster.md)"
            )


#: Ray's errors of a node or its raylet dying (not of the code that ran there)
_NODE_ERRORS = (
    "NodeDiedError",
    "LocalRayletDiedError",
    "RaySystemError",
    "WorkerCrashedError",
    "ObjectLostError",
    "OwnerDiedError",
    "GetTimeoutError",
)


def _probe_failure(node: str, err: Exception) -> str:
    """The refusal of a node whose code probe failed: a dead node or raylet named as such, a
    task that raised (e.g. an import error: a missing dependency) named with its cause."""
    last = (plain(str(err)).strip().splitlines() or [type(err).__name__])[-1]
    kinds = {cls.__name__ for cls in type(err).__mro__}
    if kinds & set(_NODE_ERRORS) or "raylet" in str(err).lower():
        return (
            f"Ray node {node} is not usable: its raylet or the node died "
            f"({type(err).__name__}: {last}); restart Ray there or remove the node "
            "(`ray status`, docs/cluster.md)"
        )
    return (
        f"Ray node {node} cannot run graphwm's code ({last}); install graphwm's dependencies "
        "on every node (docs/cluster.md)"
    )


def _event(run_dir: Path, message: str) -> None:
    """Append ``message`` to ``RUN_DIR/events.log`` (quietly: not a warning)."""
    import json

    line = json.dumps({"time": round(time.time(), 3), "pid": os.getpid(), "message": message})
    fd = open_log(Path(run_dir) / "events.log")
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class _Inputs:
    """The driver's input files as Ray objects, each put once (again when it changed)."""

    def __init__(self, ray: Any, run_dir: Path) -> None:
        self.ray, self.run_dir = ray, Path(run_dir)
        self.refs: dict[tuple[str, int, int], Any] = {}

    def of(self, job: Job) -> dict[str, Any]:
        from graphwm.store.shipping import input_files

        out = {}
        for rel in input_files(self.run_dir, job):
            st = (self.run_dir / rel).stat()
            stamp = (rel, st.st_size, st.st_mtime_ns)
            if stamp not in self.refs:
                self.refs[stamp] = self.ray.put((self.run_dir / rel).read_bytes())
            out[rel] = self.refs[stamp]
        return out


def _run_ray(fn, todo, run_dir, num_gpus, desc, progress, done) -> None:
    # graphwm ships its code explicitly (ray_runtime_env): Ray's `uv run` integration would
    # otherwise pack the working directory, or not, depending on how the driver was started
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    address = os.environ.get("RAY_ADDRESS")
    try:
        import ray
        from ray.exceptions import RayError, RayTaskError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as err:  # pragma: no cover - ray is in the dev group
        raise RuntimeError("the ray executor needs `pip install graphwm[ray]`") from err
    from graphwm.store.shipping import StateInbox
    from graphwm.store.versions import code_digest

    run_dir = Path(run_dir).resolve()
    started_here = not ray.is_initialized()
    if started_here:
        # ray.init installs its own SIGTERM handler (log and exit 1); keep the caller's, so
        # that SIGTERM stops a Ray run as cleanly as a local one (exit 143, jobs named)
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        ray.init(
            address=address,
            ignore_reinit_error=True,
            log_to_driver=False,
            include_dashboard=False,
            runtime_env=ray_runtime_env(),
        )
        for sig, handler in handlers.items():
            if callable(handler):
                signal.signal(sig, handler)
    check_nodes(ray)
    here = ray.get_runtime_context().get_node_id()
    inbox: Any = (
        ray.remote(num_cpus=0)(StateInbox)
        .options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
        .remote()
    )
    code = code_digest()
    inputs = _Inputs(ray, run_dir)
    attempts: dict[str, int] = {}
    finished: set[str] = set()

    def submit(job: Job) -> Any:
        remote = ray_job_function(ray, num_gpus, max(1, int(getattr(job, "threads", 1) or 1)))
        return remote.remote(fn, job, inputs.of(job), inbox, code)

    taking: list[Any] = [inbox.take.remote()]

    def drain() -> None:
        """Write the states the inbox holds, without waiting for it (a state of a job whose
        outcome is stored already is older than that outcome: dropped)."""
        from graphwm.store.outcomes import write_files

        ready, _ = ray.wait(taking, timeout=0)
        if not ready:
            return
        try:
            states = ray.get(ready[0])
        except RayError:  # the inbox is gone: jobs run on, without sending states
            return
        taking[0] = inbox.take.remote()
        for key, (step, node, files) in states.items():
            if key not in finished:
                write_files(run_dir, files, [])
                _event(run_dir, f"job {key}: resumable state of step {step} from node {node}")

    pending = {submit(job): job for job in todo}
    bar = tqdm(total=len(pending), desc=desc, disable=not progress)
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            drain()  # before a finished job's outcome: its last state never overwrites it
            for ref in ready:
                job = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except RayTaskError as err:  # the task's own wrapper failed (not the job)
                    cause = err.cause if err.cause is not None else err
                    failure = Failure(
                        plain(Failure.of(cause).cause), plain(str(err)), deterministic=False
                    )
                    outcome = Outcome(job.key, [failure] * len(parts_of(job)), failure.traceback)
                except RayError as err:  # its node or worker was lost: resubmit, it resumes
                    n = attempts[job.key] = attempts.get(job.key, 0) + 1
                    cause = plain(str(err)).strip().splitlines()[0]
                    if n <= SYSTEM_RETRIES:
                        _event(run_dir, f"job {job.key} lost ({cause}); retry {n}, resuming")
                        pending[submit(job)] = job
                        continue
                    failure = Failure(f"{type(err).__name__}: {cause}", plain(str(err)), False)
                    outcome = Outcome(job.key, [failure] * len(parts_of(job)), failure.traceback)
                finished.add(job.key)
                done(job, outcome)
                bar.update()
    except KeyboardInterrupt as err:
        for ref in pending:  # force: end the worker process running the task
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        if started_here and address is None:
            ray.shutdown()  # the local Ray this run started, with its workers
        bar.close()
        raise Interrupted.of(err, [describe_job(job) for job in pending.values()]) from None
    finally:
        with contextlib.suppress(Exception):
            ray.kill(inbox)
    bar.close()
