"""Jobs keyed by their full config, an atomic result store, and the run log.

Every job is a JSON-able config dict; its key is a hash of that dict, so a rerun finds finished
jobs and skips them (idempotent), and changing any setting makes a new job.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def job_key(config: Mapping[str, Any]) -> str:
    """A stable key of a job config: ``<kind>-<env>-<sha256 prefix>``."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    parts = [str(config.get("kind", "job")), str(config.get("env", ""))]
    return "-".join(p for p in parts if p) + f"-{digest}"


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON via a temporary file and rename, so a killed job leaves no partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=True))
    tmp.replace(path)


class ResultStore:
    """One JSON file per finished job under ``root`` (``root/<key>.json``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, config: Mapping[str, Any]) -> Path:
        """Where the result of ``config`` lives."""
        return self.root / f"{job_key(config)}.json"

    def has(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` has finished."""
        return self.path(config).exists()

    def load(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The stored result of ``config``."""
        return json.loads(self.path(config).read_text())

    def save(self, config: Mapping[str, Any], result: Mapping[str, Any]) -> Path:
        """Store ``result`` (with its config attached) atomically."""
        path = self.path(config)
        atomic_write_json(path, {**result, "config": dict(config)})
        return path


def log_job(run_dir: Path, config: Mapping[str, Any], started: float, status: str) -> None:
    """Append one line to ``run_dir/jobs.log``: what ran where, for how long."""
    run_dir.mkdir(parents=True, exist_ok=True)
    line = {
        "key": job_key(config),
        "kind": config.get("kind"),
        "env": config.get("env"),
        "model": config.get("model"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": round(started, 3),
        "seconds": round(time.time() - started, 3),
        "status": status,
    }
    with open(run_dir / "jobs.log", "a") as fh:
        fh.write(json.dumps(line) + "\n")
