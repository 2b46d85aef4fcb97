"""Stage 8 of the pipeline, ``graphwm report RUN_DIR``: tables and figures from stored results.

Reads the results of the last preset run (``RUN_DIR/run.json`` lists them; without it every
``RUN_DIR/results/*.json``, one evaluation job each) through their record types, and the
training logs (:mod:`graphwm.report.training_logs`), and writes the paper-shaped tables
(Markdown and LaTeX) and matplotlib figures into ``RUN_DIR/report/``. Nothing is recomputed;
rebuilding from the same results gives the same files (see docs/reporting.md, "Reports").
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path

from graphwm.report import curve as report_curve
from graphwm.report import figures as report_figures
from graphwm.report.eval_noise import attach_measured_noise, load_measured_noise
from graphwm.report.missing import missing_note
from graphwm.report.tables import (
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
from graphwm.report.training_logs import TrainingLog, load_training_logs
from graphwm.store.executors import active_pool
from graphwm.store.files import read_json, refuse_links
from graphwm.store.paths import listed_files
from graphwm.store.records import (
    RECORD_TYPES,
    RESULT_KINDS,
    Record,
    ResultsFormatError,
    read_records_once,
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

KINDS = RESULT_KINDS
# Keys a result file must hold, per kind (other documented or unknown keys are optional).
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {k: RECORD_TYPES[k].required() for k in KINDS}
REPORT_DIRNAME = "report"
MAIN_TABLE = "gdd_single_step"


def _identity(record: dict) -> tuple:
    return (record["kind"], record["env"], record.get("model"), record["size"], record["seed"])


def _report_view(record: Record) -> dict:
    """The keys the report reads (``None`` fields left out)."""
    return {k: v for k, v in record.to_dict().items() if k in _REPORT_KEYS and v is not None}


_REPORT_KEYS = {
    "kind",
    "env",
    "model",
    "seed",
    "size",
    "gdd",
    "gdd_unbiased",
    "components",
    "factor_metrics",
    "indistinguishable",
    "num_permutations",
    "alpha",
    "num_transitions",
    "gdd_transitions",
    "horizons",
    "invalid_rate_model",
    "invalid_rate_env",
}


def result_files(run_dir: Path) -> list[Path]:
    """The result files of a run: those ``run.json`` lists (the last preset run), else every
    ``results/*.json``.

    Raises:
        ResultsFormatError: ``run.json`` is unreadable or lists a missing file.
        CorruptFileError: ``run.json`` lists a path outside the run directory.
    """
    files = listed_files(run_dir, "results", "result file", run_dir / "results")
    # the GDD curve's records (graphwm.report.curve) share results/ but are not listed here
    return [f for f in files if not f.name.startswith("curve-")]


def load_results(run_dir: Path | str) -> list[dict]:
    """Read and validate the results of a run (:func:`result_files`), sorted by file name.

    Each file is parsed through its record type (:mod:`graphwm.store.records`); returns the keys the
    report reads as dicts (numbers as float, ``null`` as NaN; unknown extra keys are dropped).
    An absent ``results/`` folder gives ``[]``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
        ResultsFormatError: a file is not valid JSON, has an unknown kind, lacks a required key,
            holds a wrongly typed value, or repeats the (kind, env, model, size, seed) of
            another file (which would count one seed twice); the message names the file(s).
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(f"run directory {run_dir} is not a directory")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    return read_records_once(
        result_files(run_dir), KINDS, _report_view, _identity, "kind, env, model, size and seed"
    )


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

    def summary(self) -> str:
        """What ``graphwm report`` / ``reproduce`` print: the main table, then exactly which
        other tables and figures were written and where (all of them in ``report.md``)."""
        lines = [self.main_table or "(no single-step results yet)"]
        printed = [MAIN_TABLE] if self.main_table else []
        others = [name for name in self.tables_md if name not in printed]
        if printed:
            lines.append(f"printed above: the {MAIN_TABLE} table (the paper's main table)")
        if others:
            lines.append(f"not printed, written as <name>.md: {', '.join(others)}")
        if self.tables_tex:
            lines.append(f"LaTeX tables, <name>.tex: {', '.join(self.tables_tex)}")
        if self.figures:
            lines.append(f"figures, written as <name>.png: {', '.join(self.figures)}")
        lines.append(f"in {self.report_dir}; every table and figure on one page: {self.index}")
        return "\n".join(lines)

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
    report_curve.CURVE_NAME,
    report_curve.LAST_NAME,
)


_FIGURE_TITLES = {
    **report_figures.FIGURE_TITLES,
    report_curve.CURVE_NAME: report_curve.CURVE_TITLE,
}


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def env_labels(run_dir: Path) -> dict[str, str]:
    """The preset's ``env_labels`` as ``run.json`` records them (``{}`` without any).

    Raises:
        ResultsFormatError: ``run.json`` holds labels that are not a table of texts.
    """
    record = Path(run_dir) / "run.json"
    if not record.exists():
        return {}
    raw = read_json(record)
    labels = raw.get("env_labels", {}) if isinstance(raw, dict) else {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ResultsFormatError(f"{record}: 'env_labels' must map env names to texts: {labels!r}")
    return labels


def _relabelled(records: list[dict], labels: dict[str, str]) -> list[dict]:
    """The records with each env's label as their ``env`` (tables and figures show it)."""
    if not labels:
        return records
    # "env_id": the env itself, for what reads the env (its schema in the factor figure)
    return [
        {**r, "env": labels.get(r["env"], r["env"]), "env_id": r["env"]} if "env" in r else r
        for r in records
    ]


def _measured_noise(
    run_dir: Path, records: list[dict], curve: list[dict], labels: dict[str, str] | None = None
) -> str:
    """Give the records that ``graphwm noise`` measured their re-evaluation SD (the band
    and ``(eval SD x)`` then show it instead of the bootstrap); the sentence saying how many.
    ``labels``: the env labels the records carry (the noise rows name the env itself)."""
    measured = load_measured_noise(run_dir)
    if not measured:
        return ""
    if labels:
        measured = {(labels.get(k[0], k[0]), *k[1:]): v for k, v in measured.items()}
    single = [r for r in records if r["kind"] == "single_step"]
    n_final, n_curve = (
        attach_measured_noise(single, measured),
        attach_measured_noise(curve, measured),
    )
    return (
        f"Evaluation noise measured by re-evaluation (`graphwm noise`, RUN_DIR/noise/) for "
        f"{n_final} of {len(single)} single-step evaluations and {n_curve} of {len(curve)} GDD "
        "curve points; the others' eval SD is the bootstrap over reference transitions (an "
        "upper bound)."
    )


def _index(tables: list[Table], figures: dict[str, Path], noise_source: str = "") -> str:
    parts = ["# Report", "", "Rebuilt from the stored results by `graphwm report RUN_DIR`.", ""]
    if noise_source:
        parts += [noise_source, ""]
    for table in tables:
        parts.append(to_markdown(table))
    if figures:
        parts += ["## Figures", ""]
        for name, path in figures.items():
            parts += [
                f"### {_FIGURE_TITLES[name]}",
                "",
                f"![{name}]({path.name})",
                "",
            ]
    return "\n".join(parts)


def build_report(
    run_dir: Path | str, average_last: int = 0, pool: Executor | None = None
) -> ReportPaths:
    """Write every table (``.md`` + ``.tex``) and figure (``.png``) into ``RUN_DIR/report/``.

    Uses only the stored results and training logs; tables and figures whose inputs are absent
    are skipped (and a stale file of that name from an earlier build is removed).
    ``average_last`` = n > 0 adds the table of each model's curve GDD averaged over its last n
    evaluated checkpoints (off by default: the paper reports the final model).
    The figures are drawn by this process and, at once, by ``pool``'s workers; by default the
    pool of the enclosing :func:`graphwm.store.executors.shared_pool` block (``graphwm
    reproduce``'s workers, idle once the jobs are done), none outside one. The files do not
    depend on where each figure was drawn.

    Raises:
        FileNotFoundError: ``run_dir`` is missing, or holds neither results nor training logs.
        ResultsFormatError: a malformed results or log file (named in the message).
        CorruptFileError: the run directory holds a symbolic link (named), or a store file
            is corrupt.
    """
    run_dir = Path(run_dir)
    refuse_links(run_dir)  # nothing is written through a link inside the run directory
    labels = env_labels(run_dir)
    records = _relabelled(load_results(run_dir), labels)
    logs = [replace(log, env=labels.get(log.env, log.env)) for log in load_training_logs(run_dir)]
    if not records and not logs:
        raise FileNotFoundError(
            f"{run_dir} holds no results (results/*.json) and no training logs "
            "(train/*/*/seed*/log.csv): nothing to report"
        )
    out = run_dir / REPORT_DIRNAME
    out.mkdir(parents=True, exist_ok=True)

    tables = build_tables(records)
    missing = missing_note(run_dir)  # failed jobs: named under every table
    # the GDD curve (train.eval_every): its table after the others, its figure after theirs
    curve = _relabelled(report_curve.load_curve(run_dir), labels)
    noise_source = _measured_noise(run_dir, records, curve, labels)
    curve_table = report_curve.curve_table(curve)
    if curve_table is not None:
        tables.append(curve_table)
    last_table = report_curve.last_checkpoints_table(curve, average_last) if average_last else None
    if last_table is not None:
        tables.append(last_table)
    tables_md, tables_tex = {}, {}
    for table in tables:
        if missing:
            table.notes.append(missing)
        tables_md[table.name] = out / f"{table.name}.md"
        tables_tex[table.name] = out / f"{table.name}.tex"
        _write_if_changed(tables_md[table.name], to_markdown(table))
        _write_if_changed(tables_tex[table.name], to_latex(table))

    styles = report_figures.model_styles(  # the colours of the other figures (same models)
        [r["model"] for r in records if "model" in r]
        + [log.model for log in logs]
        + [r["model"] for r in curve]
    )
    selfs = [r for r in records if r["kind"] == "self_gdd"]
    jobs = report_figures.figure_jobs(records, logs, out)
    curve_png = out / f"{report_curve.CURVE_NAME}.png"
    jobs.append(
        (report_curve.CURVE_NAME, report_curve.curve_figure, (curve, selfs, curve_png, styles))
    )

    # downstream RL (docs/dream.md): its own table and figure, from RUN_DIR/downstream/
    def downstream_report() -> dict[str, Path] | None:
        from graphwm.downstream.report import build_downstream_report

        return build_downstream_report(run_dir, out, records, labels)

    # the figures on the run's pool workers (if any) and this process at once
    figures, downstream = report_figures.draw_figures(
        jobs, active_pool() if pool is None else pool, downstream_report
    )

    written = set(tables_md.values()) | set(tables_tex.values()) | set(figures.values())
    stale = [out / f"{n}.{ext}" for n in _TABLE_NAMES for ext in ("md", "tex")]
    stale += [out / f"{n}.png" for n in _FIGURE_TITLES]
    for path in stale:
        if path not in written and path.exists():
            path.unlink()

    index = out / "report.md"
    text = _index(tables, figures, noise_source)
    if downstream:
        text += "\n" + downstream["table"].read_text(encoding="utf-8")
        text += f"\n![downstream]({downstream['figure'].name})\n"
        tables_md["downstream"] = downstream["table"]
        figures = {**figures, "downstream": downstream["figure"]}
    _write_if_changed(index, text)
    main = next((t for t in tables if t.name == MAIN_TABLE), None)
    return ReportPaths(
        report_dir=out,
        index=index,
        tables_md=tables_md,
        tables_tex=tables_tex,
        figures=figures,
        main_table=to_markdown(main) if main is not None else "",
    )
