"""The downstream table (Markdown) and figure (return against GDD per env) of the report."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from graphwm.downstream.config import GREEDY, RANDOM, REAL
from graphwm.downstream.gdd import correlations, nan_if_none
from graphwm.downstream.record import DownstreamRecord


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _order(r: DownstreamRecord) -> tuple:
    rank = {REAL: 0, GREEDY: 1, RANDOM: 2}.get(r.agent, 3)
    return (r.env, r.num_nodes, rank, r.agent, r.seed)


def downstream_table(records: Iterable[DownstreamRecord]) -> str:
    """Markdown table: real-env return +- s.e. of every agent, with its model's GDDs, and the
    Spearman correlation of return with each GDD over the dream agents of each env."""
    records = sorted(records, key=_order)
    lines = [
        "| env | N | agent | budget | real-env return | GDD (1-step) | GDD (multi) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        ret = f"{r.mean_return:.3f} ± {_fmt(r.se_return)}"
        lines.append(
            f"| {r.env} | {r.num_nodes} | {r.agent} | {r.budget} | {ret} | "
            f"{_fmt(r.gdd_single, 4)} | {_fmt(r.gdd_multi, 4)} |"
        )
    corr = correlations(records)
    if corr:
        lines += [
            "",
            "| env | Spearman(return, GDD 1-step) | Spearman(return, GDD multi) | models |",
            "|---|---|---|---|",
        ]
        for env, c in corr.items():
            lines.append(f"| {env} | {_fmt(c['single'])} | {_fmt(c['multi'])} | {c['n']} |")
    return "\n".join(lines) + "\n"


def label_rows(
    xs: Sequence[float], ys: Sequence[float], near: tuple[float, float] = (0.15, 0.08)
) -> list[int]:
    """Row of each point's label so that labels of nearby points do not overlap: a point
    within ``near`` (fractions of the x and y ranges) of earlier points' labels in the same
    row moves one row down. Points are taken in the given order."""
    if not xs:
        return []
    sx = (max(xs) - min(xs)) or 1.0
    sy = (max(ys) - min(ys)) or 1.0
    placed: list[tuple[float, float, int]] = []
    rows = []
    for x, y in zip(xs, ys, strict=True):
        row = 0
        while any(
            r == row and abs(x - px) / sx < near[0] and abs(y - py) / sy < near[1]
            for px, py, r in placed
        ):
            row += 1
        placed.append((x, y, row))
        rows.append(row)
    return rows


def downstream_figure(records: Iterable[DownstreamRecord], path: str | Path) -> Path:
    """Scatter of real-env return (+- s.e.) against single- and multi-step GDD, one row per
    env, one point per dream agent (labelled by model), the real-env agent and the
    yardsticks as horizontal lines; the Spearman correlation in each panel's title."""
    import matplotlib
    from matplotlib.figure import Figure

    records = list(records)
    envs = sorted({r.env for r in records})
    if not envs:
        raise ValueError("no downstream records to plot")
    fig = Figure(figsize=(10, 3.6 * len(envs)))  # no pyplot: no global figure state
    axes = fig.subplots(len(envs), 2, squeeze=False)
    styles = {REAL: ("black", "-"), GREEDY: ("tab:purple", "--"), RANDOM: ("tab:gray", ":")}
    corr = correlations(records)
    models = sorted({r.model for r in records if r.model is not None})
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {m: cycle[i % len(cycle)] for i, m in enumerate(models)}  # same in every panel
    for row, env in enumerate(envs):
        rs = [r for r in records if r.env == env]
        for col, (attr, label) in enumerate(
            (("gdd_single", "1-step"), ("gdd_multi", "multi-step"))
        ):
            ax = axes[row, col]
            pts = [r for r in rs if r.model is not None and getattr(r, attr) is not None]
            rows = label_rows([getattr(r, attr) for r in pts], [r.mean_return for r in pts])
            for r, label_row in zip(pts, rows, strict=True):
                x = getattr(r, attr)
                assert r.model is not None  # pts keeps the records with a model only
                ax.errorbar(
                    x,
                    r.mean_return,
                    yerr=nan_if_none(r.se_return),
                    fmt="o",
                    capsize=3,
                    color=colour[r.model],
                )
                ax.annotate(
                    r.model,
                    (x, r.mean_return),
                    textcoords="offset points",
                    xytext=(4, 4 - 9 * label_row),  # close points: labels stacked downwards
                    fontsize=8,
                )
            for r in rs:
                if r.agent in styles:
                    color, ls = styles[r.agent]
                    ax.axhline(r.mean_return, color=color, ls=ls, lw=1, label=r.agent)
            rho = corr.get(env, {}).get("single" if col == 0 else "multi", math.nan)
            ax.set_title(f"{env}: return vs {label} GDD (Spearman {_fmt(rho, 2)})", fontsize=10)
            ax.set_xlabel(f"{label} GDD (lower is better)")
            ax.set_ylabel("real-env return")
            if not pts:
                ax.text(0.5, 0.5, "no GDD results", transform=ax.transAxes, ha="center")
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
