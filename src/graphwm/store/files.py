"""The run store's low-level parts: content keys, atomic writers, corruption, the run lock.

* :func:`content_key` hashes everything that determines a stage's output (its inputs' keys
  included), so a changed preset gets new keys and a moved run directory keeps its keys (no
  absolute path enters a key).
* Every file is written to a unique temporary file in its directory and installed with
  ``os.replace``: a reader sees the old file or the new one, never a mix, even with several
  writers of the same path.
* A store file that cannot be read raises :class:`CorruptFileError` naming it;
  :func:`quarantine` moves it to ``RUN_DIR/quarantine/`` so the stage recomputes it.
* :func:`run_lock` holds one lock per run directory (``RUN_DIR/.graphwm.lock``): a second
  ``graphwm`` process on the same directory waits until the first is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

LOG = logging.getLogger("graphwm")
LOCK_NAME = ".graphwm.lock"
QUARANTINE = "quarantine"
EVENTS_LOG = "events.log"


class CorruptFileError(RuntimeError):
    """A store file exists but cannot be read or fails its integrity check.

    ``quarantine`` is what ``--redo-corrupt`` moves away so that the stage recomputes it
    (default: the file itself; e.g. a whole training folder for a corrupt ``log.csv``).
    """

    def __init__(self, path: Path, reason: str, quarantine: Path | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.quarantine = Path(quarantine) if quarantine is not None else self.path
        super().__init__(
            f"corrupt store file {self.path}: {reason} "
            "(rerun with --redo-corrupt to quarantine it and recompute)"
        )


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------
def canonical_json(payload: Any) -> str:
    """Key-sorted compact JSON (tuples as lists): the hashed form of a payload."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=True)


def code_versions() -> dict[str, str]:
    """The versions of the four packages whose code produces every stored output."""
    import gdd_metric
    import gdm_models
    import graphwm_envs

    import graphwm

    return {m.__name__: m.__version__ for m in (graphwm, graphwm_envs, gdm_models, gdd_metric)}


def content_key(kind: str, payload: Any) -> str:
    """``<kind>-<16 hex digits of sha256(canonical JSON of payload and code versions)>``.

    The packages' versions are hashed too, so an upgraded package never reuses what an older
    release stored in the same run directory.
    """
    keyed = {"payload": payload, "code": code_versions()}
    digest = hashlib.sha256(canonical_json(keyed).encode()).hexdigest()[:16]
    return f"{kind}-{digest}"


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# ---------------------------------------------------------------------------------------------
# Atomic writers
# ---------------------------------------------------------------------------------------------
def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a unique temporary file next to ``path``, then install it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` atomically (unique temp file + ``os.replace``)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, data: Any) -> Path:
    """Write JSON atomically, so a killed or concurrent writer leaves no partial file."""
    return atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=True))


def atomic_save_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """``np.savez_compressed`` atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            # numpy's stubs type **kwds together with its bool keyword allow_pickle
            payload: dict[str, Any] = dict(arrays)
            np.savez_compressed(fh, **payload)

    return atomic_write(path, write)


def read_json(path: Path) -> Any:
    """Parse a store JSON file; an unreadable one raises :class:`CorruptFileError`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptFileError(path, f"not valid JSON ({err})") from None
    except RecursionError:
        raise CorruptFileError(path, "JSON nested too deeply to be a store file") from None


def inside(run_dir: Path, rel: object, source: Path) -> Path:
    """``run_dir / rel`` if it stays inside ``run_dir`` once symlinks are resolved.

    Raises:
        CorruptFileError: ``rel`` (read from the store file ``source``) is not a relative path
            string or leads outside the run directory (names both).
    """
    root = Path(run_dir).resolve()
    if not isinstance(rel, str) or not rel:
        raise CorruptFileError(source, f"holds {rel!r} where a path in the run dir belongs")
    target = (root / rel).resolve()
    if Path(rel).is_absolute() or not target.is_relative_to(root):
        raise CorruptFileError(source, f"path {rel!r} leads outside the run directory {root}")
    return Path(run_dir) / rel


def open_log(path: Path) -> int:
    """An ``O_APPEND`` descriptor of a log in the run dir; a symlink there is refused
    (appending would write wherever it points)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError:
        if Path(path).is_symlink():
            raise CorruptFileError(path, "is a symlink; a run's logs are plain files") from None
        raise


# ---------------------------------------------------------------------------------------------
# Corruption handling and events
# ---------------------------------------------------------------------------------------------
def note(run_dir: Path, message: str) -> None:
    """Log ``message`` as a warning and append it to ``RUN_DIR/events.log``."""
    LOG.warning(message)
    line = json.dumps({"time": round(time.time(), 3), "pid": os.getpid(), "message": message})
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    fd = open_log(Path(run_dir) / EVENTS_LOG)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def quarantine(run_dir: Path, path: Path, reason: str = "") -> Path:
    """Move a corrupt file or folder to ``RUN_DIR/quarantine/<its relative path>.<time>``."""
    run_dir, path = Path(run_dir), Path(path)
    try:
        rel = (path.parent.resolve() / path.name).relative_to(run_dir.resolve())
    except ValueError:
        rel = Path(path.name)
    target = run_dir / QUARANTINE / f"{rel}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), str(target))
    note(run_dir, f"quarantined {path} -> {target}" + (f" ({reason})" if reason else ""))
    return target


# ---------------------------------------------------------------------------------------------
# One lock per run directory
# ---------------------------------------------------------------------------------------------
_LOCKS: dict[str, Any] = {}


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock (reentrant in one process; other processes wait)."""
    from filelock import FileLock, Timeout

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    name = str((run_dir / LOCK_NAME).resolve())
    lock = _LOCKS.setdefault(name, FileLock(name))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        LOG.warning("run directory %s is in use by another graphwm process; waiting", run_dir)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
