"""Directory layout of a run and its corruption policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graphwm.store.files import CorruptFileError, quarantine


@dataclass(frozen=True)
class RunPaths:
    """Where a run's stages keep their outputs (all keys and records hold paths relative to
    ``root``, so the directory can be moved or copied).

    Attributes:
        root: the run directory (``--out``).
        redo_corrupt: quarantine a corrupt store file and recompute it instead of stopping.
    """

    root: Path
    redo_corrupt: bool = False

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
        """The run's logs and run record must be plain files (never symlinks that would make
        a run append or write elsewhere); else :meth:`recover`."""
        for name in ("jobs.log", "events.log", "run.json"):
            path = self.root / name
            if path.is_symlink():
                self.recover(CorruptFileError(path, "is a symlink; a run's logs are plain files"))

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
