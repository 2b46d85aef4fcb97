"""Stage 8 of the pipeline, ``graphwm report RUN_DIR``: tables and figures from stored results.

Reads ``RUN_DIR/results/*.json`` (one evaluation job each) and the training logs
``RUN_DIR/train/<ENV>/<model>/seed<k>/log.csv``, and writes the paper-shaped tables
(Markdown and LaTeX) and matplotlib figures into ``RUN_DIR/report/``. Nothing is recomputed;
rebuilding from the same results gives the same files (see docs/reporting.md, "Reports").
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphwm import report_figures
from graphwm.report_tables import (
    COMPONENTS,
    SeedStats,
    Table,
    aggregate,
    build_tables,
    format_mean_ci,
    mean_ci,
    t_critical,
    to_latex,
    to_markdown,
)

__all__ = [
    "KINDS",
    "REQUIRED_KEYS",
    "ReportPaths",
    "ResultsFormatError",
    "SeedStats",
    "Table",
    "TrainingLog",
    "aggregate",
    "build_report",
    "format_mean_ci",
    "load_results",
    "load_training_logs",
    "mean_ci",
    "t_critical",
]

KINDS = ("single_step", "multi_step", "self_gdd")
# Keys the report reads, per kind (other documented or unknown keys are ignored).
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "single_step": ("env", "model", "seed", "size", "gdd", "components", "factor_metrics"),
    "multi_step": (
        "env",
        "model",
        "seed",
        "size",
        "horizons",
        "gdd",
        "components",
        "invalid_rate_model",
        "invalid_rate_env",
    ),
    "self_gdd": ("env", "size", "seed", "gdd"),
}
REPORT_DIRNAME = "report"
MAIN_TABLE = "gdd_single_step"


class ResultsFormatError(ValueError):
    """A results or training-log file does not follow the results-store format."""


# ---------------------------------------------------------------------------------------------
# Loading and validation of results/*.json
# ---------------------------------------------------------------------------------------------
def _number(value: object, where: str, path: Path) -> float:
    """A JSON number as float; ``null`` reads as NaN (so it shows as ``nan``, not a crash)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ResultsFormatError(f"{path}: {where} must be a number, got {value!r}")
    return float(value)


def _integer(value: object, where: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsFormatError(f"{path}: {where} must be an integer, got {value!r}")
    return value


def _string(value: object, where: str, path: Path) -> str:
    if not isinstance(value, str) or not value:
        raise ResultsFormatError(f"{path}: {where} must be a non-empty string, got {value!r}")
    return value


def _mapping(value: object, where: str, path: Path) -> dict:
    if not isinstance(value, dict):
        raise ResultsFormatError(f"{path}: {where} must be an object, got {value!r}")
    return value


def _numbers(value: object, where: str, path: Path, length: int | None = None) -> list[float]:
    if not isinstance(value, list):
        raise ResultsFormatError(f"{path}: {where} must be a list, got {value!r}")
    if length is not None and len(value) != length:
        raise ResultsFormatError(
            f"{path}: {where} has {len(value)} entries, expected {length} (one per horizon)"
        )
    return [_number(v, f"{where}[{i}]", path) for i, v in enumerate(value)]


def _components(value: object, where: str, path: Path, length: int | None) -> dict:
    comps = _mapping(value, where, path)
    out = {}
    for c in COMPONENTS:
        if c not in comps:
            raise ResultsFormatError(f"{path}: {where} lacks component {c!r}")
        sub = f"{where}.{c}"
        out[c] = (
            _number(comps[c], sub, path)
            if length is None
            else _numbers(comps[c], sub, path, length)
        )
    return out


def _validate(raw: object, path: Path) -> dict:
    """Check one results object against the store format; return a normalised copy."""
    record = _mapping(raw, "the top level", path)
    kind = record.get("kind")
    if kind not in KINDS:
        raise ResultsFormatError(
            f"{path}: unknown or missing 'kind' {kind!r}; expected one of {KINDS}"
        )
    missing = [k for k in REQUIRED_KEYS[kind] if k not in record]
    if missing:
        raise ResultsFormatError(f"{path}: kind {kind!r} lacks required key(s) {missing}")
    out: dict = {
        "kind": kind,
        "env": _string(record["env"], "'env'", path),
        "seed": _integer(record["seed"], "'seed'", path),
        "size": _integer(record["size"], "'size'", path),
    }
    if kind == "self_gdd":
        out["gdd"] = _number(record["gdd"], "'gdd'", path)
        return out
    out["model"] = _string(record["model"], "'model'", path)
    if kind == "single_step":
        out["gdd"] = _number(record["gdd"], "'gdd'", path)
        out["components"] = _components(record["components"], "'components'", path, None)
        fm = _mapping(record["factor_metrics"], "'factor_metrics'", path)
        if "adjacency_bce" not in fm or "features" not in fm:
            raise ResultsFormatError(
                f"{path}: 'factor_metrics' needs keys 'adjacency_bce' and 'features'"
            )
        features = _mapping(fm["features"], "'factor_metrics.features'", path)
        out["factor_metrics"] = {
            "adjacency_bce": _number(fm["adjacency_bce"], "'factor_metrics.adjacency_bce'", path),
            "features": {
                str(k): _number(v, f"'factor_metrics.features.{k}'", path)
                for k, v in features.items()
            },
        }
        return out
    # multi_step
    if not isinstance(record["horizons"], list) or not record["horizons"]:
        raise ResultsFormatError(f"{path}: 'horizons' must be a non-empty list of integers")
    horizons = [_integer(h, f"'horizons[{i}]'", path) for i, h in enumerate(record["horizons"])]
    if len(set(horizons)) != len(horizons):
        raise ResultsFormatError(f"{path}: 'horizons' has duplicates: {horizons}")
    n = len(horizons)
    out["horizons"] = horizons
    out["gdd"] = _numbers(record["gdd"], "'gdd'", path, n)
    out["components"] = _components(record["components"], "'components'", path, n)
    for key in ("invalid_rate_model", "invalid_rate_env"):
        out[key] = _numbers(record[key], f"'{key}'", path, n)
    return out


def _identity(record: dict) -> tuple:
    return (record["kind"], record["env"], record.get("model"), record["size"], record["seed"])


def load_results(run_dir: Path | str) -> list[dict]:
    """Read and validate every ``RUN_DIR/results/*.json`` (sorted by file name).

    Returns normalised copies holding only the keys the report reads (numbers as float,
    ``null`` as NaN; unknown extra keys are dropped). An absent ``results/`` folder gives ``[]``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
        ResultsFormatError: a file is not valid JSON, has an unknown kind, lacks a required key,
            holds a wrongly typed value, or repeats the (kind, env, model, size, seed) of
            another file (which would count one seed twice); the message names the file(s).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    results_dir = run_dir / "results"
    if not results_dir.is_dir():
        return []
    records: list[dict] = []
    seen: dict[tuple, Path] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ResultsFormatError(f"{path}: not valid JSON ({err})") from err
        record = _validate(raw, path)
        ident = _identity(record)
        if ident in seen:
            raise ResultsFormatError(
                f"{path}: duplicates {seen[ident]} (same kind, env, model, size and seed {ident})"
            )
        seen[ident] = path
        records.append(record)
    return records


# ---------------------------------------------------------------------------------------------
# Training logs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingLog:
    """The ``step`` and total-loss (``loss`` or ``total``) columns of one job's ``log.csv``."""

    env: str
    model: str
    seed: int
    step: np.ndarray
    total: np.ndarray
    path: Path


def _read_log(path: Path, env: str, model: str, seed: int) -> TrainingLog:
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


def load_training_logs(run_dir: Path | str) -> list[TrainingLog]:
    """Read every ``RUN_DIR/train/<ENV>/<model>/seed<k>/log.csv`` (``__`` in a path = ``:``).

    Only the ``step`` and ``total`` columns are kept (term columns differ between models).
    Logs without data rows are skipped. Raises :class:`ResultsFormatError` naming the file
    on a bad header or row.
    """
    logs = []
    for path in sorted(Path(run_dir).glob("train/*/*/seed*/log.csv")):
        seed_dir, model_dir, env_dir = path.parent, path.parent.parent, path.parent.parent.parent
        try:
            seed = int(seed_dir.name.removeprefix("seed"))
        except ValueError as err:
            raise ResultsFormatError(f"{path}: folder {seed_dir.name!r} is not seed<k>") from err
        log = _read_log(path, env_dir.name, model_dir.name.replace("__", ":"), seed)
        if log.step.size:
            logs.append(log)
    return logs


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportPaths:
    """What :func:`build_report` wrote.

    Attributes:
        report_dir: ``RUN_DIR/report``.
        index: ``report.md`` with every table and figure.
        tables_md / tables_tex: table name -> Markdown / LaTeX (booktabs tabular) file.
        figures: figure name -> PNG file.
        main_table: Markdown text of the main single-step GDD table ("" when absent), for the
            CLI to print.
    """

    report_dir: Path
    index: Path
    tables_md: dict[str, Path] = field(default_factory=dict)
    tables_tex: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)
    main_table: str = ""

    def files(self) -> list[Path]:
        """Every written file."""
        return [
            self.index,
            *self.tables_md.values(),
            *self.tables_tex.values(),
            *self.figures.values(),
        ]


# Every file name the report may write, so that a rebuild removes the stale ones of a kind that
# is no longer present (and never touches anything else in report/).
_TABLE_NAMES = (
    "gdd_single_step",
    "self_gdd",
    "ablations",
    "multi_step",
    "gdd_components",
    "factor_metrics",
)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _index(tables: list[Table], figures: dict[str, Path]) -> str:
    parts = ["# Report", "", "Rebuilt from the stored results by `graphwm report RUN_DIR`.", ""]
    for table in tables:
        parts.append(to_markdown(table))
    if figures:
        parts += ["## Figures", ""]
        for name, path in figures.items():
            parts += [
                f"### {report_figures.FIGURE_TITLES[name]}",
                "",
                f"![{name}]({path.name})",
                "",
            ]
    return "\n".join(parts)


def build_report(run_dir: Path | str) -> ReportPaths:
    """Write every table (``.md`` + ``.tex``) and figure (``.png``) into ``RUN_DIR/report/``.

    Uses only the stored results and training logs; tables and figures whose inputs are absent
    are skipped (and a stale file of that name from an earlier build is removed).

    Raises:
        FileNotFoundError: ``run_dir`` is missing, or holds neither results nor training logs.
        ResultsFormatError: a malformed results or log file (named in the message).
    """
    run_dir = Path(run_dir)
    records = load_results(run_dir)
    logs = load_training_logs(run_dir)
    if not records and not logs:
        raise FileNotFoundError(
            f"{run_dir} holds no results (results/*.json) and no training logs "
            "(train/*/*/seed*/log.csv): nothing to report"
        )
    out = run_dir / REPORT_DIRNAME
    out.mkdir(parents=True, exist_ok=True)

    tables = build_tables(records)
    tables_md, tables_tex = {}, {}
    for table in tables:
        tables_md[table.name] = out / f"{table.name}.md"
        tables_tex[table.name] = out / f"{table.name}.tex"
        _write_if_changed(tables_md[table.name], to_markdown(table))
        _write_if_changed(tables_tex[table.name], to_latex(table))

    figures = report_figures.build_figures(records, logs, out)

    written = set(tables_md.values()) | set(tables_tex.values()) | set(figures.values())
    stale = [out / f"{n}.{ext}" for n in _TABLE_NAMES for ext in ("md", "tex")]
    stale += [out / f"{n}.png" for n in report_figures.FIGURE_TITLES]
    for path in stale:
        if path not in written and path.exists():
            path.unlink()

    index = out / "report.md"
    _write_if_changed(index, _index(tables, figures))
    main = next((t for t in tables if t.name == MAIN_TABLE), None)
    return ReportPaths(
        report_dir=out,
        index=index,
        tables_md=tables_md,
        tables_tex=tables_tex,
        figures=figures,
        main_table=to_markdown(main) if main is not None else "",
    )
