"""Resumable checkpoint folders: a corrupt ``latest/`` never blocks a rerun.

A training job (``ckpt/latest/``) and an ensemble of them (``ensemble-<key>/latest/``) keep
their resumable state in a ``latest/`` folder that the trainer replaces atomically, keeping
the previous one as ``.latest_old`` until the new one is in place. :func:`recover_latest`
runs before the trainer resumes, for both, so both recover alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from graphwm.store.files import note, quarantine

__all__ = ["recover_latest"]


def recover_latest(run_dir: Path, folder: Path, verify: Callable[[Path], object]) -> None:
    """Make ``folder/latest`` a verified state, an earlier good one, or absent.

    ``verify(path)`` raises :class:`~gdm_models.training.checkpoint.CheckpointError` for a state
    that is damaged or incomplete (``gdm_models.training.trainer.verify_trainer_state`` for a
    training job, ``gdm_models.training.ensemble.verify_ensemble_state`` for an ensemble). A corrupt
    ``latest/`` is quarantined; ``.latest_old`` (the previous state, left when a save was cut short)
    replaces it if it verifies, else training restarts from step 0. Each step is said in the log and
    in ``RUN_DIR/events.log``.
    """
    from gdm_models.training.checkpoint import CheckpointError

    latest, old = folder / "latest", folder / ".latest_old"
    problem = None
    if latest.exists():
        try:
            verify(latest)
            return
        except CheckpointError as err:
            problem = str(err)
            quarantine(run_dir, latest, problem)
    if old.exists():
        try:
            verify(old)
            os.replace(old, latest)
            note(run_dir, f"{folder}: resuming from the previous good checkpoint (.latest_old)")
            return
        except CheckpointError as err:
            quarantine(run_dir, old, str(err))
            problem = problem or str(err)
    if problem is not None:
        note(run_dir, f"{folder}: no good checkpoint left; training restarts from step 0")
