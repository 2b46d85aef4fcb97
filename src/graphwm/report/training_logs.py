"""Training logs of a run (``log.csv`` of every training job) for the report's curves.

The jobs of the last preset run are those ``RUN_DIR/run.json`` lists; without it every
``RUN_DIR/train/<ENV>/<model>/seed<k>[-<key>]/log.csv`` is read (``__`` in a folder = ``:``).
"""

from __future__ import annotations

import re
from pathlib import Path

from graphwm.store.files import CorruptFileError, inside, read_json, sha256_file
from graphwm.store.records import ResultsFormatError, check_digest
from graphwm.store.training_log import TrainingLog, read_log

__all__ = ["TrainingLog", "load_training_logs", "read_log"]

_SEED_DIR = re.compile(r"seed(\d+)(?:-[0-9a-f]+)?")


def _sealed_digest(run_dir: Path, key: object) -> str | None:
    """The ``log_digest`` the training record ``jobs/<key>.json`` sealed (None: no record or
    an older one without it; the record's own digest is checked)."""
    if not isinstance(key, str) or not key or "/" in key or key.startswith("."):
        return None
    path = run_dir / "jobs" / f"{key}.json"
    if not path.exists():
        return None
    raw = read_json(path)
    check_digest(raw, path)
    digest = raw.get("log_digest") if isinstance(raw, dict) else None
    return digest if isinstance(digest, str) else None


def _check_sealed(path: Path, digest: str | None) -> None:
    if digest is not None and sha256_file(path) != digest:
        raise CorruptFileError(
            path, "differs from the digest its training record sealed when the job ended (edited?)"
        )


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


def _listed_keys(run_dir: Path) -> dict[Path, object]:
    """``{log path: training job key}`` of the jobs ``run.json`` lists."""
    train = read_json(run_dir / "run.json").get("train") or []
    return {
        inside(run_dir, t["dir"], run_dir / "run.json") / "log.csv": t.get("key") for t in train
    }


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
    a bad header or row, ``FileNotFoundError`` when a job ``run.json`` lists has no log
    (its curve would silently vanish from the figure), and :class:`CorruptFileError` when a
    log differs from the digest its training record sealed when the job ended.
    """
    run_dir = Path(run_dir)
    entries = _listed_logs(run_dir)
    if entries is None:
        entries = _globbed_logs(run_dir)
    logs = []
    keys = _listed_keys(run_dir) if _listed_logs(run_dir) is not None else {}
    for path, env, model, seed in entries:
        if not path.exists():
            raise FileNotFoundError(
                f"training log {path} of {env}/{model}/seed {seed} (listed in run.json) is "
                "missing; rerun `graphwm train` (or reproduce) to recompute it"
            )
        log = read_log(path, env, model, seed)
        _check_sealed(path, _sealed_digest(run_dir, keys.get(path)))
        if log.step.size:
            logs.append(log)
    return logs
