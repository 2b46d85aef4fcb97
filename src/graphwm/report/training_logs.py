"""Training logs of a run (``log.csv`` of every training job) for the report's curves.

The jobs of the last preset run are those ``RUN_DIR/run.json`` lists; without it every
``RUN_DIR/train/<ENV>/<model>/seed<k>[-<key>]/log.csv`` is read (``__`` in a folder = ``:``).
"""

from __future__ import annotations

import re
from pathlib import Path

from graphwm.store.files import CorruptFileError, inside, read_json
from graphwm.store.records import ResultsFormatError
from graphwm.store.training_log import TrainingLog, read_log

__all__ = ["TrainingLog", "load_training_logs", "read_log"]

_SEED_DIR = re.compile(r"seed(\d+)(?:-[0-9a-f]+)?")


def _listed_logs(run_dir: Path) -> list[tuple[Path, str, str, int]] | None:
    record = run_dir / "run.json"
    if not record.exists():
        return None
    try:
        train = read_json(record).get("train")
    except (CorruptFileError, AttributeError) as err:
        raise ResultsFormatError(f"{record}: unreadable ({err})") from None
    if train is None:
        return None
    if not isinstance(train, list) or not all(isinstance(t, dict) for t in train):
        raise ResultsFormatError(f"{record}: 'train' must be a list of objects")
    try:
        return [
            (inside(run_dir, t["dir"], record) / "log.csv", t["env"], t["model"], int(t["seed"]))
            for t in train
        ]
    except (KeyError, TypeError, ValueError) as err:
        raise ResultsFormatError(f"{record}: a 'train' entry is malformed ({err})") from None


def _globbed_logs(run_dir: Path) -> list[tuple[Path, str, str, int]]:
    found = []
    for path in sorted(run_dir.glob("train/*/*/seed*/log.csv")):
        seed_dir, model_dir, env_dir = path.parent, path.parent.parent, path.parent.parent.parent
        match = _SEED_DIR.fullmatch(seed_dir.name)
        if match is None:
            raise ResultsFormatError(f"{path}: folder {seed_dir.name!r} is not seed<k>")
        found.append((path, env_dir.name, model_dir.name.replace("__", ":"), int(match[1])))
    return found


def load_training_logs(run_dir: Path | str) -> list[TrainingLog]:
    """Read the training logs of a run (see the module docstring).

    Only the ``step`` and total-loss columns are kept (term columns differ between models).
    Logs without data rows are skipped. Raises :class:`ResultsFormatError` naming the file on
    a bad header or row, and ``FileNotFoundError`` when a job ``run.json`` lists has no log
    (its curve would silently vanish from the figure).
    """
    run_dir = Path(run_dir)
    entries = _listed_logs(run_dir)
    if entries is None:
        entries = _globbed_logs(run_dir)
    logs = []
    for path, env, model, seed in entries:
        if not path.exists():
            raise FileNotFoundError(
                f"training log {path} of {env}/{model}/seed {seed} (listed in run.json) is "
                "missing; rerun `graphwm train` (or reproduce) to recompute it"
            )
        log = read_log(path, env, model, seed)
        if log.step.size:
            logs.append(log)
    return logs
