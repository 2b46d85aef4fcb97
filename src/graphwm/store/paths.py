"""Directory layout of a run and its corruption policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graphwm.store.files import CorruptFileError, inside, quarantine, read_json, regular_file
from graphwm.store.records import ResultsFormatError

#: characters Windows refuses in a file or folder name (``/`` separates folders, as intended)
REFUSED_CHARS = ':*?"<>|'


def safe_name(name: str) -> str:
    """The folder name the store writes for an env or model name: ``:`` becomes ``__`` (the
    ``module:id`` form of an env, ``gdm:no-h-plus``), any other character Windows refuses
    ``_``; a name without them is kept as it is (the shipped presets' folders never change).
    ``/`` is kept: an id's namespace makes a subfolder."""
    out = name.replace(":", "__")
    return "".join("_" if c in REFUSED_CHARS else c for c in out)


def refuse_old_names(run_dir: Path, envs: list[str] | tuple[str, ...]) -> None:
    """Refuse a run directory written under the old folder names, where an env's name went
    into the path as it is (``data/mymodule:mine/...``), naming the rename that makes it load.

    Raises:
        CorruptFileError: a folder of an env under its old name exists.
    """
    for env in envs:
        new = safe_name(env)
        if new == env:
            continue
        for top in ("data", "fit", "train"):
            old = Path(run_dir) / top / env
            if old.exists():
                raise CorruptFileError(
                    old,
                    f"was written under the old folder name of env {env!r}; graphwm now writes "
                    f"{top}/{new} (no character Windows refuses, {REFUSED_CHARS!r}): rename "
                    f"{top}/{env} to {top}/{new} (in data/, fit/ and train/) and run again",
                )


@dataclass(frozen=True)
class RunPaths:
    """Where a run's stages keep their outputs (all keys and records hold paths relative to
    ``root``, so the directory can be moved or copied).

    Attributes:
        root: the run directory (``--out``).
        redo_corrupt: quarantine a corrupt store file and recompute it instead of stopping.
        retry_failed: run again the jobs whose (deterministic) failure an earlier run
            recorded; without it they are reported failed again without running.
    """

    root: Path
    redo_corrupt: bool = False
    retry_failed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def run_record(self) -> Path:
        """``run.json``: which results and training runs belong to the last preset run."""
        return self.root / "run.json"

    def check_logs(self) -> None:
        """The run's logs and run record must be regular files (never symlinks that would make
        a run append or write elsewhere, nor FIFOs or folders a reader or writer would block
        or fail on); else :meth:`recover`."""
        for name in ("jobs.log", "events.log", "run.json"):
            path = self.root / name
            if path.is_symlink():
                self.recover(CorruptFileError(path, "is a symlink; a run's logs are plain files"))
            elif path.exists():
                try:
                    regular_file(path)
                except CorruptFileError as err:
                    self.recover(err)

    def recover(self, err: CorruptFileError, *also: Path) -> None:
        """Quarantine the corrupt file (and ``also``) with ``redo_corrupt``, else re-raise."""
        if not self.redo_corrupt:
            raise err
        root = self.root.resolve()
        for path in (err.quarantine, *also):
            if not (path.parent.resolve() / path.name).is_relative_to(root):
                continue  # never move anything outside the run directory
            if path.exists() or path.is_symlink():
                quarantine(self.root, path, err.reason)


def listed_files(run_dir: Path, key: str, what: str, default_dir: Path) -> list[Path]:
    """The files ``run.json`` lists under ``key`` (those of the last preset run), else every
    ``default_dir/*.json``; ``what`` names them in errors ("result file").

    Raises:
        ResultsFormatError: ``run.json`` is unreadable or not an object, ``key`` is not a list,
            or a listed file is missing.
        CorruptFileError: ``run.json`` lists a path outside the run directory.
    """
    record = run_dir / "run.json"
    if record.exists():
        try:
            raw = read_json(record)
        except CorruptFileError as err:
            raise ResultsFormatError(f"{record}: unreadable ({err})") from None
        if not isinstance(raw, dict):
            raise ResultsFormatError(f"{record}: unreadable (not a JSON object)")
        listed = raw.get(key)
        if listed is not None:
            if not isinstance(listed, list):
                raise ResultsFormatError(f"{record}: {key!r} must be a list, got {listed!r}")
            files = [inside(run_dir, rel, record) for rel in listed]
            missing = [str(f) for f in files if not f.exists()]
            if missing:
                raise ResultsFormatError(f"{record} lists missing {what}(s) {missing[:3]}")
            return sorted(files)
    return sorted(default_dir.glob("*.json"))
