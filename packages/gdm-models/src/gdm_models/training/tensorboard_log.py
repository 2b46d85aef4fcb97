"""TensorBoard event files of a training run, beside its CSV log (the CSV stays the record).

:class:`TensorBoardLog` has the interface of :class:`gdm_models.training.trainer.CsvLog`
(``write(row)`` with a ``step`` key, ``flush()``, ``close()``): every other numeric key of a
row becomes a scalar ``<prefix><key>`` at that step, so ``tensorboard --logdir DIR`` shows the
loss and each loss term live while the run trains. :func:`tee` joins it to a CSV log so that a
trainer writes both through one object.

Needs the optional extra ``gdm-models[tensorboard]`` (the ``tensorboard`` package, which also
brings the viewer); the writer is ``torch.utils.tensorboard.SummaryWriter``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

__all__ = [
    "EVENT_GLOB",
    "LogWriter",
    "TeeLog",
    "TensorBoardLog",
    "read_scalars",
    "tee",
    "tee_members",
]

#: event files of one writer's folder
EVENT_GLOB = "events.out.tfevents.*"
_MISSING = (
    "TensorBoard logging needs the 'tensorboard' package: pip install 'gdm-models[tensorboard]'"
    " (or 'graphwm[tensorboard]')"
)


class LogWriter(Protocol):
    """What a trainer writes its logged rows to (:class:`~gdm_models.training.trainer.CsvLog`,
    :class:`TensorBoardLog`, :class:`TeeLog`)."""

    def write(self, row: Mapping[str, float]) -> None:
        """Record one row (it holds a ``step`` key)."""

    def flush(self) -> None:
        """Push what was written to disk."""

    def close(self) -> None:
        """Flush and release the file(s)."""


class TensorBoardLog:
    """TensorBoard scalars, one per numeric key of each row, at the row's ``step``.

    Args:
        log_dir: the writer's folder (created); ``tensorboard --logdir`` on it or on a folder
            above it shows the curves (one run per writer folder).
        resume_step: on a resumed run (> 0), events of an earlier, interrupted run of this
            folder past this step are hidden from TensorBoard (``purge_step``), as the CSV log
            drops its rows past the resumed step.
        prefix: tag prefix (``"train/"`` gives ``train/loss``, ``train/grad_norm``, ...).

    Raises:
        ImportError: the ``tensorboard`` package is not installed (the message names the extra).
    """

    def __init__(self, log_dir: str | Path, resume_step: int = 0, prefix: str = "train/") -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # torch raises ImportError when tensorboard is absent
            raise ImportError(_MISSING) from err
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        purge = resume_step + 1 if resume_step > 0 else None
        if purge is not None:
            _after_existing(self.log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge)

    def write(self, row: Mapping[str, float]) -> None:
        """Add every numeric value of ``row`` except ``step`` as a scalar at ``row["step"]``.

        Non-numeric values are skipped; NaN and inf are written as they are (TensorBoard shows
        them), so a diverging run is visible.
        """
        step = int(row["step"])
        for key, value in row.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            self._writer.add_scalar(self.prefix + key, float(value), global_step=step)

    def flush(self) -> None:
        """Write pending events to the event file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


def _after_existing(folder: Path) -> None:
    """Wait (at most a second) until a new event file's name sorts after those in ``folder``.

    TensorBoard reads a folder's event files in name order, and the name starts with the
    creation second; within one second it ends with a per-process counter compared as text
    (``10`` before ``9``). A resumed run's file must come after the interrupted run's, or its
    purge of the steps past the resumed one is read first and has nothing to purge.
    """
    stamps = [
        int(p.name.split(".")[3])
        for p in folder.glob(EVENT_GLOB)
        if len(p.name.split(".")) > 3 and p.name.split(".")[3].isdigit()
    ]
    while stamps and int(time.time()) <= max(stamps):
        time.sleep(0.02)


class TeeLog:
    """Several logs written as one (each ``write``/``flush``/``close`` goes to all, in order)."""

    def __init__(self, *logs: LogWriter) -> None:
        self.logs = logs

    def write(self, row: Mapping[str, float]) -> None:
        """Write ``row`` to every log."""
        for log in self.logs:
            log.write(row)

    def flush(self) -> None:
        """Flush every log."""
        for log in self.logs:
            log.flush()

    def close(self) -> None:
        """Close every log (all of them, even when one fails; the first error is raised)."""
        errors = []
        for log in self.logs:
            try:
                log.close()
            except Exception as err:  # noqa: BLE001 - closed the others first, then raised
                errors.append(err)
        if errors:
            raise errors[0]


def tee(
    log: LogWriter | None, tensorboard_dir: str | Path | None, resume_step: int = 0
) -> LogWriter | None:
    """``log`` plus a :class:`TensorBoardLog` in ``tensorboard_dir`` (when given).

    Returns ``log`` itself when ``tensorboard_dir`` is ``None`` (no TensorBoard), the
    TensorBoard log alone when ``log`` is ``None``, else a :class:`TeeLog` of both.
    """
    if tensorboard_dir is None:
        return log
    board = TensorBoardLog(tensorboard_dir, resume_step)
    return board if log is None else TeeLog(log, board)


def tee_members(
    logs: Sequence[LogWriter] | None,
    tensorboard_dir: str | Path | None,
    names: Sequence[str],
    resume_step: int = 0,
) -> list[LogWriter] | None:
    """:func:`tee` for the members of an ensemble: member ``k`` writes its scalars into
    ``tensorboard_dir / names[k]`` (one TensorBoard run per member) beside ``logs[k]``.

    Returns ``logs`` as a list (or ``None``) when ``tensorboard_dir`` is ``None``.
    """
    if tensorboard_dir is None:
        return list(logs) if logs is not None else None
    root = Path(tensorboard_dir)
    members: list[LogWriter] = []
    for k, name in enumerate(names):
        log = tee(logs[k] if logs is not None else None, root / name, resume_step)
        assert log is not None  # a TensorBoard log at least
        members.append(log)
    return members


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``log_dir`` (one writer's folder): tag ->
    ``[(step, value), ...]`` in step order, as TensorBoard shows them (purged events left out).

    Raises:
        FileNotFoundError: ``log_dir`` holds no event file.
    """
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as err:
        raise ImportError(_MISSING) from err
    log_dir = Path(log_dir)
    if not any(log_dir.glob(EVENT_GLOB)):
        raise FileNotFoundError(f"no TensorBoard event file ({EVENT_GLOB}) in {log_dir}")
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    out: dict[str, list[tuple[int, float]]] = {}
    for tag in acc.Tags()["scalars"]:
        events = sorted(acc.Scalars(tag), key=lambda e: e.step)
        out[tag] = [(int(e.step), float(e.value)) for e in events]
    return out
