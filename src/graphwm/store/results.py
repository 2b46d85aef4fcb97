"""Jobs and their result records: a store keyed by content, and the run log.

A job is a frozen dataclass with a ``key`` (a hash of everything that determines its output,
the keys of its inputs included; see :mod:`graphwm.store.files`) and a ``kind``. Its result is a
record (:mod:`graphwm.store.records`) stored as ``<store root>/<key>.json``, written and read
through the same record type, so a rerun finds finished jobs and skips them, and a changed setting
makes a new job.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Protocol

from graphwm.store.files import (
    CorruptFileError,
    atomic_write_json,
    open_log,
    read_json,
    regular_file,
)
from graphwm.store.records import Record, ResultsFormatError, check_digest, parse_record, seal

__all__ = [
    "JOBS_LOG_KEYS",
    "Job",
    "ResultStore",
    "append_jobs_log",
    "atomic_write_json",
    "log_event",
    "parts_of",
    "read_jobs_log",
]


class Job(Protocol):
    """What the store and the executors need of a job."""

    @property
    def key(self) -> str: ...

    @property
    def kind(self) -> str: ...  # read-only, so frozen dataclasses match

    def describe(self) -> dict[str, Any]:
        """The JSON-able payload the key hashes (stored next to the result)."""
        ...


def parts_of(job: Any) -> tuple[Job, ...]:
    """The jobs whose records ``job`` yields: its ``parts`` (several jobs run as one unit,
    e.g. a training ensemble; the unit itself has no record) or the job itself."""
    parts = getattr(job, "parts", None)
    return tuple(parts) if parts is not None else (job,)


class ResultStore:
    """One JSON record per finished job under ``root`` (``root/<key>.json``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, job: Job) -> Path:
        """Where the record of ``job`` lives."""
        return self.root / f"{job.key}.json"

    def has(self, job: Job) -> bool:
        """Whether ``job`` has a record (its integrity is checked by :meth:`load`)."""
        return self.path(job).exists()

    def load(self, job: Job) -> Record:
        """The stored record of ``job``.

        Raises:
            CorruptFileError: the file is unreadable, is not a valid record, belongs to
                another job, or differs from its digest (names the file).
        """
        path = self.path(job)
        raw = read_json(path)
        if not isinstance(raw, dict) or raw.get("key") != job.key:
            raise CorruptFileError(path, f"does not hold the record of job {job.key}")
        check_digest(raw, path)
        try:
            return parse_record(raw, path)
        except ResultsFormatError as err:
            raise CorruptFileError(path, str(err)) from None

    def save(self, job: Job, record: Record) -> Path:
        """Store ``record`` atomically, with the job's key and payload and the digest of it all
        attached."""
        path = self.path(job)
        stored = {**record.to_dict(), "key": job.key, "job": job.describe()}
        atomic_write_json(path, seal(json.loads(json.dumps(stored, allow_nan=True))))
        return path


#: the keys of every line of ``RUN_DIR/jobs.log``, in this order, whoever writes it (the
#: driver's collect and fit steps, and every job an executor ran): one format for all readers
JOBS_LOG_KEYS = (
    "key",
    "kind",
    "env",
    "model",
    "seed",
    "status",
    "cause",
    "host",
    "node",
    "pid",
    "threads",
    "device",
    "started",
    "seconds",
)


def append_jobs_log(
    run_dir: Path,
    *,
    key: str,
    kind: str,
    status: str,
    started: float,
    seconds: float | None = None,
    env: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    cause: str | None = None,
    host: str | None = None,
    node: str | None = None,
    pid: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Append one line to ``run_dir/jobs.log`` (the one writer of that file): what ran, where
    (``host``, the machine's name; ``node``, the cluster node inside Ray, else the host;
    ``pid``), with how many torch threads on which device, when and for how long, and how it
    ended. Every line has the keys :data:`JOBS_LOG_KEYS`; what is not given is this process's
    (host, pid, torch threads), ``seconds`` the time since ``started``. One atomic
    ``O_APPEND`` write, so concurrent writers never interleave a line. Returns the line."""
    if threads is None:
        import torch  # lazily: the store's readers need no torch

        threads = torch.get_num_threads()
    host = host or socket.gethostname()
    line = {
        "key": key,
        "kind": kind,
        "env": env,
        "model": model,
        "seed": seed,
        "status": status,
        "cause": cause,
        "host": host,
        "node": node or host,
        "pid": os.getpid() if pid is None else pid,
        "threads": threads,
        "device": device,
        "started": round(started, 3),
        "seconds": round(time.time() - started if seconds is None else seconds, 3),
    }
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    fd = open_log(Path(run_dir) / "jobs.log")
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
    return line


def log_event(
    run_dir: Path,
    kind: str,
    key: str,
    env: str | None,
    model: str | None,
    started: float,
    status: str,
) -> None:
    """The ``jobs.log`` line of a step the driver ran itself (collect, fit: on the CPU, in this
    process): :func:`append_jobs_log`."""
    append_jobs_log(run_dir, key=key, kind=kind, env=env, model=model, started=started,
                    status=status)  # fmt: skip


def read_jobs_log(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of ``run_dir/jobs.log``, each with every key of :data:`JOBS_LOG_KEYS` (a line
    written before a key existed has ``None`` there; an older line's ``host`` named the Ray
    node too: it is its ``node`` as well). Unparsable lines are skipped (the log is a record of
    what ran, not a store file)."""
    path = Path(run_dir) / "jobs.log"
    if not path.exists():
        return []
    regular_file(path)  # a FIFO there is refused, never blocked on
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(raw, dict):
            row = {k: raw.get(k) for k in JOBS_LOG_KEYS}
            if row["node"] is None:
                row["node"] = row["host"]
            lines.append({**row, **{k: v for k, v in raw.items() if k not in row}})
    return lines
