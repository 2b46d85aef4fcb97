"""TensorBoard event files of the training jobs (``train.tensorboard``, ``--tensorboard``):
checked before any stage runs, and written from the stored logs for jobs that were already
trained (issue 38, class 5).

* :func:`check_tensorboard` (before collect): the ``tensorboard`` package is installed, and
  no folder the event files go to (or a folder above it inside the run directory) is a file;
  either would otherwise fail the run after collect and fit.
* :func:`write_from_logs` (after training): a job trained earlier without TensorBoard (its
  stored record is reused, so it does not train again) gets its event files written from its
  ``log.csv`` (the rows the trainer logged, the same values it would have written), so
  ``--tensorboard`` on a finished run writes the curves instead of nothing.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable
from pathlib import Path

from graphwm.config import PresetError
from graphwm.stages.ensemble import EnsembleJob
from graphwm.stages.train import TENSORBOARD_DIRNAME, TrainJob

__all__ = ["board_folders", "check_tensorboard", "write_from_logs"]

log = logging.getLogger("graphwm")


def board_folders(
    units: Iterable[TrainJob | EnsembleJob], root: Path
) -> list[tuple[TrainJob, Path]]:
    """Each training job of ``units`` with the folder its event files go to: a single job's
    ``<job folder>/tensorboard``, an ensemble member's ``<ensemble folder>/tensorboard/seed<s>``
    (the trainers' layout)."""
    out: list[tuple[TrainJob, Path]] = []
    for unit in units:
        if isinstance(unit, EnsembleJob):
            board = unit.dir(root) / TENSORBOARD_DIRNAME
            out += [(m, board / f"seed{m.seed}") for m in unit.members]
        else:
            out.append((unit, unit.dir(root) / TENSORBOARD_DIRNAME))
    return out


def _file_on_the_way(folder: Path, root: Path) -> Path | None:
    """The first existing path from ``root`` down to ``folder`` that is not a folder."""
    path = root
    for part in (folder.relative_to(root)).parts:
        path = path / part
        if path.exists() and not path.is_dir():
            return path
        if not path.exists():
            return None
    return None


def check_tensorboard(
    root: Path, units: Iterable[TrainJob | EnsembleJob], downstream: bool = False
) -> None:
    """For ``train.tensorboard`` on: the package is installed (else :class:`PresetError`)
    and no event-file folder of ``units`` (nor, with ``downstream``, the downstream agents'
    folder) lies under a file (else :class:`NotADirectoryError` naming it), before any work."""
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        raise PresetError(
            "preset key 'train.tensorboard' (--tensorboard): true needs the 'tensorboard' "
            "package: pip install 'graphwm[tensorboard]'"
        )
    root = Path(root)
    folders = [folder for _, folder in board_folders(units, root)]
    if downstream:
        from graphwm.downstream.record import STORE_DIR

        folders.append(root / STORE_DIR / "tensorboard")
    for folder in folders:
        blocker = _file_on_the_way(folder, root)
        if blocker is not None:
            raise NotADirectoryError(
                f"train.tensorboard (--tensorboard): {blocker} is a file, not a folder, and "
                f"the TensorBoard event files go to {folder}; move or remove it, or run "
                "without --tensorboard"
            )


def _has_events(folder: Path) -> bool:
    from gdm_models.training.tensorboard_log import EVENT_GLOB

    return folder.is_dir() and any(folder.glob(EVENT_GLOB))


def write_from_logs(
    root: Path, units: Iterable[TrainJob | EnsembleJob], done: Iterable[str]
) -> list[Path]:
    """For every job of ``units`` that finished (its key in ``done``) and whose event-file
    folder has no event file (it was trained without TensorBoard), write the events from its
    ``log.csv``; returns the folders written (and says how many on the ``graphwm`` logger).
    Called with ``train.tensorboard`` on."""
    from gdm_models.training.tensorboard_log import TensorBoardLog

    root = Path(root)
    keys = set(done)
    written = []
    for job, folder in board_folders(units, root):
        csv_log = job.dir(root) / "log.csv"
        if job.key not in keys or _has_events(folder) or not csv_log.is_file():
            continue
        board = TensorBoardLog(folder)
        try:
            with open(csv_log, newline="") as fh:
                for row in csv.DictReader(fh):
                    values = {k: _number(v) for k, v in row.items() if k is not None}
                    board.write({k: v for k, v in values.items() if v is not None})
        finally:
            board.close()
        written.append(folder)
    if written:
        log.info(
            "wrote the TensorBoard event files of %d training job(s) trained earlier without "
            "--tensorboard from their log.csv",
            len(written),
        )
    return written


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None
