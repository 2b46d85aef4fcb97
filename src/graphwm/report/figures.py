"""The report's matplotlib figures (PNG, Agg canvas; no pyplot global state).

Each ``*_figure`` function draws one figure from validated result records (see
:func:`graphwm.report.build.load_results`) or training logs and returns the written path, or
``None`` when its inputs are absent. Non-finite values are drawn as gaps, never crash.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, NullLocator

from graphwm.report.tables import (
    COMPONENTS,
    SeedStats,
    by_kind,
    canonical_model,
    factor_names,
    factor_value,
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
    "training_curves": "Training loss curves (total loss, mean over seeds, smoothed)",
    "ablation_training_curves": "Training loss curves of the GDM ablations",
}
SMOOTHING_WINDOW = 10  # "smoothed over 10 points" (appendix "Training Curves")
ENV_COLOR = "0.5"  # the environment is drawn in grey (appendix "Multi-Step Rollout Results")
_DPI = 120
_PANEL = (3.6, 2.8)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def _colors(models: Iterable[str]) -> dict[str, tuple]:
    """A stable colour per model (tab10/tab20 in display order)."""
    from matplotlib import colormaps

    names = order_models(models)
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {m: cmap(i % cmap.N) for i, m in enumerate(names)}


def _finite(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """Float array with inf replaced by NaN (drawn as a gap, ignored by autoscaling)."""
    a = np.asarray(x, dtype=np.float64)
    return np.where(np.isfinite(a), a, np.nan)


def _grid(rows: int, cols: int) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(_PANEL[0] * cols, _PANEL[1] * rows + 0.6), layout="constrained")
    axes = np.asarray(fig.subplots(rows, cols, squeeze=False))
    return fig, axes


def _save(fig: Figure, path: Path) -> Path:
    handles: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        _shared_legend(fig, list(handles.values()), list(handles.keys()))
    fig.savefig(path, dpi=_DPI, metadata={"Software": None})
    return path


def _shared_legend(fig: Figure, handles: list, labels: list[str]) -> None:
    """One legend below the panels, in as many columns (at most 5) as fit the figure's width.

    A legend wider than the figure is cut off at its edges (a one-panel figure is 3.6 in
    wide), so columns are dropped until it fits; its width does not depend on the layout.
    """
    for ncols in range(min(len(handles), 5), 0, -1):
        legend = fig.legend(
            handles, labels, loc="outside lower center", ncols=ncols, fontsize="small"
        )
        if ncols == 1 or legend.get_window_extent().width <= fig.bbox.width:
            return
        legend.remove()


def _log_size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Log x axis with the evaluated sizes as tick labels."""
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(sizes), [str(s) for s in sizes])
    ax.set_xlabel("graph size N")


def _line_with_band(
    ax: Axes, x: Sequence[float], series: Sequence[SeedStats], label: str, color
) -> None:
    """Mean line with markers and a shaded 95% CI band."""
    mean = _finite([s.mean for s in series])
    ci = _finite([s.ci for s in series])
    ax.plot(x, mean, marker="o", markersize=3, label=label, color=color)
    ax.fill_between(x, mean - ci, mean + ci, color=color, alpha=0.2, linewidth=0)
    _mark_non_finite(ax, x, [s.mean for s in series], color)


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


def _per_horizon(records: list[dict], field: str, sub: str | None = None) -> dict[int, SeedStats]:
    values: dict[int, list[float]] = defaultdict(list)
    for r in records:
        series = r[field] if sub is None else r[field][sub]
        for h, v in zip(r["horizons"], series, strict=True):
            values[h].append(v)
    return {h: mean_ci(v) for h, v in sorted(values.items())}


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def gdd_vs_size_figure(records: list[dict], path: Path, colors: dict[str, tuple]) -> Path | None:
    """One panel per env: single-step GDD vs size (log x), a line per model with CI band."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(1, len(envs))
    for ax, env in zip(axes[0], envs, strict=True):
        mine = [r for r in records if r["env"] == env]
        sizes = sorted({r["size"] for r in mine})
        # For ablation figures the full model comes first, then the ablations.
        models = sorted({r["model"] for r in mine}, key=lambda m: (":" in m, m))
        if not any(":" in m for m in models):
            models = order_models(models)
        for model in models:
            rs = [r for r in mine if r["model"] == model]
            xs = sorted({r["size"] for r in rs})
            series = [mean_ci(r["gdd"] for r in rs if r["size"] == n) for n in xs]
            _line_with_band(ax, xs, series, model_display(model), colors[model])
        _log_size_axis(ax, sizes)
        ax.set_title(env)
        ax.set_ylabel("GDD")
    return _save(fig, path)


def multi_step_figure(records: list[dict], path: Path, colors: dict[str, tuple]) -> Path | None:
    """Per env: GDD vs rollout length (top) and invalid-action rate (bottom, env in grey)."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(2, len(envs))
    for col, env in enumerate(envs):
        mine = [r for r in records if r["env"] == env]
        ax_gdd, ax_inv = axes[0, col], axes[1, col]
        for model in order_models(r["model"] for r in mine):
            rs = [r for r in mine if r["model"] == model]
            for ax, field in ((ax_gdd, "gdd"), (ax_inv, "invalid_rate_model")):
                agg = _per_horizon(rs, field)
                _line_with_band(
                    ax, list(agg), list(agg.values()), model_display(model), colors[model]
                )
        env_rate = _per_horizon(mine, "invalid_rate_env")
        _line_with_band(ax_inv, list(env_rate), list(env_rate.values()), "environment", ENV_COLOR)
        sizes = sorted({r["size"] for r in mine})
        ax_gdd.set_title(f"{env} (N={', '.join(map(str, sizes))})")
        ax_gdd.set_ylabel("GDD")
        ax_inv.set_ylabel("invalid-action rate")
        for ax in (ax_gdd, ax_inv):
            ax.set_xlabel("rollout length T")
            ax.set_xticks(sorted({h for r in mine for h in r["horizons"]}))
    return _save(fig, path)


def multi_step_components_figure(
    records: list[dict], path: Path, colors: dict[str, tuple]
) -> Path | None:
    """Per env (columns) and component (rows): squared-MMD component vs rollout length."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(len(COMPONENTS), len(envs))
    for col, env in enumerate(envs):
        mine = [r for r in records if r["env"] == env]
        for row, comp in enumerate(COMPONENTS):
            ax = axes[row, col]
            for model in order_models(r["model"] for r in mine):
                rs = [r for r in mine if r["model"] == model]
                agg = _per_horizon(rs, "components", comp)
                _line_with_band(
                    ax, list(agg), list(agg.values()), model_display(model), colors[model]
                )
            ax.set_xticks(sorted({h for r in mine for h in r["horizons"]}))
            ax.set_ylabel(f"{comp} MMD$^2$")
            if row == 0:
                ax.set_title(env)
            if row == len(COMPONENTS) - 1:
                ax.set_xlabel("rollout length T")
    return _save(fig, path)


def components_figure(records: list[dict], path: Path, colors: dict[str, tuple]) -> Path | None:
    """Per env: grouped bars (GDD, node, graph, edge, joint) per model with 95% CI error bars.

    Drawn at the smallest test size of each env (see ``report_tables.reference_size``).
    """
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(1, len(envs))
    groups = ("GDD",) + COMPONENTS
    for ax, env in zip(axes[0], envs, strict=True):
        size = reference_size([r for r in records if r["env"] == env], env)
        mine = [r for r in records if r["env"] == env and r["size"] == size]
        models = order_models(r["model"] for r in mine)
        width = 0.8 / len(models)
        x = np.arange(len(groups))
        for i, model in enumerate(models):
            rs = [r for r in mine if r["model"] == model]
            series = [mean_ci(r["gdd"] for r in rs)]
            series += [mean_ci(r["components"][c] for r in rs) for c in COMPONENTS]
            xs = x + (i - (len(models) - 1) / 2) * width
            means = np.array([s.mean for s in series])
            ax.bar(
                xs,
                np.nan_to_num(_finite(means), nan=0.0),
                width,
                yerr=np.nan_to_num(_finite([s.ci for s in series]), nan=0.0),
                label=model_display(model),
                color=colors[model],
                capsize=2,
            )
            for xi, v in zip(xs, means, strict=True):
                if not np.isfinite(v):  # a NaN/inf bar is labelled, not drawn as 0
                    ax.text(
                        xi,
                        0,
                        f" {v}",
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize="x-small",
                        color=colors[model],
                    )
        ax.set_xticks(x, groups)
        ax.set_title(f"{env} (N={size})")
    return _save(fig, path)


#: panels per row of the factor-metrics figure (an env with more factors wraps onto more rows)
FACTOR_COLUMNS = 5


def factor_metrics_figure(records: list[dict], path: Path, colors: dict[str, tuple]) -> Path | None:
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
    for ax in axes.flat:
        ax.set_axis_off()  # panels in use are switched back on below
    first_row = 0
    for env in envs:
        mine = [r for r in records if r["env"] == env]
        sizes = sorted({r["size"] for r in mine})
        schema = env_schema(env)
        for i, factor in enumerate(factors[env]):
            ax = axes[first_row + i // cols, i % cols]
            ax.set_axis_on()
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
                    _line_with_band(ax, xs, series, model_display(model), colors[model])
            _log_size_axis(ax, sizes)
            ax.set_title(f"{env}: {factor}", fontsize="medium")
            ax.set_ylabel(metric_name(factor, schema))
        first_row += rows_of[env]
    return _save(fig, path)


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


def training_curves_figure(
    logs: list[TrainingLog], path: Path, colors: dict[str, tuple]
) -> Path | None:
    """One panel per env: total loss vs step per model (mean over seeds, smoothed 10 points)."""
    if not logs:
        return None
    envs = order_envs(log.env for log in logs)
    fig, axes = _grid(1, len(envs))
    for ax, env in zip(axes[0], envs, strict=True):
        mine = [log for log in logs if log.env == env]
        for model in order_models(log.model for log in mine):
            runs = [log for log in mine if log.model == model]
            steps, mean = mean_curve(runs)
            ax.plot(
                steps, _finite(smooth(mean)), color=colors[model], label=f"{model_display(model)}"
            )
        ax.set_title(env)
        ax.set_xlabel("step")
        ax.set_ylabel("total loss")
    return _save(fig, path)


def build_figures(records: list[dict], logs: list[TrainingLog], out: Path) -> dict[str, Path]:
    """Draw every figure whose inputs are present into ``out``; name -> path of those drawn."""
    single_models, single_ablations = split_models(by_kind(records, "single_step"))
    multi_models, _ = split_models(by_kind(records, "multi_step"))
    ablation_keys = {(r["env"], r["size"]) for r in single_ablations}
    ablation_rows = single_ablations + [
        r
        for r in single_models
        if canonical_model(r["model"]) == "gdm" and (r["env"], r["size"]) in ablation_keys
    ]
    model_logs = [log for log in logs if ":" not in log.model]
    ablation_logs = [log for log in logs if ":" in log.model]
    all_models = [r["model"] for r in records if "model" in r] + [log.model for log in logs]
    colors = _colors(all_models)

    # a figure function: (its records or logs, png path, model colours) -> the path if drawn
    jobs: dict[str, tuple[Callable[[Any, Path, dict[str, tuple]], Path | None], list]] = {
        "gdd_vs_size": (gdd_vs_size_figure, single_models),
        "ablation_gdd_vs_size": (gdd_vs_size_figure, ablation_rows if single_ablations else []),
        "multi_step": (multi_step_figure, multi_models),
        "multi_step_components": (multi_step_components_figure, multi_models),
        "gdd_components": (components_figure, single_models),
        "factor_metrics": (factor_metrics_figure, single_models),
        "training_curves": (training_curves_figure, model_logs),
        "ablation_training_curves": (training_curves_figure, ablation_logs),
    }
    written = {}
    for name, (draw, data) in jobs.items():
        path = draw(data, out / f"{name}.png", colors)
        if path is not None:
            written[name] = path
    return written


__all__ = [
    "FIGURE_TITLES",
    "SMOOTHING_WINDOW",
    "build_figures",
    "components_figure",
    "factor_metrics_figure",
    "gdd_vs_size_figure",
    "mean_curve",
    "multi_step_components_figure",
    "multi_step_figure",
    "smooth",
    "training_curves_figure",
]
