"""Seed aggregation and the paper-shaped result tables (Markdown and LaTeX/booktabs).

Every table is first built as a :class:`Table` (label columns + ``mean ± CI`` cells) and then
rendered by :func:`to_markdown` and :func:`to_latex`, so both formats always agree.
Input records are the validated dicts returned by :func:`graphwm.report.load_results`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

# Display order and names of the paper's models (section "Experiments", "Baselines"). Several
# spellings are accepted because the report must not depend on the models package; an
# unknown model name is shown verbatim and ordered alphabetically after the known ones.
_MODEL_ORDER = ("gdm", "g-rssm", "ea-gwm", "vanilla-gwm")
_MODEL_ALIASES = {
    "gdm": "gdm",
    "g-rssm": "g-rssm",
    "g_rssm": "g-rssm",
    "grssm": "g-rssm",
    "ea-gwm": "ea-gwm",
    "ea_gwm": "ea-gwm",
    "eagwm": "ea-gwm",
    "vanilla-gwm": "vanilla-gwm",
    "vanilla_gwm": "vanilla-gwm",
    "vanillagwm": "vanilla-gwm",
    "gwm": "vanilla-gwm",
}
_MODEL_DISPLAY = {
    "gdm": "GDM",
    "g-rssm": "G-RSSM",
    "ea-gwm": "EA-GWM",
    "vanilla-gwm": "Vanilla GWM",
}
# Environment order of the paper's tables.
ENV_ORDER = ("RGC", "OD", "SAR", "CF")
# GDD^2 = (node + graph + edge) / 3 + joint (section "Graph Distribution Distance").
COMPONENTS = ("node", "graph", "edge", "joint")
# Separator of ablation names, e.g. "gdm:no-h-plus" (models package naming).
ABLATION_SEP = ":"


# ---------------------------------------------------------------------------------------------
# Aggregation over seeds
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeedStats:
    """Mean and 95% confidence half-width of one quantity over ``n`` seeds."""

    mean: float
    ci: float
    n: int


def t_critical(n: int, confidence: float = 0.95) -> float:
    """Two-sided Student-t critical value ``t_{(1+confidence)/2, n-1}`` for ``n >= 2`` seeds."""
    if n < 2:
        raise ValueError(f"t_critical needs n >= 2 samples, got n={n}")
    return float(stats.t.ppf(0.5 + confidence / 2.0, df=n - 1))


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> SeedStats:
    """Mean and Student-t confidence half-width over seeds.

    ``ci = t_{0.975, n-1} * std(ddof=1) / sqrt(n)``; ``ci = 0`` when ``n == 1``; mean and ci are
    NaN when ``n == 0``. NaN or inf values propagate (the cell then reads ``nan``/``inf``), so a
    broken seed is visible in the table instead of silently dropped.
    """
    x = np.asarray(list(values), dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return SeedStats(math.nan, math.nan, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = float(np.mean(x))
        if n == 1:
            return SeedStats(mean, 0.0 if math.isfinite(mean) else math.nan, 1)
        half = t_critical(n, confidence) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return SeedStats(mean, half, n)


def aggregate(
    records: Iterable[dict],
    key: Callable[[dict], tuple],
    value: Callable[[dict], float],
) -> dict[tuple, SeedStats]:
    """Group ``records`` by ``key(record)`` and aggregate ``value(record)`` over the group.

    Each group holds one record per seed (duplicates are rejected by ``load_results``).
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(value(record))
    return {k: mean_ci(v) for k, v in groups.items()}


# ---------------------------------------------------------------------------------------------
# Ordering and names
# ---------------------------------------------------------------------------------------------
def canonical_model(name: str) -> str:
    """Canonical spelling of a known model name (e.g. ``"ea_gwm"`` -> ``"ea-gwm"``)."""
    return _MODEL_ALIASES.get(name.lower(), name)


def model_display(name: str) -> str:
    """Paper name of a model (``"gdm"`` -> ``"GDM"``); ablations and unknown names verbatim."""
    if is_ablation(name):
        return name
    return _MODEL_DISPLAY.get(canonical_model(name), name)


def is_ablation(model: str) -> bool:
    """Whether a model name is a GDM ablation (contains ``":"``, e.g. ``"gdm:no-h-plus"``)."""
    return ABLATION_SEP in model


def order_models(names: Iterable[str]) -> list[str]:
    """Models in the paper's order; unknown names (and ablations) alphabetically after."""

    def rank(name: str) -> tuple[int, str]:
        canon = canonical_model(name)
        if canon in _MODEL_ORDER:
            return (_MODEL_ORDER.index(canon), name)
        return (len(_MODEL_ORDER), name)

    return sorted(set(names), key=rank)


def order_envs(names: Iterable[str]) -> list[str]:
    """Environments in the paper's order (RGC, OD, SAR, CF); others alphabetically after."""

    def rank(name: str) -> tuple[int, str]:
        return (ENV_ORDER.index(name), name) if name in ENV_ORDER else (len(ENV_ORDER), name)

    return sorted(set(names), key=rank)


def by_kind(records: Iterable[dict], kind: str) -> list[dict]:
    """The records of one result kind."""
    return [r for r in records if r["kind"] == kind]


def split_models(records: Iterable[dict]) -> tuple[list[dict], list[dict]]:
    """Split model-evaluation records into (paper models, ablations)."""
    models, ablations = [], []
    for r in records:
        (ablations if is_ablation(r["model"]) else models).append(r)
    return models, ablations


def reference_size(records: Iterable[dict], env: str) -> int | None:
    """Smallest evaluated size of ``env``: the size used for per-model breakdowns.

    The GDD is not size-invariant (section "Experiments", "Evaluation Procedure"), so averaging
    components over sizes would mix scales; the smallest test size (N = 20 in the paper, inside
    the training distribution) is used for the components and factor-wise breakdowns.
    """
    sizes = [r["size"] for r in records if r["env"] == env]
    return min(sizes) if sizes else None


# ---------------------------------------------------------------------------------------------
# Table model and renderers
# ---------------------------------------------------------------------------------------------
@dataclass
class Cell:
    """One ``mean ± CI`` cell; ``bold`` marks the best (lowest mean) entry of its column group."""

    stats: SeedStats
    bold: bool = False


@dataclass
class Row:
    """A table row: label strings (env, model, ...) followed by value cells (None = missing)."""

    labels: list[str]
    cells: list[Cell | None]
    group_start: bool = False


@dataclass
class Table:
    """A result table rendered identically to Markdown and LaTeX."""

    name: str
    caption: str
    label_columns: list[str]
    value_columns: list[str]
    rows: list[Row] = field(default_factory=list)
    digits: int = 3
    scientific: bool = False
    bold_best: bool = True

    def seed_counts(self) -> list[int]:
        """Number of seeds of every present cell."""
        return [c.stats.n for row in self.rows for c in row.cells if c is not None]


def format_number(x: float, digits: int = 3, scientific: bool = False) -> str:
    """Fixed-point (``2.000``) or scientific (``1.23e-04``) text; ``nan``/``inf`` verbatim."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if scientific:
        return "0" if x == 0 else f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def format_mean_ci(s: SeedStats, digits: int = 3, scientific: bool = False) -> str:
    """``"mean ± ci"`` text of a cell, e.g. ``"2.000 ± 2.484"``."""
    return (
        f"{format_number(s.mean, digits, scientific)} ± {format_number(s.ci, digits, scientific)}"
    )


def mark_best(cells: Sequence[Cell | None]) -> None:
    """Bold the cell(s) with the lowest finite mean (ties all bold; NaN/inf never bold)."""
    finite = [c for c in cells if c is not None and math.isfinite(c.stats.mean)]
    if not finite:
        return
    best = min(c.stats.mean for c in finite)
    for c in finite:
        c.bold = c.stats.mean == best


def _seed_note(table: Table) -> str:
    counts = table.seed_counts()
    if not counts:
        return ""
    lo, hi = min(counts), max(counts)
    seeds = (
        f"{lo} seed{'' if lo == 1 else 's'}" if lo == hi else f"{lo}-{hi} seeds (varies per cell)"
    )
    note = f"Mean ± 95% CI (Student t) over {seeds}"
    return note + ("; lowest mean in bold." if table.bold_best else ".")


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
            text = format_mean_ci(cell.stats, table.digits, table.scientific)
            texts.append(f"**{text}**" if cell.bold else text)
        lines.append("| " + " | ".join(texts) + " |")
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
    text = f"{mean} $\\pm$ {ci}"
    return f"\\textbf{{{text}}}" if cell.bold else text


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
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Builders (each returns None when its kind is absent)
# ---------------------------------------------------------------------------------------------
def _model_size_table(
    records: list[dict], name: str, caption: str, models_of_env: Callable[[str], list[str]]
) -> Table | None:
    """Rows env x model, columns sizes, best per env x size in bold."""
    if not records:
        return None
    agg = aggregate(records, lambda r: (r["env"], r["model"], r["size"]), lambda r: r["gdd"])
    sizes = sorted({r["size"] for r in records})
    table = Table(name, caption, ["Env", "Model"], [f"N={n}" for n in sizes])
    for env in order_envs(r["env"] for r in records):
        env_rows = []
        for model in models_of_env(env):
            cells = [Cell(agg[(env, model, n)]) if (env, model, n) in agg else None for n in sizes]
            if any(c is not None for c in cells):
                env_rows.append(Row(["", model_display(model)], cells))
        if not env_rows:
            continue
        for j in range(len(sizes)):
            mark_best([row.cells[j] for row in env_rows])
        env_rows[0].labels[0] = env
        env_rows[0].group_start = True
        table.rows.extend(env_rows)
    return table


def single_step_table(records: list[dict]) -> Table | None:
    """(a) Single-step GDD (paper table "ood_eval"): env x model rows, size columns."""
    models, _ = split_models(by_kind(records, "single_step"))

    def models_of_env(env: str) -> list[str]:
        return order_models(r["model"] for r in models if r["env"] == env)

    return _model_size_table(
        models,
        "gdd_single_step",
        "GDD score (lower is better) for single-step predictions on test sets of different sizes",
        models_of_env,
    )


def ablation_table(records: list[dict], reference_model: str = "gdm") -> Table | None:
    """(c) Ablation GDD (paper table "ablation_full"): env x (reference + ablations) x size.

    The full model ``reference_model`` is listed first for comparison, restricted to the
    sizes evaluated for the ablations of that environment.
    """
    single = by_kind(records, "single_step")
    _, ablations = split_models(single)
    if not ablations:
        return None
    keys = {(r["env"], r["size"]) for r in ablations}
    reference = [
        r
        for r in single
        if canonical_model(r["model"]) == reference_model and (r["env"], r["size"]) in keys
    ]
    rows = ablations + reference

    def models_of_env(env: str) -> list[str]:
        ref = sorted({r["model"] for r in reference if r["env"] == env})
        abl = sorted({r["model"] for r in ablations if r["env"] == env})
        return ref + abl

    return _model_size_table(
        rows,
        "ablations",
        "GDD score (single-step) for each GDM ablation and environment",
        models_of_env,
    )


def self_gdd_table(records: list[dict]) -> Table | None:
    """(b) Self-GDD of each environment against itself (paper table "self_mmd"): env x size."""
    selfs = by_kind(records, "self_gdd")
    if not selfs:
        return None
    agg = aggregate(selfs, lambda r: (r["env"], r["size"]), lambda r: r["gdd"])
    sizes = sorted({r["size"] for r in selfs})
    table = Table(
        "self_gdd",
        "Self-GDD between the reference environment distribution and a sampled environment"
        " distribution",
        ["Env"],
        [f"N={n}" for n in sizes],
        digits=3,
        scientific=True,
        bold_best=False,
    )
    for env in order_envs(r["env"] for r in selfs):
        cells = [Cell(agg[(env, n)]) if (env, n) in agg else None for n in sizes]
        table.rows.append(Row([env], cells, group_start=True))
    return table


def multi_step_table(records: list[dict]) -> Table | None:
    """(d) Multi-step GDD: env x model rows (with the graph size N), horizon columns."""
    models, _ = split_models(by_kind(records, "multi_step"))
    if not models:
        return None
    per_horizon: dict[tuple, list[float]] = defaultdict(list)
    for r in models:
        for h, g in zip(r["horizons"], r["gdd"], strict=True):
            per_horizon[(r["env"], r["size"], r["model"], h)].append(g)
    agg = {k: mean_ci(v) for k, v in per_horizon.items()}
    horizons = sorted({h for r in models for h in r["horizons"]})
    table = Table(
        "multi_step",
        "Multi-step rollout GDD (lower is better) per rollout length",
        ["Env", "N", "Model"],
        [f"T={h}" for h in horizons],
    )
    for env in order_envs(r["env"] for r in models):
        for size in sorted({r["size"] for r in models if r["env"] == env}):
            group = [r for r in models if r["env"] == env and r["size"] == size]
            rows = []
            for model in order_models(r["model"] for r in group):
                cells = [
                    Cell(agg[(env, size, model, h)]) if (env, size, model, h) in agg else None
                    for h in horizons
                ]
                rows.append(Row(["", "", model_display(model)], cells))
            for j in range(len(horizons)):
                mark_best([row.cells[j] for row in rows])
            rows[0].labels[:2] = [env, str(size)]
            rows[0].group_start = True
            table.rows.extend(rows)
    return table


def components_table(records: list[dict]) -> Table | None:
    """(e) GDD and its four squared-MMD components per env x model at the env's smallest size.

    See :func:`reference_size` for why the smallest size (not a mean over sizes) is used.
    """
    models, _ = split_models(by_kind(records, "single_step"))
    if not models:
        return None
    table = Table(
        "gdd_components",
        "GDD score and its squared-MMD components (GDD^2 = (node + graph + edge)/3 + joint)"
        " per model, at the smallest test size of each environment",
        ["Env", "N", "Model"],
        ["GDD"] + [c.capitalize() for c in COMPONENTS],
    )
    for env in order_envs(r["env"] for r in models):
        size = reference_size(models, env)
        group = [r for r in models if r["env"] == env and r["size"] == size]
        rows = []
        for model in order_models(r["model"] for r in group):
            mine = [r for r in group if r["model"] == model]
            cells = [Cell(mean_ci(r["gdd"] for r in mine))]
            cells += [Cell(mean_ci(r["components"][c] for r in mine)) for c in COMPONENTS]
            rows.append(Row(["", "", model_display(model)], cells))
        for j in range(1 + len(COMPONENTS)):
            mark_best([row.cells[j] for row in rows])
        rows[0].labels[:2] = [env, str(size)]
        rows[0].group_start = True
        table.rows.extend(rows)
    return table


def factor_names(records: Iterable[dict]) -> list[str]:
    """Factor-wise metric names in first-seen order: adjacency BCE first, then features."""
    names: dict[str, None] = {"adjacency_bce": None}
    for r in records:
        for f in r["factor_metrics"]["features"]:
            names.setdefault(f, None)
    return list(names)


def factor_value(record: dict, factor: str) -> float | None:
    """One factor-wise metric of a single-step record (None when the env lacks the feature)."""
    fm = record["factor_metrics"]
    if factor == "adjacency_bce":
        return fm["adjacency_bce"]
    return fm["features"].get(factor)


def factor_metrics_table(records: list[dict]) -> Table | None:
    """Factor-wise metrics (adjacency BCE, per-feature errors) per env x model x factor.

    Rows env x factor, columns models, at the env's smallest size (as :func:`components_table`).
    """
    models, _ = split_models(by_kind(records, "single_step"))
    if not models:
        return None
    model_names = order_models(r["model"] for r in models)
    table = Table(
        "factor_metrics",
        "Factor-wise distribution metrics (adjacency BCE, per-feature errors) per model,"
        " at the smallest test size of each environment",
        ["Env", "N", "Factor"],
        [model_display(m) for m in model_names],
    )
    for env in order_envs(r["env"] for r in models):
        size = reference_size(models, env)
        group = [r for r in models if r["env"] == env and r["size"] == size]
        rows = []
        for factor in factor_names(group):
            cells: list[Cell | None] = []
            for model in model_names:
                values = [factor_value(r, factor) for r in group if r["model"] == model]
                values = [v for v in values if v is not None]
                cells.append(Cell(mean_ci(values)) if values else None)
            mark_best(cells)
            rows.append(Row(["", "", factor], cells))
        rows[0].labels[:2] = [env, str(size)]
        rows[0].group_start = True
        table.rows.extend(rows)
    return table


def build_tables(records: list[dict]) -> list[Table]:
    """All tables that the present result kinds allow, main table first."""
    builders = (
        single_step_table,
        self_gdd_table,
        ablation_table,
        multi_step_table,
        components_table,
        factor_metrics_table,
    )
    return [t for t in (b(records) for b in builders) if t is not None]
