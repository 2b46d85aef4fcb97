"""What running one job yields, wherever it ran: its records or the causes it failed with, its
output (``RUN_DIR/jobs/<key>.log``) and where it ran. The worker makes the outcome
(:func:`execute`); the driver stores it (:func:`store_outcome`), so the run store is written by
one process only, whether the job ran in this process, a pool worker or a Ray node.

A job that fails by itself (an exception raised by its code: a diverging loss, a bad
hyperparameter) fails *deterministically*: rerunning it gives the same error, so its failure
is recorded beside where its record would be (``<store>/<key>.failure``, JSON with the cause
and the traceback) and a rerun reports it again without running it, unless asked
(``--retry-failed``). A failure of the machine (a lost node, a killed worker, memory or disk
errors, a corrupt input file) is not recorded: a rerun simply runs the job again.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphwm.store.files import atomic_write_json, atomic_write_text, read_json
from graphwm.store.records import Record
from graphwm.store.results import Job, ResultStore, append_jobs_log, parts_of

__all__ = [
    "Failure",
    "JobsFailed",
    "Outcome",
    "execute",
    "failure_path",
    "read_failure",
    "store_outcome",
]

#: the suffix of a recorded deterministic failure (not ``.json``: no store glob reads it)
FAILURE_SUFFIX = ".failure"


@dataclass(frozen=True)
class Failure:
    """Why a job (or one part of a unit) failed."""

    cause: str  # "ExceptionType: first line of the message"
    traceback: str = ""
    deterministic: bool = True

    @classmethod
    def of(cls, err: BaseException, deterministic: bool | None = None) -> Failure:
        msg = str(err).strip().splitlines()
        cause = f"{type(err).__name__}: {msg[0]}" if msg else type(err).__name__
        tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        return cls(cause, tb, is_deterministic(err) if deterministic is None else deterministic)


def is_deterministic(err: BaseException) -> bool:
    """Whether rerunning the job would raise ``err`` again: an error of the job's own code,
    not of the machine (memory, files, a killed process) nor of a store file (a corrupt input,
    which ``--redo-corrupt`` recomputes)."""
    from gdm_models.training.checkpoint import CheckpointError

    from graphwm.store.files import CorruptFileError

    machine = (OSError, MemoryError, CorruptFileError, CheckpointError, EOFError)
    return not isinstance(err, machine) and not failed_write(err)


#: how a full disk reads in the errors of writers that raise no OSError for it (safetensors:
#: ``SafetensorError: ... I/O error: No space left on device (os error 28)``)
_DISK_FULL = ("no space left on device", "disk quota exceeded", "os error 28", "os error 122")


def failed_write(err: BaseException) -> bool:
    """Whether ``err`` is a file write that failed (a full disk), raised as another type than
    ``OSError``: a message naming the disk's error (safetensors), or a ``RuntimeError`` of
    ``torch.save``'s writer (``[enforce fail at inline_container.cc] ... unexpected pos``,
    which names no cause). A rerun after space is freed succeeds: not a job's own failure."""
    text = str(err).lower()
    if any(words in text for words in _DISK_FULL):
        return True
    if isinstance(err, RuntimeError):
        torch_save = os.path.join("torch", "serialization.py")
        return any(
            frame.filename.endswith(torch_save) and frame.name in ("save", "_save", "__exit__")
            for frame in traceback.extract_tb(err.__traceback__)
        )
    return False


@dataclass
class Outcome:
    """The result of running one job (a unit with parts: one entry per part)."""

    key: str
    results: list[Record | Failure]
    log: str = ""
    node: str = ""
    threads: int = 1
    device: str = "cpu"
    started: float = 0.0
    seconds: float = 0.0
    pid: int = field(default_factory=os.getpid)
    #: the name of the machine that ran it (``node`` also names the Ray node there)
    host: str = field(default_factory=socket.gethostname)
    #: shipped mode (:mod:`graphwm.store.shipping`): files the job wrote, relative to the run
    #: directory, and input files it removed
    files: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[Failure]:
        return [r for r in self.results if isinstance(r, Failure)]


def node_name() -> str:
    """This machine's name (inside a Ray worker also the Ray node's id, whose first 12 hex
    digits name it, and IP: several nodes may share a machine)."""
    host = socket.gethostname()
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
            return f"{host} (ray node {node[:12]}, {ray.util.get_node_ip_address()})"
    return host


class _Tee(io.TextIOBase):
    """Writes to the job's captured output and to the stream it replaces (so a job's output
    still reaches the terminal or the Ray worker's log as it happens)."""

    def __init__(self, buffer: io.StringIO, stream: Any) -> None:
        self.buffer_, self.stream = buffer, stream

    def write(self, text: str) -> int:
        self.buffer_.write(text)
        with contextlib.suppress(Exception):
            self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self.stream.flush()


class _Capture(logging.Handler):
    def __init__(self, buffer: io.StringIO) -> None:
        super().__init__()
        self.buffer = buffer
        self.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.buffer.write(self.format(record) + "\n")


def execute(fn: Any, job: Job, run_dir: str) -> Outcome:
    """Run ``fn(job, run_dir)`` with the job's thread count (``job.threads``, the CPUs it asks
    for), its Python output captured; an exception of the job becomes its :class:`Failure`
    (a ``KeyboardInterrupt`` propagates: the run is being stopped)."""
    import torch

    threads = max(1, int(getattr(job, "threads", 1) or 1))
    torch.set_num_threads(threads)  # the job's own rule: its result never depends on the pool
    buffer = io.StringIO()
    handler = _Capture(buffer)
    root = logging.getLogger()
    root.addHandler(handler)
    started = time.time()
    parts = parts_of(job)
    try:
        out, err = _Tee(buffer, sys.stdout), _Tee(buffer, sys.stderr)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                out = fn(job, run_dir)
                if hasattr(job, "parts"):
                    # a unit returns one record or exception per part, in its parts' order
                    got: Sequence[Any] = out
                    results: list[Record | Failure] = [
                        Failure.of(r) if isinstance(r, BaseException) else r for r in got
                    ]
                else:
                    results = [out]
            except KeyboardInterrupt:
                stopped = Outcome(job.key, [], node=node_name(), threads=threads,
                                  device=str(getattr(job, "device", "cpu")), started=started,
                                  seconds=time.time() - started)  # fmt: skip
                log_line(Path(run_dir), job, stopped, "interrupted")
                raise
            except Exception as err:
                failure = Failure.of(err)
                buffer.write(failure.traceback)
                results = [failure] * len(parts)
    finally:
        root.removeHandler(handler)
    for r in results:
        if isinstance(r, Failure) and r.traceback and r.traceback not in buffer.getvalue():
            buffer.write(r.traceback)
    return Outcome(
        key=job.key,
        results=results,
        log=buffer.getvalue(),
        node=node_name(),
        threads=threads,
        device=str(getattr(job, "device", "cpu")),
        started=started,
        seconds=time.time() - started,
    )


def failure_path(store: ResultStore, job: Job) -> Path:
    """Where the recorded failure of ``job`` lives (beside its record)."""
    return store.root / f"{job.key}{FAILURE_SUFFIX}"


def read_failure(store: ResultStore, job: Job) -> Failure | None:
    """The recorded deterministic failure of ``job`` (None: none, or unreadable)."""
    path = failure_path(store, job)
    if not path.exists():
        return None
    try:
        raw = read_json(path)
        return Failure(str(raw["cause"]), str(raw.get("traceback", "")), True)
    except Exception:  # a derived file: an unreadable one is no failure (the job reruns)
        return None


def job_log_path(run_dir: Path, job: Job) -> Path:
    """``RUN_DIR/jobs/<key>.log``: the job's captured output."""
    return Path(run_dir) / "jobs" / f"{job.key}.log"


def log_line(run_dir: Path, job: Job, outcome: Outcome, status: str, **extra: Any) -> None:
    """The ``RUN_DIR/jobs.log`` line of ``job`` (or one part of a unit), where and how the
    outcome says it ran (:func:`~graphwm.store.results.append_jobs_log`, the one writer; its
    format). ``extra`` may give ``cause``, the failure's."""
    unknown = set(extra) - {"cause"}
    if unknown:
        raise TypeError(f"log_line: unknown jobs.log keys {sorted(unknown)} (allowed: cause)")
    append_jobs_log(
        run_dir,
        key=job.key,
        kind=job.kind,
        env=getattr(job, "env", None),
        model=getattr(job, "model", None),
        seed=getattr(job, "seed", None),
        status=status,
        cause=extra.get("cause"),
        host=outcome.host,
        node=outcome.node or outcome.host,
        pid=outcome.pid,
        threads=outcome.threads,
        device=outcome.device,
        started=outcome.started,
        seconds=outcome.seconds,
    )


def write_files(run_dir: Path, files: dict[str, bytes], deleted: Sequence[str]) -> None:
    """Install files a job wrote elsewhere into the run directory (each atomically; paths
    checked to stay inside it), and remove those it removed."""
    import shutil

    from graphwm.store.files import atomic_write, inside

    for rel in deleted:
        target = inside(run_dir, rel, Path(run_dir))
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    for rel, data in sorted(files.items()):
        target = inside(run_dir, rel, Path(run_dir))
        atomic_write(target, _writer(data))


def _writer(data: bytes) -> Any:
    """``write(tmp)`` of :func:`~graphwm.store.files.atomic_write` for ``data``."""
    return lambda tmp: Path(tmp).write_bytes(data)


def store_outcome(
    store: ResultStore, run_dir: Path, job: Job, parts: Sequence[Job], outcome: Outcome
) -> None:
    """Write ``outcome`` into the run store (the driver's work): shipped files, each part's
    record or recorded failure (``parts``: the job's
    :func:`~graphwm.store.results.parts_of`), ``jobs/<key>.log`` and ``jobs.log`` lines."""
    run_dir = Path(run_dir)
    if outcome.files or outcome.deleted:
        write_files(run_dir, outcome.files, outcome.deleted)
    atomic_write_text(job_log_path(run_dir, job), outcome.log)
    for part, result in zip(parts, outcome.results, strict=True):
        where = failure_path(store, part)
        if not isinstance(result, Failure):
            store.save(part, result)
            where.unlink(missing_ok=True)
        elif result.deterministic:
            body = {"key": part.key, "cause": result.cause, "traceback": result.traceback}
            atomic_write_json(where, body)
    for part, result in zip(parts, outcome.results, strict=True):
        if hasattr(job, "parts"):  # a unit: a line per part too
            failure = result if isinstance(result, Failure) else None
            cause = {"cause": failure.cause} if failure else {}
            log_line(run_dir, part, outcome, "failed" if failure else "done", **cause)
    failures = outcome.failures
    status = "failed" if failures else "done"
    log_line(run_dir, job, outcome, status, **({"cause": failures[0].cause} if failures else {}))


class JobsFailed(RuntimeError):
    """Some jobs failed; every other job ran and stored its record.

    Attributes:
        failures: ``(job description, job, failure)`` of each failed job or part.
        records: the records in the order :func:`~graphwm.store.executors.run_jobs` returns
            them, ``None`` where a job failed.
    """

    def __init__(self, failures: list[tuple[str, Job, Failure]], records: list[Any]) -> None:
        self.failures = failures
        self.records = records
        first = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        super().__init__(f"{len(failures)} job(s) failed: {first[0]}: {first[2].cause}{more}")

    def merged(self, other: JobsFailed) -> JobsFailed:
        return JobsFailed(self.failures + other.failures, self.records + other.records)
