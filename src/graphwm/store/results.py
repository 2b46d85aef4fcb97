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

from graphwm.store.files import CorruptFileError, atomic_write_json, open_log, read_json
from graphwm.store.records import Record, ResultsFormatError, check_digest, parse_record, seal

__all__ = ["Job", "ResultStore", "atomic_write_json", "log_event", "log_job", "parts_of"]


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


def log_event(
    run_dir: Path,
    kind: str,
    key: str,
    env: str | None,
    model: str | None,
    started: float,
    status: str,
) -> None:
    """Append one line to ``run_dir/jobs.log``: what ran where, for how long (one atomic
    ``O_APPEND`` write, so concurrent writers never interleave a line)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    line = {
        "key": key,
        "kind": kind,
        "env": env,
        "model": model,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": round(started, 3),
        "seconds": round(time.time() - started, 3),
        "status": status,
    }
    fd = open_log(Path(run_dir) / "jobs.log")
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def log_job(run_dir: Path, job: Job, started: float, status: str) -> None:
    """:func:`log_event` for a job."""
    log_event(
        run_dir,
        job.kind,
        job.key,
        getattr(job, "env", None),
        getattr(job, "model", None),
        started,
        status,
    )
