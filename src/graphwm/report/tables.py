"""The paper-shaped result tables: ordering and names of models and envs, and the builders.

Every table is built as a :class:`~graphwm.report.table.Table` (label columns + ``mean ± CI``
cells, statistics from :mod:`graphwm.report.seed_stats`) and rendered by
:mod:`graphwm.report.formatting`, so
Markdown and LaTeX always agree. Input records are the validated dicts returned by
:func:`graphwm.report.build.load_results`.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterable

from graphwm.report.eval_noise import mean_noise_sd, record_noise
from graphwm.report.formatting import (
    format_mean_ci,
    format_number,
    latex_escape,
    to_latex,
    to_markdown,
)
from graphwm.report.seed_stats import SeedStats, aggregate, mean_ci, t_critical
from graphwm.report.table import Cell, Row, Table, mark_best

# re-exported for the report and older imports
__all__ = [
    "Cell",
    "Row",
    "SeedStats",
    "Table",
    "aggregate",
    "build_tables",
    "format_mean_ci",
    "format_number",
    "latex_escape",
    "mark_best",
    "mean_ci",
    "t_critical",
    "to_latex",
    "to_markdown",
]

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
    models: list[dict] = []
    ablations: list[dict] = []
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


def group_noise(records: Iterable[dict], key: Callable[[dict], tuple]) -> dict[tuple, float | None]:
    """Per group of ``key``: the evaluation-noise SD of the group's mean over seeds
    (:func:`~graphwm.report.eval_noise.mean_noise_sd` of each record's bootstrap SD); None
    for a group with a record of an older run (no ``gdd_transitions``)."""
    groups: dict[tuple, list[float | None]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(record_noise(record))
    return {k: mean_noise_sd(v) for k, v in groups.items()}


# ---------------------------------------------------------------------------------------------
# Builders (each returns None when its kind is absent)
# ---------------------------------------------------------------------------------------------
#: the record key of the unbiased estimator's GDD (absent in records of older runs)
UNBIASED = "gdd_unbiased"

UNBIASED_NOTE = (
    "Unbiased estimator: per reference transition the signed square root of the unbiased"
    " (U-statistic) MMD^2 of the same samples, averaged like the GDD. Its expectation is 0 when"
    " model and environment samples come from one distribution, whereas the biased GDD (the"
    " paper's) keeps a positive floor of order 1/sqrt(kappa); the gap between the two tables is"
    " that bias. A missing cell: not stored (results of older runs)."
)


def aggregate_present(
    records: Iterable[dict], key: Callable[[dict], tuple], field_name: str
) -> dict[tuple, SeedStats]:
    """:func:`aggregate` of ``record[field_name]`` over the groups of ``key`` whose every
    record holds it: a group with a record of an older run that lacks it is left out (its
    cell reads "—"), never averaged over fewer seeds than the GDD beside it."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(record)
    complete = [r for g in groups.values() if all(field_name in r for r in g) for r in g]
    return aggregate(complete, key, operator.itemgetter(field_name))


def _model_size_table(
    records: list[dict],
    name: str,
    caption: str,
    models_of_env: Callable[[str], list[str]],
    field_name: str = "gdd",
) -> Table | None:
    """Rows env x model, columns sizes, best per env x size in bold; ``field_name`` the
    record's value (``gdd``, or :data:`UNBIASED`, whose tables carry no noise band: the
    band is the biased GDD's bootstrap)."""
    if not records:
        return None
    key = operator.itemgetter("env", "model", "size")
    agg = aggregate_present(records, key, field_name)
    if field_name == "gdd":
        noise = group_noise(records, key)
    else:
        noise = defaultdict(lambda: None)
    sizes = sorted({r["size"] for r in records})
    evaluated = {key(r) for r in records}  # a row per evaluated model, even of "—" cells
    table = Table(name, caption, ["Env", "Model"], [f"N={n}" for n in sizes])
    for env in order_envs(r["env"] for r in records):
        env_rows = []
        for model in models_of_env(env):
            cells = [
                Cell(agg[(env, model, n)], noise=noise[(env, model, n)])
                if (env, model, n) in agg
                else None
                for n in sizes
            ]
            if any((env, model, n) in evaluated for n in sizes):
                env_rows.append(Row(["", model_display(model)], cells))
        if not env_rows:
            continue
        for j in range(len(sizes)):
            mark_best([row.cells[j] for row in env_rows])
        env_rows[0].labels[0] = env
        env_rows[0].group_start = True
        table.rows.extend(env_rows)
    return table


INDISTINGUISHABLE_COLUMN = "Indist."


def _indistinguishable_note(records: list[dict]) -> str:
    perms = sorted(
        {r["num_permutations"] for r in records if r.get("num_permutations") is not None}
    )
    alphas = sorted({r["alpha"] for r in records if r.get("alpha") is not None})
    return (
        f"{INDISTINGUISHABLE_COLUMN}: share of reference transitions (all sizes) where a"
        f" permutation test ({', '.join(map(str, perms))} relabelings, GDD statistic) cannot tell"
        f" model samples from environment samples at level alpha ="
        f" {', '.join(map(str, alphas))} (higher is better; beyond the paper)."
    )


def _indistinguishable_share(records: list[dict]) -> float:
    """Share over every reference transition of a model's records (one seed)."""
    weights = [r.get("num_transitions") or 1 for r in records]
    shares = [r["indistinguishable"] for r in records]
    return float(sum(w * s for w, s in zip(weights, shares, strict=True)) / sum(weights))


def _base_models(records: list[dict]) -> tuple[list[dict], Callable[[str], list[str]]]:
    """The single-step records of the base models (no ablations), and a function giving an
    env's models in table order."""
    models, _ = split_models(by_kind(records, "single_step"))

    def models_of_env(env: str) -> list[str]:
        return order_models(r["model"] for r in models if r["env"] == env)

    return models, models_of_env


def single_step_table(records: list[dict]) -> Table | None:
    """(a) Single-step GDD (paper table "ood_eval"): env x model rows, size columns.

    When the results hold the permutation test, one more column gives per model the share of
    reference transitions whose model and environment samples it cannot tell apart (mean and
    CI over seeds of the per-seed share over all sizes).
    """
    models, models_of_env = _base_models(records)
    table = _model_size_table(
        models,
        "gdd_single_step",
        "GDD score (lower is better) for single-step predictions on test sets of different sizes",
        models_of_env,
    )
    tested = [r for r in models if "indistinguishable" in r]
    if table is None or not tested:
        return table
    per_seed: dict[tuple, list[dict]] = defaultdict(list)
    for r in tested:
        per_seed[(r["env"], r["model"], r["seed"])].append(r)
    shares: dict[tuple, list[float]] = defaultdict(list)
    for (env, model, _), group in per_seed.items():
        shares[(env, model)].append(_indistinguishable_share(group))
    table.value_columns.append(INDISTINGUISHABLE_COLUMN)
    env = ""
    for row in table.rows:
        env = row.labels[0] or env
        model = next(m for m in models_of_env(env) if model_display(m) == row.labels[1])
        values = shares.get((env, model))
        row.cells.append(Cell(mean_ci(values)) if values else None)
    table.notes.append(_indistinguishable_note(tested))
    return table


def single_step_unbiased_table(records: list[dict]) -> Table | None:
    """(a') The main table with the unbiased estimator: env x model rows, size columns;
    "—" where a result of an older run lacks ``gdd_unbiased``."""
    models, models_of_env = _base_models(records)
    table = _model_size_table(
        models,
        "gdd_single_step_unbiased",
        "GDD score with the unbiased estimator (lower is better) for single-step predictions"
        " on test sets of different sizes",
        models_of_env,
        UNBIASED,
    )
    if table is not None:
        table.notes.append(UNBIASED_NOTE)
    return table


def ablation_table(
    records: list[dict], reference_model: str = "gdm", field_name: str = "gdd"
) -> Table | None:
    """(c) Ablation GDD (paper table "ablation_full"): env x (reference + ablations) x size.

    The full model ``reference_model`` is listed first for comparison, restricted to the
    sizes evaluated for the ablations of that environment. ``field_name``: ``gdd`` or
    :data:`UNBIASED` (:func:`ablation_unbiased_table`).
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

    if field_name == "gdd":
        return _model_size_table(
            rows,
            "ablations",
            "GDD score (single-step) for each GDM ablation and environment",
            models_of_env,
        )
    table = _model_size_table(
        rows,
        "ablations_unbiased",
        "GDD score (single-step, unbiased estimator) for each GDM ablation and environment",
        models_of_env,
        field_name,
    )
    if table is not None:
        table.notes.append(UNBIASED_NOTE)
    return table


def ablation_unbiased_table(records: list[dict]) -> Table | None:
    """(c') The ablation table with the unbiased estimator ("—" where not stored)."""
    return ablation_table(records, field_name=UNBIASED)


#: a self-GDD table with a value this small (that is not rounding noise of 0, below
#: ZERO_BELOW) is written in scientific notation
SCIENTIFIC_BELOW = 5e-4
ZERO_BELOW = 1e-6

SELF_GDD_NOTE = (
    "Biased: the paper's V-statistic estimate; it is positive even for two sample sets of one"
    " distribution (its square has expectation of order 1/kappa), so it is the floor a model's"
    " GDD can reach at this sample size. Unbiased: the U-statistic on the same samples (per"
    " reference transition the signed square root of the unbiased MMD^2, averaged like the"
    " GDD), whose expectation is 0 here."
)


def self_gdd_table(records: list[dict]) -> Table | None:
    """(b) Self-GDD of each environment against itself (paper table "self_mmd"): env x size.

    One row per estimator: the biased one (the paper's definition) and, when the results hold
    it, the unbiased one on the same samples, side by side.
    """
    selfs = by_kind(records, "self_gdd")
    if not selfs:
        return None
    sizes = sorted({r["size"] for r in selfs})
    table = Table(
        "self_gdd",
        "Self-GDD between the reference environment distribution and a sampled environment"
        " distribution",
        ["Env", "Estimator"],
        [f"N={n}" for n in sizes],
        bold_best=False,
    )
    estimators = [("biased (paper)", "gdd")]
    if any("gdd_unbiased" in r for r in selfs):
        estimators.append(("unbiased", "gdd_unbiased"))
        table.notes.append(SELF_GDD_NOTE)
    for env in order_envs(r["env"] for r in selfs):
        for i, (label, field_name) in enumerate(estimators):
            mine = [r for r in selfs if r["env"] == env and field_name in r]
            agg = aggregate(mine, lambda r: (r["size"],), operator.itemgetter(field_name))
            cells = [Cell(agg[(n,)]) if (n,) in agg else None for n in sizes]
            table.rows.append(Row([env if i == 0 else "", label], cells, group_start=i == 0))
    # three decimals as every GDD of the report, unless a value would read 0.000: then the
    # whole table (never a single cell) in scientific notation
    means = [c.stats.mean for row in table.rows for c in row.cells if c is not None]
    table.scientific = any(ZERO_BELOW <= abs(m) < SCIENTIFIC_BELOW for m in means)
    if table.scientific:
        table.notes.append("Scientific notation: some values are below 0.0005.")
    return table


def multi_step_table(records: list[dict], field_name: str = "gdd") -> Table | None:
    """(d) Multi-step GDD: env x model rows (with the graph size N), horizon columns.

    ``field_name``: ``gdd`` or :data:`UNBIASED` (:func:`multi_step_unbiased_table`; a group
    with a record lacking it reads "—")."""
    models, _ = split_models(by_kind(records, "multi_step"))
    if not models:
        return None
    per_horizon: dict[tuple, list[float]] = defaultdict(list)
    incomplete: set[tuple] = set()  # groups with a record of an older run (no such field)
    for r in models:
        ident = (r["env"], r["size"], r["model"])
        if field_name not in r:
            incomplete.add(ident)
            continue
        for h, g in zip(r["horizons"], r[field_name], strict=True):
            per_horizon[(*ident, h)].append(g)
    agg = {k: mean_ci(v) for k, v in per_horizon.items() if k[:3] not in incomplete}
    horizons = sorted({h for r in models for h in r["horizons"]})
    unbiased = field_name != "gdd"
    table = Table(
        "multi_step_unbiased" if unbiased else "multi_step",
        "Multi-step rollout GDD"
        + (" with the unbiased estimator" if unbiased else "")
        + " (lower is better) per rollout length",
        ["Env", "N", "Model"],
        [f"T={h}" for h in horizons],
    )
    if unbiased:
        table.notes.append(UNBIASED_NOTE)
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


def multi_step_unbiased_table(records: list[dict]) -> Table | None:
    """(d') The multi-step table with the unbiased estimator ("—" where not stored)."""
    return multi_step_table(records, UNBIASED)


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
            cells: list[Cell | None] = [Cell(mean_ci(r["gdd"] for r in mine))]
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
                found = [factor_value(r, factor) for r in group if r["model"] == model]
                values = [v for v in found if v is not None]
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
        single_step_unbiased_table,
        self_gdd_table,
        ablation_table,
        ablation_unbiased_table,
        multi_step_table,
        multi_step_unbiased_table,
        components_table,
        factor_metrics_table,
    )
    return [t for t in (b(records) for b in builders) if t is not None]
