"""Executors: run a list of jobs through a job function, locally or on Ray.

A job function is a module-level callable ``fn(job, run_dir) -> record`` (so it pickles for a
process pool or Ray). Finished jobs (an intact record in the store) are skipped, records are
stored as each job finishes, and a failing job does not lose the others' records. A corrupt
record stops the run naming the file, or with ``RunPaths.redo_corrupt`` is quarantined and
its job rerun.

SIGINT or SIGTERM (a ``KeyboardInterrupt``, :class:`~graphwm.store.interrupts.Interrupted`
under the CLI) stops the workers at once: the local pool's processes and their children are
terminated (killed if they outlive a grace period), Ray tasks are cancelled. A job's record is
written atomically after the job, so an interrupted job has no record and a rerun runs it
again (training resumes from its last checkpoint). The exception raised is
:class:`~graphwm.store.interrupts.Interrupted`, naming the jobs that were running or queued.

A job with ``parts`` (several jobs run as one unit of work, e.g. the members of a training
ensemble) yields one record per part: its function returns, in the order of ``parts``, each
part's record or the exception that part failed with. The parts' records are stored like
jobs' records; a failed part is logged and raised after the others are stored. The unit is
finished when every part is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar, cast

from tqdm.auto import tqdm

from graphwm.store.files import CorruptFileError
from graphwm.store.interrupts import Interrupted
from graphwm.store.paths import RunPaths
from graphwm.store.records import Record
from graphwm.store.results import Job, ResultStore, log_job, parts_of

JobFn = Callable[[Any, str], Record]
R = TypeVar("R", bound=Record)


GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for a worker that does not stop
WATCHDOG_SECONDS = 1.0  # how often a pool worker checks that its parent is alive


def _run_and_store(fn: JobFn, job: Job, store_root: str, run_dir: str) -> Any:
    started = time.time()
    try:
        out = fn(job, run_dir)
    except KeyboardInterrupt:
        log_job(Path(run_dir), job, started, "interrupted")
        raise
    except BaseException:
        log_job(Path(run_dir), job, started, "failed")
        raise
    store = ResultStore(Path(store_root))
    if not hasattr(job, "parts"):
        store.save(job, out)
        log_job(Path(run_dir), job, started, "done")
        return out
    failures = []
    # a unit with parts returns one record or exception per part, in the order of its parts
    results: Sequence[Record | BaseException] = cast(Sequence, out)
    for part, result in zip(parts_of(job), results, strict=True):
        if isinstance(result, BaseException):
            failures.append(result)
            log_job(Path(run_dir), part, started, "failed")
        else:
            store.save(part, result)
            log_job(Path(run_dir), part, started, "done")
    log_job(Path(run_dir), job, started, "failed" if failures else "done")
    if failures:
        raise failures[0]
    return out


def default_workers() -> int:
    """Local pool size: one worker per core."""
    return max(1, os.cpu_count() or 1)


def _finished(
    job: Job, store: ResultStore, paths: RunPaths, verify: Callable[[Any, Any], None] | None
) -> bool:
    """Whether ``job`` has an intact record (a corrupt one: see :meth:`RunPaths.recover`)."""
    if hasattr(job, "parts"):  # every part checked (a list, not a generator: each corrupt
        # record is recovered, not only the first)
        return all([_finished(part, store, paths, verify) for part in parts_of(job)])
    if not store.has(job):
        return False
    try:
        record = store.load(job)
        if verify is not None:
            verify(record, job)
        return True
    except CorruptFileError as err:
        paths.recover(err, store.path(job))
        return False


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
) -> list[R]:
    """Run every unfinished job; return all records in the order of ``jobs`` (a job with
    ``parts``: its parts' records in their order).

    Args:
        executor: ``"local"`` (a process pool; ``max_workers=1`` runs in this process) or
            ``"ray"`` (Ray tasks; connects to ``RAY_ADDRESS`` if set, else starts a local Ray).
        num_gpus_per_job: GPUs requested per Ray task (1 for ``--device cuda`` training).
        verify: an extra integrity check ``verify(record, job)`` of a stored record (raises
            ``CorruptFileError``).
    """
    paths = paths if isinstance(paths, RunPaths) else RunPaths(Path(paths))
    run_dir = paths.root
    unique = list({job.key: job for job in jobs}.values())
    todo = [job for job in unique if not _finished(job, store, paths, verify)]
    if todo:
        if executor == "local":
            _run_local(fn, todo, store, run_dir, max_workers or default_workers(), desc, progress)
        elif executor == "ray":
            _run_ray(fn, todo, store, run_dir, num_gpus_per_job, desc, progress)
        else:
            raise ValueError(f"unknown executor {executor!r}; choose 'local' or 'ray'")
    # each stored record is fn's (the job key holds its kind)
    return [cast(R, store.load(part)) for job in jobs for part in parts_of(job)]


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


def _run_local(fn, todo, store, run_dir, workers, desc, progress) -> None:
    bar = tqdm(total=len(todo), desc=desc, disable=not progress)
    if workers <= 1 or len(todo) == 1:
        for job in todo:
            try:
                _run_and_store(fn, job, str(store.root), str(run_dir))
            except KeyboardInterrupt as err:
                bar.close()
                raise Interrupted.of(err, [describe_job(job)]) from None
            bar.update()
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # torch and fork do not mix
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(todo)),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )
        futures: dict[Future, Job] = {}
        error: BaseException | None = None
        try:
            for job in todo:  # submitting starts the workers: a signal may come meanwhile
                futures[pool.submit(_run_and_store, fn, job, str(store.root), str(run_dir))] = job
            try:
                for future in as_completed(futures):
                    future.result()
                    bar.update()
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # a failed job: the others still finish and store
                error = err
            pool.shutdown(wait=True)
        except KeyboardInterrupt as err:
            submitted = {job.key for job in futures.values()}
            unfinished = [describe_job(job) for f, job in futures.items() if not f.done()]
            unfinished += [describe_job(job) for job in todo if job.key not in submitted]
            _stop_pool(pool, futures)
            bar.close()
            raise Interrupted.of(err, unfinished) from None
        if error is not None:
            raise error
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


def ray_job_function(ray: Any, num_gpus: float) -> Any:
    """The Ray remote function that runs one job. ``max_calls=0``: a Ray worker runs any
    number of jobs, so its CUDA context (about 3 s per process on an H200, imports aside) is
    made once per worker, not once per job (Ray's default for GPU tasks is a fresh worker
    per call, ``max_calls=1``; the caching allocator hands a finished job's GPU memory to the
    next one)."""
    return ray.remote(num_gpus=num_gpus, max_retries=0, max_calls=0)(_run_and_store)


def _run_ray(fn, todo, store, run_dir, num_gpus, desc, progress) -> None:
    address = os.environ.get("RAY_ADDRESS")
    if address is None:
        # A local Ray shares this machine's environment; Ray's `uv run` integration would
        # otherwise package the working tree and rebuild the venv for every worker.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError as err:  # pragma: no cover - ray is in the dev group
        raise RuntimeError("the ray executor needs `pip install graphwm[ray]`") from err
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
        )
        for sig, handler in handlers.items():
            if callable(handler):
                signal.signal(sig, handler)
    remote = ray_job_function(ray, num_gpus)
    jobs = {remote.remote(fn, c, str(store.root), str(run_dir)): c for c in todo}
    bar = tqdm(total=len(jobs), desc=desc, disable=not progress)
    pending = list(jobs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
            bar.update(len(done))
    except KeyboardInterrupt as err:
        for ref in pending:  # force: end the worker process running the task
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        if started_here and address is None:
            ray.shutdown()  # the local Ray this run started, with its workers
        bar.close()
        raise Interrupted.of(err, [describe_job(jobs[ref]) for ref in pending]) from None
    bar.close()
