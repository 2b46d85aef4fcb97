"""Rendering of report tables to Markdown and LaTeX (booktabs)."""

from __future__ import annotations

import math

from graphwm.report.seed_stats import SeedStats
from graphwm.report.table import Cell, Table

__all__ = ["format_mean_ci", "format_number", "latex_escape", "to_latex", "to_markdown"]


def format_number(x: float, digits: int = 3, scientific: bool = False) -> str:
    """Fixed-point (``2.000``) or scientific (``1.23e-04``) text; ``nan``/``inf`` verbatim."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if scientific:
        return "0" if x == 0 else f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


NO_INTERVAL = "\u2020"  # a dagger after a one-seed value in a table with more seeds elsewhere
NO_INTERVAL_NOTE = "\u2020 one seed: no confidence interval (it needs at least two seeds)."
ONE_SEED_NOTE = "Values of one seed: no confidence interval (it needs at least two seeds)."


def format_mean_ci(
    s: SeedStats, digits: int = 3, scientific: bool = False, mark_one_seed: bool = False
) -> str:
    """``"mean ± ci"`` text of a cell, e.g. ``"2.000 ± 2.484"``.

    With fewer than two seeds there is no interval: the plain mean ``"2.000"`` (never a
    ``± 0.000`` that would read as a measured zero spread); ``mark_one_seed`` adds the dagger
    of :data:`NO_INTERVAL_NOTE` (``"2.000†"``), for a table whose other cells have intervals.
    """
    mean = format_number(s.mean, digits, scientific)
    if s.n < 2:
        return mean + (NO_INTERVAL if mark_one_seed else "")
    return f"{mean} ± {format_number(s.ci, digits, scientific)}"


#: the table note of the evaluation-noise SD beside the seed interval (docs/reporting.md)
EVAL_NOISE_NOTE = (
    "(eval SD x): the evaluation-noise SD of the mean (each seed's evaluation combined as "
    "sqrt(sum SD^2) / n). Measured where the run holds a re-evaluation (`graphwm noise`: the "
    "SD over R evaluations of the checkpoint with new model and env samples; report.md says "
    "for how many); else a bootstrap over the reference transitions of each evaluation (1000 "
    "draws within each test episode), which also counts which transitions were scored and is "
    "an upper bound (1.5-3x the measured SD at the medium preset, docs/reproducing.md "
    '"Evaluation noise"). It is not the interval after the mean, which is the 95% CI over '
    "training seeds."
)


def format_noise(noise: float, digits: int = 3, scientific: bool = False) -> str:
    """``"(eval SD 0.012)"``: the evaluation-noise SD shown after a cell's seed interval."""
    return f"(eval SD {format_number(noise, digits, scientific)})"


def _mixed_seeds(table: Table) -> bool:
    """Some cells have one seed and others more: only then are the one-seed cells marked."""
    counts = table.seed_counts()
    return any(n < 2 for n in counts) and any(n >= 2 for n in counts)


def _seed_note(table: Table) -> str:
    counts = table.seed_counts()
    if not counts:
        return ""
    lo, hi = min(counts), max(counts)
    seeds = (
        f"{lo} seed{'' if lo == 1 else 's'}" if lo == hi else f"{lo}-{hi} seeds (varies per cell)"
    )
    if hi < 2:  # one footnote for the whole table instead of a mark in every cell
        return ONE_SEED_NOTE[:-1] + ("; lowest in bold." if table.bold_best else ".")
    note = f"Mean ± 95% CI (Student t) over {seeds}"
    return note + ("; lowest mean in bold." if table.bold_best else ".")


def _footnotes(table: Table) -> list[str]:
    """Notes printed under the table: the table's own, then the single-seed dagger (only
    when one-seed cells stand beside cells with intervals)."""
    notes = list(table.notes)
    if table.has_noise():
        notes.append(EVAL_NOISE_NOTE)
    if _mixed_seeds(table):
        notes.append(NO_INTERVAL_NOTE)
    return notes


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(table: Table) -> str:
    """GitHub-flavoured Markdown rendering (title, note, pipe table)."""
    header = table.label_columns + table.value_columns
    lines = [f"### {table.caption}", ""]
    note = _seed_note(table)
    if note:
        lines += [note, ""]
    lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    aligns = [":--"] * len(table.label_columns) + ["--:"] * len(table.value_columns)
    lines.append("|" + "|".join(aligns) + "|")
    for row in table.rows:
        texts = [_md_escape(s) for s in row.labels]
        for cell in row.cells:
            if cell is None:
                texts.append("—")
                continue
            text = format_mean_ci(
                cell.stats, table.digits, table.scientific, mark_one_seed=_mixed_seeds(table)
            )
            text = f"**{text}**" if cell.bold else text
            if cell.noise is not None:
                text += " " + format_noise(cell.noise, table.digits, table.scientific)
            texts.append(text)
        lines.append("| " + " | ".join(texts) + " |")
    notes = _footnotes(table)
    if notes:
        lines += [""] + [f"{note}  " for note in notes[:-1]] + notes[-1:]
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters in plain text."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex_value(cell: Cell, table: Table) -> str:
    mean = format_number(cell.stats.mean, table.digits, table.scientific)
    ci = format_number(cell.stats.ci, table.digits, table.scientific)
    if cell.stats.n < 2:  # no interval with one seed (marked where other cells have one)
        text = mean + ("$^\\dagger$" if _mixed_seeds(table) else "")
    else:
        text = f"{mean} $\\pm$ {ci}"
    text = f"\\textbf{{{text}}}" if cell.bold else text
    if cell.noise is not None:
        text += " " + format_noise(cell.noise, table.digits, table.scientific)
    return text


def to_latex(table: Table) -> str:
    """A booktabs ``tabular`` (to ``\\input`` inside a ``table`` float, as in the paper).

    Needs ``\\usepackage{booktabs}``. Missing cells read ``--``; groups (one per environment)
    are separated by ``\\midrule``.
    """
    spec = "l" * len(table.label_columns) + "c" * len(table.value_columns)
    header = [latex_escape(h) for h in table.label_columns + table.value_columns]
    lines = [
        f"% {table.caption}. {_seed_note(table)}".rstrip(),
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(header) + " \\\\",
        "\\midrule",
    ]
    for i, row in enumerate(table.rows):
        if row.group_start and i > 0:
            lines.append("\\midrule")
        texts = [latex_escape(s) for s in row.labels]
        texts += ["--" if c is None else _latex_value(c, table) for c in row.cells]
        lines.append(" & ".join(texts) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    lines += [f"% {latex_escape(note)}" for note in _footnotes(table)]
    return "\n".join(lines) + "\n"
