"""The report's matplotlib figures (PNG, Agg canvas; no pyplot global state).

Each ``*_figure`` function draws one figure from validated result records (see
:func:`graphwm.report.build.load_results`) or training logs and returns the written path, or
``None`` when its inputs are absent. Non-finite values are drawn as gaps, never crash.
"""

from __future__ import annotations

import textwrap
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import BrokenExecutor, Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import NullFormatter, NullLocator

from graphwm.report.tables import (
    COMPONENTS,
    SeedStats,
    by_kind,
    canonical_model,
    factor_names,
    factor_value,
    is_ablation,
    mean_ci,
    model_display,
    order_envs,
    order_models,
    reference_size,
    split_models,
)
from graphwm.report.training_logs import TrainingLog

FIGURE_TITLES = {
    "gdd_vs_size": "Single-step GDD vs graph size",
    "ablation_gdd_vs_size": "Single-step GDD vs graph size for each GDM ablation",
    "multi_step": "Multi-step rollout GDD and invalid-action rate",
    "multi_step_components": "Multi-step rollout GDD components (squared MMD)",
    "gdd_components": "GDD score and its components per model (smallest test size)",
    "factor_metrics": "Factor-wise distribution metrics vs graph size",
    "training_curves": "Training loss curves, one panel per model (mean over seeds, smoothed)",
    "ablation_training_curves": "Training loss curves of the GDM ablations and the full GDM",
}
SMOOTHING_WINDOW = 10  # "smoothed over 10 points" (appendix "Training Curves")
ENV_COLOR = "0.5"  # the environment is drawn in grey (appendix "Multi-Step Rollout Results")
FLOOR_COLOR = "0.35"  # the self-GDD floor
_DPI = 120
_PANEL = (3.6, 2.8)
_FLOOR_PANEL_HEIGHT = 3.6  # the GDD vs size panels span 0 (the floor) to the models' GDD

#: axis labels, with their units (the GDD and the MMD are distances between distributions of
#: kernel features: unitless)
GDD_LABEL = "GDD (unitless)"
SIZE_LABEL = "graph size N (nodes)"
HORIZON_LABEL = "rollout length T (env steps)"
STEP_LABEL = "training step"
INVALID_LABEL = "invalid-action rate (fraction)"
MMD2_LABEL = "squared MMD (unitless)"
#: the factor-wise metrics' units (graphwm.metric.factor_metrics.metric_name)
METRIC_UNITS = {
    "BCE": "BCE (nats)",
    "W1": "W1 (feature units)",
    "TV": "TV distance (0-1)",
}
#: the full GDM in an ablation figure: the reference every ablation is read against
FULL_GDM_LABEL = "GDM (full model)"
FLOOR_LABEL = "self-GDD floor (env vs itself)"
ONE_SEED_NOTE = "One seed: no confidence bands or error bars."
FLOOR_NOTE = "Self-GDD floor: the environment against itself at the same sample size."

#: markers and line styles cycled per model, so that coinciding curves stay visible (open
#: markers of different shapes drawn on one point are all seen) and each curve is named
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", ":")


@dataclass(frozen=True)
class Style:
    """How one model is drawn in every figure of a report: colour, marker, line style."""

    color: Any
    marker: str
    linestyle: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``Axes.plot`` for a curve of this model."""
        return {
            "color": self.color,
            "marker": self.marker,
            "linestyle": self.linestyle,
            "markersize": 5,
            "fillstyle": "none",
            "markeredgewidth": 1.1,
            "linewidth": 1.3,
        }


#: the full GDM of the ablation figures: black, thicker, drawn under the ablations
FULL_GDM_STYLE = Style("black", "o", "-")


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def model_styles(models: Iterable[str]) -> dict[str, Style]:
    """A stable, distinct (colour, marker, line style) per model in display order.

    Colours from tab10 (tab20 beyond ten models); marker ``i`` and line style ``i`` cycle
    independently, so no two of the first 20 models share both.
    """
    from matplotlib import colormaps

    names = order_models(models)
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {
        m: Style(cmap(i % cmap.N), MARKERS[i % len(MARKERS)], LINESTYLES[i % len(LINESTYLES)])
        for i, m in enumerate(names)
    }


def _finite(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """Float array with inf replaced by NaN (drawn as a gap, ignored by autoscaling)."""
    a = np.asarray(x, dtype=np.float64)
    return np.where(np.isfinite(a), a, np.nan)


class _Notes:
    """The notes of one figure, printed above its legend (coinciding curves, one seed, ...)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.max_seeds = 0

    def add(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)

    def seeds(self, series: Iterable[SeedStats]) -> None:
        self.max_seeds = max([self.max_seeds, *(s.n for s in series)])

    def text(self) -> list[str]:
        one_seed = [ONE_SEED_NOTE] if self.max_seeds == 1 else []
        return one_seed + self.lines


def _grid(rows: int, cols: int, height: float = _PANEL[1]) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(_PANEL[0] * cols, height * rows + 0.3), layout="constrained")
    axes = np.asarray(fig.subplots(rows, cols, squeeze=False))
    return fig, axes


def _save(fig: Figure, path: Path, notes: _Notes | None = None) -> Path:
    """Add the figure's one legend, with its notes as the legend's title (the rule of every
    figure: one box above the panels), and write the PNG."""
    handles: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    lines = notes.text() if notes is not None else []
    if handles or lines:
        legend = shared_legend(fig, list(handles.values()), list(handles.keys()), lines)
        # the figure grows by the legend's height, so the panels keep their size
        fig.set_figheight(fig.get_figheight() + legend.get_window_extent().height / fig.dpi)
    fig.savefig(path, dpi=_DPI, metadata={"Software": None})
    return path


def shared_legend(
    fig: Figure, handles: list, labels: list[str], notes: Sequence[str] = ()
) -> Legend:
    """The figure's one legend, above the panels, in as many columns (at most 5) as fit the
    figure's width; ``notes`` (each wrapped to the figure's width) are its title.

    A legend wider than the figure is cut off at its edges (a one-panel figure is 3.6 in
    wide), so columns are dropped until it fits; its width does not depend on the layout.
    """
    width = max(30, int(fig.get_figwidth() * 12))  # characters per line at "small" size
    title = "\n".join(textwrap.fill(note, width) for note in notes) or None
    for ncols in range(max(1, min(len(handles), 5)), 0, -1):
        legend = fig.legend(
            handles,
            labels,
            loc="outside upper center",
            ncols=ncols,
            fontsize="small",
            title=title,
            title_fontsize="small",
            alignment="left",
        )
        if ncols == 1 or legend.get_window_extent().width <= fig.bbox.width:
            return legend
        legend.remove()
    raise AssertionError("unreachable: one column is always kept")


def _log_size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Log x axis with the evaluated sizes as tick labels."""
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(sizes), [str(s) for s in sizes])
    ax.set_xlabel(SIZE_LABEL)


def _line_with_band(
    ax: Axes, x: Sequence[float], series: Sequence[SeedStats], label: str, style: Style
) -> np.ndarray:
    """Mean line with open markers and a shaded 95% CI band (none for one seed); returns
    the drawn means."""
    mean = _finite([s.mean for s in series])
    ci = _finite([s.ci if s.n >= 2 else np.nan for s in series])
    ax.plot(x, mean, label=label, **style.line())
    if np.isfinite(ci).any():
        ax.fill_between(x, mean - ci, mean + ci, color=style.color, alpha=0.15, linewidth=0)
    _mark_non_finite(ax, x, [s.mean for s in series], style.color)
    return mean


def _mark_non_finite(ax: Axes, x: Sequence[float], values: Sequence[float], color) -> None:
    """Draw an ``x`` at the bottom of the panel wherever a mean is NaN or inf (not a gap only)."""
    bad = [xi for xi, v in zip(x, values, strict=True) if not np.isfinite(v)]
    if bad:
        ax.plot(
            bad,
            [0.03] * len(bad),
            linestyle="none",
            marker="x",
            color=color,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
        )


#: curves closer than this share of their panel's y range everywhere are drawn on top of
#: one another at the figure's resolution
COINCIDE_SHARE = 0.01


def coinciding(
    curves: Mapping[str, tuple[Sequence[float], np.ndarray]], share: float = COINCIDE_SHARE
) -> list[list[str]]:
    """Groups (two or more, in the given order) of the labels whose curves lie on one another:
    equal x values and y values within ``share`` of the y range of all the curves (NaN equal
    to NaN), so that one would hide the others without distinct markers and line styles."""
    ys = [np.asarray(y, dtype=np.float64) for _, y in curves.values()]
    finite = np.concatenate([y[np.isfinite(y)] for y in ys]) if ys else np.array([])
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    tol = share * span
    groups: list[list[str]] = []
    for label, (x, y) in curves.items():
        for group in groups:
            gx, gy = curves[group[0]]
            if list(gx) == list(x) and np.allclose(gy, y, rtol=0.0, atol=tol, equal_nan=True):
                group.append(label)
                break
        else:
            groups.append([label])
    return [g for g in groups if len(g) > 1]


def _note_coinciding(
    notes: _Notes, where: str, curves: Mapping[str, tuple[Sequence[float], np.ndarray]]
) -> None:
    for group in coinciding(curves):
        names = ", ".join(group[:-1]) + f" and {group[-1]}"
        notes.add(f"{where}: {names} coincide (on top of one another; see their markers).")


def _per_horizon(records: list[dict], field: str, sub: str | None = None) -> dict[int, SeedStats]:
    values: dict[int, list[float]] = defaultdict(list)
    for r in records:
        series = r[field] if sub is None else r[field][sub]
        for h, v in zip(r["horizons"], series, strict=True):
            values[h].append(v)
    return {h: mean_ci(v) for h, v in sorted(values.items())}


def _self_floor(records: list[dict], env: str) -> dict[int, SeedStats]:
    """The biased self-GDD of ``env`` per size (mean over seeds): the floor of its GDD."""
    values: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r["kind"] == "self_gdd" and r["env"] == env:
            values[r["size"]].append(r["gdd"])
    return {n: mean_ci(v) for n, v in sorted(values.items())}


def _draw_floor(ax: Axes, floor: Mapping[int, SeedStats], sizes: Sequence[int]) -> None:
    """The env's self-GDD per size as a grey dashed reference line (the y axis includes it:
    the gap of a model to the floor is what a reader judges)."""
    xs = [n for n in sizes if n in floor]
    if xs:
        ax.plot(
            xs,
            _finite([floor[n].mean for n in xs]),
            color=FLOOR_COLOR,
            linestyle=(0, (2, 2)),
            marker="_",
            markersize=10,
            linewidth=1.2,
            label=FLOOR_LABEL,
            zorder=1,
        )


def _is_full_gdm(model: str) -> bool:
    return canonical_model(model) == "gdm"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def gdd_vs_size_figure(records: list[dict], path: Path, styles: dict[str, Style]) -> Path | None:
    """One panel per env: single-step GDD vs size (log x), a line per model with CI band,
    and the env's self-GDD (``self_gdd`` records among ``records``) as the floor.

    With ablations (model names with ``:``) the full GDM is the black reference line.
    """
    models_records = [r for r in records if r["kind"] == "single_step"]
    if not models_records:
        return None
    ablations = any(is_ablation(r["model"]) for r in models_records)
    envs = order_envs(r["env"] for r in models_records)
    fig, axes = _grid(1, len(envs), height=_FLOOR_PANEL_HEIGHT)
    notes = _Notes()
    for ax, env in zip(axes[0], envs, strict=True):
        mine = [r for r in models_records if r["env"] == env]
        sizes = sorted({r["size"] for r in mine})
        curves: dict[str, tuple[Sequence[float], np.ndarray]] = {}
        for model in order_models(r["model"] for r in mine):
            rs = [r for r in mine if r["model"] == model]
            xs = sorted({r["size"] for r in rs})
            series = [mean_ci(r["gdd"] for r in rs if r["size"] == n) for n in xs]
            notes.seeds(series)
            reference = ablations and _is_full_gdm(model)
            label = FULL_GDM_LABEL if reference else model_display(model)
            style = FULL_GDM_STYLE if reference else styles[model]
            curves[label] = (xs, _line_with_band(ax, xs, series, label, style))
        _draw_floor(ax, _self_floor(records, env), sizes)
        _note_coinciding(notes, env, curves)
        _log_size_axis(ax, sizes)
        ax.set_title(env)
        ax.set_ylabel(GDD_LABEL)
    if any(r["kind"] == "self_gdd" for r in records):
        notes.add(FLOOR_NOTE)
    return _save(fig, path, notes)


def multi_step_figure(records: list[dict], path: Path, styles: dict[str, Style]) -> Path | None:
    """Per env: GDD vs rollout length (top) and invalid-action rate (bottom, env in grey)."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(2, len(envs))
    notes = _Notes()
    env_style = Style(ENV_COLOR, "x", ":")
    for col, env in enumerate(envs):
        mine = [r for r in records if r["env"] == env]
        ax_gdd, ax_inv = axes[0, col], axes[1, col]
        curves: dict[str, dict[str, tuple[Sequence[float], np.ndarray]]] = defaultdict(dict)
        for model in order_models(r["model"] for r in mine):
            rs = [r for r in mine if r["model"] == model]
            for ax, field in ((ax_gdd, "gdd"), (ax_inv, "invalid_rate_model")):
                agg = _per_horizon(rs, field)
                notes.seeds(agg.values())
                label = model_display(model)
                drawn = _line_with_band(ax, list(agg), list(agg.values()), label, styles[model])
                curves[field][label] = (list(agg), drawn)
        env_rate = _per_horizon(mine, "invalid_rate_env")
        _line_with_band(ax_inv, list(env_rate), list(env_rate.values()), "environment", env_style)
        _note_coinciding(notes, f"{env} GDD", curves["gdd"])
        _note_coinciding(notes, f"{env} invalid-action rate", curves["invalid_rate_model"])
        sizes = sorted({r["size"] for r in mine})
        ax_gdd.set_title(f"{env} (N={', '.join(map(str, sizes))})")
        ax_gdd.set_ylabel(GDD_LABEL)
        ax_inv.set_ylabel(INVALID_LABEL)
        for ax in (ax_gdd, ax_inv):
            ax.set_xlabel(HORIZON_LABEL)
            ax.set_xticks(sorted({h for r in mine for h in r["horizons"]}))
    return _save(fig, path, notes)


def multi_step_components_figure(
    records: list[dict], path: Path, styles: dict[str, Style]
) -> Path | None:
    """Per env (columns) and component (rows): squared-MMD component vs rollout length."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(len(COMPONENTS), len(envs))
    notes = _Notes()
    for col, env in enumerate(envs):
        mine = [r for r in records if r["env"] == env]
        for row, comp in enumerate(COMPONENTS):
            ax = axes[row, col]
            curves: dict[str, tuple[Sequence[float], np.ndarray]] = {}
            for model in order_models(r["model"] for r in mine):
                rs = [r for r in mine if r["model"] == model]
                agg = _per_horizon(rs, "components", comp)
                notes.seeds(agg.values())
                label = model_display(model)
                drawn = _line_with_band(ax, list(agg), list(agg.values()), label, styles[model])
                curves[label] = (list(agg), drawn)
            _note_coinciding(notes, f"{env} {comp}", curves)
            ax.set_xticks(sorted({h for r in mine for h in r["horizons"]}))
            ax.set_ylabel(f"{comp} MMD$^2$ (unitless)")
            ax.set_xlabel(HORIZON_LABEL)
            if row == 0:
                ax.set_title(env)
    return _save(fig, path, notes)


def components_figure(records: list[dict], path: Path, styles: dict[str, Style]) -> Path | None:
    """Per env (columns): the GDD per model (top, with the self-GDD floor) and its four
    squared-MMD components (bottom, grouped bars) with 95% CI error bars (none for one seed).

    The GDD and the squared MMDs are different quantities (GDD^2 = (node + graph + edge)/3 +
    joint), so they get their own axes. Drawn at the smallest test size of each env (see
    ``report_tables.reference_size``).
    """
    models_records = [r for r in records if r["kind"] == "single_step"]
    if not models_records:
        return None
    envs = order_envs(r["env"] for r in models_records)
    fig, axes = _grid(2, len(envs))
    notes = _Notes()
    for col, env in enumerate(envs):
        ax_gdd, ax_comp = axes[0, col], axes[1, col]
        size = reference_size([r for r in models_records if r["env"] == env], env)
        mine = [r for r in models_records if r["env"] == env and r["size"] == size]
        models = order_models(r["model"] for r in mine)
        width = 0.8 / len(models)
        x = np.arange(len(COMPONENTS))
        for i, model in enumerate(models):
            rs = [r for r in mine if r["model"] == model]
            style, label = styles[model], model_display(model)
            gdd = mean_ci(r["gdd"] for r in rs)
            comps = [mean_ci(r["components"][c] for r in rs) for c in COMPONENTS]
            notes.seeds([gdd, *comps])
            _bars(ax_gdd, np.array([i], dtype=float), [gdd], 0.8, style, label)
            xs = x + (i - (len(models) - 1) / 2) * width
            _bars(ax_comp, xs, comps, width, style, label)
        floor = _self_floor(records, env).get(size) if size is not None else None
        if floor is not None and np.isfinite(floor.mean):
            ax_gdd.axhline(
                floor.mean, color=FLOOR_COLOR, linestyle=(0, (2, 2)), label=FLOOR_LABEL, zorder=3
            )
        ax_gdd.set_xticks(np.arange(len(models)), [model_display(m) for m in models])
        ax_gdd.tick_params(axis="x", labelrotation=20, labelsize="small")
        ax_gdd.set_title(f"{env} (N={size})")
        ax_gdd.set_ylabel(GDD_LABEL)
        ax_gdd.set_xlabel("model")
        ax_comp.set_xticks(x, list(COMPONENTS))
        ax_comp.set_ylabel(MMD2_LABEL)
        ax_comp.set_xlabel("GDD component")
    return _save(fig, path, notes)


def _bars(
    ax: Axes, xs: np.ndarray, series: Sequence[SeedStats], width: float, style: Style, label: str
) -> None:
    """Bars of means with 95% CI error bars where there are two or more seeds; a NaN/inf bar
    is labelled, not drawn as 0."""
    means = np.array([s.mean for s in series])
    ci = _finite([s.ci if s.n >= 2 else np.nan for s in series])
    ax.bar(
        xs,
        np.nan_to_num(_finite(means), nan=0.0),
        width,
        yerr=ci if np.isfinite(ci).any() else None,
        label=label,
        color=style.color,
        capsize=2,
    )
    for xi, v in zip(xs, means, strict=True):
        if not np.isfinite(v):
            ax.text(
                xi,
                0,
                f" {v}",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize="x-small",
                color=style.color,
            )


#: panels per row of the factor-metrics figure (an env with more factors wraps onto more rows)
FACTOR_COLUMNS = 5


def factor_metrics_figure(records: list[dict], path: Path, styles: dict[str, Style]) -> Path | None:
    """One panel per env and factor (adjacency BCE, then each feature's W1 or TV distance):
    metric vs size per model; each env starts a new row and wraps after
    :data:`FACTOR_COLUMNS` panels."""
    from graphwm.envs import env_schema
    from graphwm.metric.factor_metrics import metric_name

    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    factors = {env: factor_names(r for r in records if r["env"] == env) for env in envs}
    cols = min(FACTOR_COLUMNS, max(len(f) for f in factors.values()))
    rows_of = {env: -(-len(factors[env]) // cols) for env in envs}
    fig, axes = _grid(sum(rows_of.values()), cols)
    notes = _Notes()
    for ax in axes.flat:
        ax.set_axis_off()  # panels in use are switched back on below
    first_row = 0
    for env in envs:
        mine = [r for r in records if r["env"] == env]
        sizes = sorted({r["size"] for r in mine})
        schema = env_schema(mine[0].get("env_id", env))  # env: its label (env_labels)
        for i, factor in enumerate(factors[env]):
            ax = axes[first_row + i // cols, i % cols]
            ax.set_axis_on()
            curves: dict[str, tuple[Sequence[float], np.ndarray]] = {}
            for model in order_models(r["model"] for r in mine):
                xs, series = [], []
                for n in sizes:
                    found = [
                        factor_value(r, factor)
                        for r in mine
                        if r["model"] == model and r["size"] == n
                    ]
                    values = [v for v in found if v is not None]
                    if values:
                        xs.append(n)
                        series.append(mean_ci(values))
                if xs:
                    notes.seeds(series)
                    label = model_display(model)
                    curves[label] = (xs, _line_with_band(ax, xs, series, label, styles[model]))
            _note_coinciding(notes, f"{env} {factor}", curves)
            _log_size_axis(ax, sizes)
            ax.set_title(f"{env}: {factor}", fontsize="medium")
            name = metric_name(factor, schema)
            ax.set_ylabel(METRIC_UNITS.get(name, name))
        first_row += rows_of[env]
    return _save(fig, path, notes)


def smooth(values: np.ndarray, window: int = SMOOTHING_WINDOW) -> np.ndarray:
    """Trailing moving average over ``window`` points (shorter at the start); NaNs skipped."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    csum = np.concatenate([[0.0], np.cumsum(np.where(ok, v, 0.0))])
    ccnt = np.concatenate([[0], np.cumsum(ok)])
    idx = np.arange(1, v.size + 1)
    lo = np.maximum(idx - window, 0)
    count = ccnt[idx] - ccnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (csum[idx] - csum[lo]) / np.maximum(count, 1), np.nan)


def mean_curve(logs: Sequence[TrainingLog]) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``total`` loss over seeds at every logged step (seeds may log different steps)."""
    steps = np.unique(np.concatenate([log.step for log in logs]))
    table = np.full((len(logs), steps.size), np.nan)
    for i, log in enumerate(logs):
        table[i, np.searchsorted(steps, log.step)] = log.total
    finite = np.isfinite(table)
    count = finite.sum(axis=0)
    total = np.where(finite, table, 0.0).sum(axis=0)
    return steps, np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _smoothed_mean(runs: Sequence[TrainingLog]) -> tuple[np.ndarray, np.ndarray]:
    steps, mean = mean_curve(runs)
    return steps, _finite(smooth(mean))


TRAINING_NOTE = (
    "Each model on its own panel and y scale: the models' losses are defined differently"
    " (different terms and weights), so their values are not comparable across panels; a lower"
    " loss does not mean a lower GDD."
)


def training_curves_figure(
    logs: list[TrainingLog], path: Path, styles: dict[str, Style]
) -> Path | None:
    """Rows envs, columns models: each model's total loss vs step on its own panel and y
    scale (mean over seeds, smoothed over 10 points)."""
    if not logs:
        return None
    envs = order_envs(log.env for log in logs)
    models = order_models(log.model for log in logs)
    fig, axes = _grid(len(envs), len(models))
    notes = _Notes()
    notes.add(TRAINING_NOTE)
    for row, env in enumerate(envs):
        for col, model in enumerate(models):
            ax = axes[row, col]
            runs = [log for log in logs if log.env == env and log.model == model]
            ax.set_title(f"{env}: {model_display(model)}", fontsize="medium")
            ax.set_xlabel(STEP_LABEL)
            ax.set_ylabel("total loss (own scale)")
            if not runs:
                ax.text(0.5, 0.5, "not trained", transform=ax.transAxes, ha="center")
                continue
            steps, mean = _smoothed_mean(runs)
            style = styles[model].line()
            style.update(marker=None, linestyle="-")  # one curve per panel
            ax.plot(steps, mean, label=model_display(model), **style)
    return _save(fig, path, notes)


def ablation_training_curves_figure(
    logs: list[TrainingLog], path: Path, styles: dict[str, Style]
) -> Path | None:
    """One panel per env: the total loss of each GDM ablation and of the full GDM (black
    reference line) vs step (mean over seeds, smoothed over 10 points); they share one
    objective up to the ablated part, so one axis per env."""
    ablation_logs = [log for log in logs if is_ablation(log.model)]
    if not ablation_logs:
        return None
    envs = order_envs(log.env for log in ablation_logs)
    fig, axes = _grid(1, len(envs))
    notes = _Notes()
    for ax, env in zip(axes[0], envs, strict=True):
        mine = [log for log in logs if log.env == env]
        curves: dict[str, tuple[Sequence[float], np.ndarray]] = {}
        drawn = [
            m for m in order_models(log.model for log in mine) if is_ablation(m) or _is_full_gdm(m)
        ]
        for i, model in enumerate(drawn):
            reference = _is_full_gdm(model)
            steps, mean = _smoothed_mean([log for log in mine if log.model == model])
            label = FULL_GDM_LABEL if reference else model_display(model)
            style = (FULL_GDM_STYLE if reference else styles[model]).line()
            every = max(1, steps.size // 8)
            # markers of curve i shifted by i / len(drawn) of their spacing: on coinciding
            # curves each one's markers still show
            style.update(markevery=(i * every // len(drawn), every))
            if reference:
                style.update(linewidth=2.2, zorder=1.5)
            ax.plot(steps, mean, label=label, **style)
            curves[label] = (list(steps), mean)
        _note_coinciding(notes, env, curves)
        ax.set_title(env)
        ax.set_xlabel(STEP_LABEL)
        ax.set_ylabel("total loss (GDM objective)")
    return _save(fig, path, notes)


#: a figure to draw: its name, its function and the function's arguments (picklable, so that
#: a pool worker can draw it); the function returns the PNG's path, or None if not drawn
FigureJob = tuple[str, Callable[..., Path | None], tuple]

#: the figures from the slowest to draw (most panels and tick labels) to the fastest, so that
#: a pool worker takes the slow ones while the driver draws the fast ones (:func:`draw_figures`)
_SLOWEST_FIRST = (
    "factor_metrics",
    "multi_step_components",
    "training_curves",
    "gdd_curve",
    "multi_step",
    "gdd_components",
    "gdd_vs_size",
    "ablation_gdd_vs_size",
    "ablation_training_curves",
)


def figure_jobs(records: list[dict], logs: list[TrainingLog], out: Path) -> list[FigureJob]:
    """The figures of :func:`build_figures` as jobs (name, function, arguments), in the
    report's order; each writes ``out/<name>.png`` when its inputs are present."""
    single_models, single_ablations = split_models(by_kind(records, "single_step"))
    multi_models, _ = split_models(by_kind(records, "multi_step"))
    ablation_keys = {(r["env"], r["size"]) for r in single_ablations}
    ablation_rows = single_ablations + [
        r
        for r in single_models
        if canonical_model(r["model"]) == "gdm" and (r["env"], r["size"]) in ablation_keys
    ]
    selfs = by_kind(records, "self_gdd")
    model_logs = [log for log in logs if not is_ablation(log.model)]
    ablation_logs = [log for log in logs if is_ablation(log.model)]
    all_models = [r["model"] for r in records if "model" in r] + [log.model for log in logs]
    styles = model_styles(all_models)

    # a figure function: (its records or logs, png path, model styles) -> the path if drawn
    jobs: dict[str, tuple[Callable[[Any, Path, dict[str, Style]], Path | None], list]] = {
        "gdd_vs_size": (gdd_vs_size_figure, single_models + selfs),
        "ablation_gdd_vs_size": (
            gdd_vs_size_figure,
            ablation_rows + selfs if single_ablations else [],
        ),
        "multi_step": (multi_step_figure, multi_models),
        "multi_step_components": (multi_step_components_figure, multi_models),
        "gdd_components": (components_figure, single_models + selfs),
        "factor_metrics": (factor_metrics_figure, single_models),
        "training_curves": (training_curves_figure, model_logs),
        "ablation_training_curves": (
            ablation_training_curves_figure,
            ablation_logs + [log for log in model_logs if _is_full_gdm(log.model)],
        ),
    }
    return [
        (name, draw, (data, out / f"{name}.png", styles)) for name, (draw, data) in jobs.items()
    ]


def draw_figures(
    jobs: Sequence[FigureJob],
    pool: Executor | None = None,
    first: Callable[[], Any] | None = None,
) -> tuple[dict[str, Path], Any]:
    """Draw ``jobs``; name -> path of those drawn, in the order of ``jobs``, and what
    ``first`` returned (None without it).

    With a ``pool`` (e.g. the run's worker pool), each pool worker is given one job at a
    time, the slowest left, while this process runs ``first`` (work of its own) and then
    draws the fastest left, until none is left: the figures are drawn on the driver and the
    workers at once, each once. A figure's PNG does not depend on the process that drew it.
    A pool that breaks (a worker died) leaves its jobs to this process.
    """
    order = sorted(
        range(len(jobs)),
        key=lambda i: _SLOWEST_FIRST.index(jobs[i][0]) if jobs[i][0] in _SLOWEST_FIRST else -1,
    )
    left = deque(order)  # the slowest first
    lock = threading.Lock()
    results: dict[int, Path | None] = {}
    errors: list[BaseException] = []

    def take(slowest: bool) -> int | None:
        with lock:
            if not left:
                return None
            return left.popleft() if slowest else left.pop()

    def feed() -> None:
        """Give the pool the slowest job left, one at a time (a job queued on a process pool
        can no longer be taken back, so none waits there while the driver is free)."""
        assert pool is not None
        while (i := take(slowest=True)) is not None:
            try:
                results[i] = pool.submit(jobs[i][1], *jobs[i][2]).result()
            except BrokenExecutor:  # a dead worker: its figures are drawn by the driver
                with lock:
                    left.appendleft(i)
                return
            except BaseException as err:  # the figure's own error: raised by the driver
                errors.append(err)
                with lock:
                    left.clear()
                return

    workers = getattr(pool, "_max_workers", 1) if pool is not None and len(jobs) > 1 else 0
    feeders = [threading.Thread(target=feed, daemon=True) for _ in range(workers)]
    for thread in feeders:
        thread.start()
    try:
        first_result = first() if first is not None else None
        while (i := take(slowest=False)) is not None:
            results[i] = jobs[i][1](*jobs[i][2])
    except BaseException:
        with lock:  # the feeders take nothing more
            left.clear()
        raise
    for thread in feeders:
        thread.join()
    if errors:
        raise errors[0]
    while (i := take(slowest=False)) is not None:  # left by a broken pool
        results[i] = jobs[i][1](*jobs[i][2])
    drawn = {jobs[i][0]: path for i in range(len(jobs)) if (path := results[i]) is not None}
    return drawn, first_result


def build_figures(
    records: list[dict], logs: list[TrainingLog], out: Path, pool: Executor | None = None
) -> dict[str, Path]:
    """Draw every figure whose inputs are present into ``out``; name -> path of those drawn
    (on ``pool``'s workers beside this process when given: :func:`draw_figures`)."""
    return draw_figures(figure_jobs(records, logs, out), pool)[0]


__all__ = [
    "FIGURE_TITLES",
    "MARKERS",
    "LINESTYLES",
    "SMOOTHING_WINDOW",
    "Style",
    "ablation_training_curves_figure",
    "build_figures",
    "coinciding",
    "draw_figures",
    "figure_jobs",
    "FigureJob",
    "components_figure",
    "factor_metrics_figure",
    "gdd_vs_size_figure",
    "mean_curve",
    "model_styles",
    "shared_legend",
    "multi_step_components_figure",
    "multi_step_figure",
    "smooth",
    "training_curves_figure",
]
