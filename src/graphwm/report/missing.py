"""The seeds a run is missing: jobs that failed (``run.json``'s ``failed``, written by the
pipeline), named under every table, whose intervals are then over the seeds that finished."""

from __future__ import annotations

from pathlib import Path

from graphwm.store.files import CorruptFileError, read_json

__all__ = ["missing_note", "missing_seeds"]


def missing_seeds(run_dir: Path) -> list[dict]:
    """The failed jobs ``run.json`` lists (``[]``: none, or no readable ``run.json``)."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return []
    try:
        raw = read_json(path)
    except CorruptFileError:
        return []
    failed = raw.get("failed") if isinstance(raw, dict) else None
    return [f for f in failed if isinstance(f, dict)] if isinstance(failed, list) else []


def missing_note(run_dir: Path) -> str:
    """One footnote naming each missing seed and why ("" when none is missing)."""
    from graphwm.report.tables import model_display

    entries = []
    for f in missing_seeds(run_dir):
        what = " ".join(
            str(v)
            for v in (
                f.get("env"),
                model_display(str(f["model"])) if f.get("model") else None,
                f"seed {f['seed']}" if f.get("seed") is not None else None,
            )
            if v
        )
        entries.append(f"{what or f.get('key')} ({f.get('kind')} failed: {f.get('cause')})")
    if not entries:
        return ""
    return (
        f"Missing: {'; '.join(entries)}. Means and intervals are over the seeds that finished "
        "(the seed count is per cell)."
    )
