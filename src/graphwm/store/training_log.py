"""One training job's ``log.csv`` (written by gdm_models' trainer), read and checked.

The train stage reads it to verify a stored job before reuse, the report for its curves
(:mod:`graphwm.report.training_logs`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphwm.store.records import ResultsFormatError

__all__ = ["MAX_LOG_BYTES", "TrainingLog", "read_log"]

#: the largest ``log.csv`` read (a row per logged step: a million steps is ~100 MB)
MAX_LOG_BYTES = 1024 * 2**20


@dataclass(frozen=True)
class TrainingLog:
    """The ``step`` and total-loss (``loss`` or ``total``) columns of one job's ``log.csv``."""

    env: str
    model: str
    seed: int
    step: np.ndarray
    total: np.ndarray
    path: Path


def read_log(path: Path, env: str, model: str, seed: int) -> TrainingLog:
    """One ``log.csv``; raises :class:`ResultsFormatError` naming the file on a bad row or
    when it is not a regular file (a FIFO would block the read) or larger than
    :data:`MAX_LOG_BYTES`."""
    from graphwm.store.files import CorruptFileError, regular_file

    try:
        regular_file(path, MAX_LOG_BYTES)
    except CorruptFileError as err:
        raise ResultsFormatError(f"{path}: {err.reason}") from None
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    # gdm_models' trainer names the total loss "loss"; "total" is accepted as well
    if not rows or rows[0][:2] not in (["step", "total"], ["step", "loss"]):
        raise ResultsFormatError(f"{path}: header must start with 'step,loss' (or 'step,total')")
    steps, totals = [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(rows[0]):
            raise ResultsFormatError(
                f"{path}: line {line} has {len(row)} fields, header has {len(rows[0])}"
            )
        try:
            steps.append(int(float(row[0])))
            totals.append(float(row[1]) if row[1] != "" else math.nan)
        except ValueError as err:
            raise ResultsFormatError(f"{path}: line {line}: {err}") from err
    return TrainingLog(env, model, seed, np.asarray(steps), np.asarray(totals, float), path)
