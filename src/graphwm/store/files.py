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
import re
import shutil
import stat
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

    #: how the message ends: what a stage command's user does about it
    HINT = "rerun with --redo-corrupt to quarantine it and recompute"
    #: the same for a command that only reads the store (``graphwm report``)
    READER_HINT = (
        "graphwm report only reads the run; rerun the stage command that wrote it (e.g. "
        "graphwm reproduce --preset P --out RUN_DIR) with --redo-corrupt to quarantine it and "
        "recompute"
    )

    def __init__(self, path: Path, reason: str, quarantine: Path | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.quarantine = Path(quarantine) if quarantine is not None else self.path
        super().__init__(f"corrupt store file {self.path}: {reason} ({self.HINT})")

    def for_reader(self) -> str:
        """The message for a command without ``--redo-corrupt`` (``graphwm report``)."""
        return f"corrupt store file {self.path}: {self.reason} ({self.READER_HINT})"


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


#: the largest store JSON file read (records, run.json, bandwidths are kilobytes): a bigger
#: one is corrupt, refused before it is read
MAX_JSON_BYTES = 64 * 2**20


def regular_file(path: Path, max_bytes: int | None = None) -> int:
    """The size of ``path`` if it is a regular file (of at most ``max_bytes``), checked with
    ``stat`` before it is opened: a FIFO, a device or a folder where a store file belongs would
    block or fail the reader (a FIFO blocks ``open`` forever).

    Raises:
        FileNotFoundError: ``path`` is missing.
        CorruptFileError: ``path`` is not a regular file, or is larger than ``max_bytes``.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise CorruptFileError(path, f"is not a regular file (a {_kind(st.st_mode)})")
    if max_bytes is not None and st.st_size > max_bytes:
        raise CorruptFileError(
            path, f"is {st.st_size} bytes, more than the {max_bytes} a file of its kind holds"
        )
    return st.st_size


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISREG, "regular file"),
    ):
        if test(mode):
            return name
    return "special file"


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes (a regular file only: see :func:`regular_file`)."""
    regular_file(path)
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# ---------------------------------------------------------------------------------------------
# Atomic writers
# ---------------------------------------------------------------------------------------------
def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a unique temporary file next to ``path``, then install it.

    Raises:
        OSError: the write failed (a full disk: ``ENOSPC``); the temporary file is removed,
            ``path`` keeps its previous content (or stays absent), and the error names
            ``path`` (a failed ``write()`` names no file).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _naming(err, path) from err
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _naming(err, path) from err
        raise
    return path


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` naming the store file being written (``[Errno 28] No space left on device:
    'RUN_DIR/results/...json'``), of the same type; ``err`` itself if it names a file."""
    if err.filename is not None or err.errno is None:
        return err
    try:
        return type(err)(err.errno, err.strerror, str(path))
    except TypeError:  # a subclass with another constructor
        return OSError(err.errno, err.strerror, str(path))


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
    """Parse a store JSON file; an unreadable one (not a regular file, larger than
    :data:`MAX_JSON_BYTES`, not JSON) raises :class:`CorruptFileError`."""
    regular_file(path, MAX_JSON_BYTES)
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
    (appending would write wherever it points), and so is anything but a regular file (a FIFO
    would block the writer: it is opened non-blocking and checked before the first write)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if Path(path).is_symlink():
            raise CorruptFileError(path, "is a symlink; a run's logs are plain files") from None
        if Path(path).exists():
            regular_file(path)  # says what it is instead
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CorruptFileError(path, f"is not a regular file (a {_kind(mode)})")
    os.set_blocking(fd, True)
    return fd


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
    if (run_dir / QUARANTINE).is_symlink():
        raise CorruptFileError(
            run_dir / QUARANTINE,
            "is a symbolic link; graphwm moves nothing outside the run directory: remove it",
        )
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
# Links: nothing is written through a symbolic link inside the run directory
# ---------------------------------------------------------------------------------------------
# the names quarantine() gives: "<name>.<YYYYmmddTHHMMSS>.<pid>"
_QUARANTINED = re.compile(r".+\.\d{8}T\d{6}\.\d+")


def find_links(run_dir: Path) -> list[Path]:
    """Every symbolic link inside ``run_dir`` (the directory itself may be one: ``--out`` is
    the user's choice), found without following any; a quarantined link (moved there by
    ``--redo-corrupt``, never written through) is left out."""
    root = Path(run_dir)
    links: list[Path] = []
    for top, dirs, files in os.walk(root, followlinks=False):
        in_quarantine = Path(top).relative_to(root).parts[:1] == (QUARANTINE,)
        for name in (*dirs, *files):
            path = Path(top) / name
            if path.is_symlink() and not (in_quarantine and _QUARANTINED.fullmatch(name)):
                links.append(path)
    # the events log first: quarantining another link notes it there
    return sorted(links, key=lambda p: (p != root / EVENTS_LOG, len(p.parts), str(p)))


def refuse_links(run_dir: Path, redo_corrupt: bool = False) -> None:
    """Refuse a run directory that holds a symbolic link anywhere inside it (a folder such as
    ``results/`` or ``report/`` linked elsewhere would have the run write outside ``--out``).

    With ``redo_corrupt`` each link itself (never what it points to) is moved to
    ``RUN_DIR/quarantine/`` and the run goes on; a linked ``quarantine/`` is always refused.
    Every command that writes to a run directory calls this first (:func:`run_lock`, the
    report).

    Raises:
        CorruptFileError: naming the first link and where it points.
    """
    root = Path(run_dir)
    if not root.is_dir():
        return
    for link in find_links(root):
        err = CorruptFileError(
            link,
            f"is a symbolic link (to {os.readlink(link)}); graphwm writes only inside the run "
            "directory, never through a link: remove the link",
        )
        if not redo_corrupt or link == root / QUARANTINE:
            raise err
        if link.is_symlink():  # not moved already with a linked folder above it
            quarantine(root, link, err.reason)


#: the folders a run directory holds (each must be a directory where it exists)
STORE_FOLDERS = (
    "data", "fit", "train", "jobs", "results", "downstream", "search", "report", QUARANTINE,
)  # fmt: skip


def check_folders(run_dir: Path, redo_corrupt: bool = False) -> None:
    """Each of :data:`STORE_FOLDERS` that exists must be a directory (a file named
    ``results`` would fail every write there); with ``redo_corrupt`` it is quarantined.

    Raises:
        CorruptFileError: naming the first one that is not a directory.
    """
    root = Path(run_dir)
    for name in STORE_FOLDERS:
        path = root / name
        if path.is_symlink() or not path.exists() or path.is_dir():
            continue  # links: refuse_links
        err = CorruptFileError(
            path, f"is not a directory (a {_kind(path.lstat().st_mode)}); the run keeps a folder"
        )
        if not redo_corrupt or name == QUARANTINE:
            raise err
        quarantine(root, path, err.reason)


# ---------------------------------------------------------------------------------------------
# One lock per run directory
# ---------------------------------------------------------------------------------------------
_LOCKS: dict[str, Any] = {}


@contextlib.contextmanager
def run_lock(run: Any) -> Iterator[None]:
    """Hold the run directory's lock (reentrant in one process; other processes wait).

    ``run`` is the run directory or its :class:`~graphwm.store.paths.RunPaths` (whose
    ``redo_corrupt`` applies below). On the outermost acquisition the directory is checked
    before any work: no symbolic link inside it (:func:`refuse_links`), its folders directories
    (:func:`check_folders`), and the lock file a regular file (a folder or a link there is
    corrupt: quarantined with ``redo_corrupt``).
    """
    from filelock import FileLock, Timeout

    if isinstance(run, str | os.PathLike):
        run_dir, redo = Path(run), False
    else:  # a RunPaths (not imported here: graphwm.store.paths imports this module)
        run_dir, redo = Path(run.root), bool(run.redo_corrupt)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = "a symbolic link" if path.is_symlink() else f"a {_kind(path.lstat().st_mode)}"
        err = CorruptFileError(path, f"is {what}; the run's lock is a regular file")
        if not redo:
            raise err
        quarantine(run_dir, path, err.reason)
    name = str(path.resolve())
    lock = _LOCKS.setdefault(name, FileLock(name))
    outermost = not lock.is_locked
    try:
        lock.acquire(timeout=0)
    except Timeout:
        LOG.warning("run directory %s is in use by another graphwm process; waiting", run_dir)
        lock.acquire()
    try:
        if outermost:
            refuse_links(run_dir, redo)
            check_folders(run_dir, redo)
        yield
    finally:
        lock.release()
