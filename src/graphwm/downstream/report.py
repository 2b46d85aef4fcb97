"""The downstream table (Markdown) and figure (return against GDD per env) of the report, and
the stored records they are built from (``RUN_DIR/downstream/*.json``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graphwm.downstream.gdd import attach_gdd, correlations, gdd_maps, nan_if_none
from graphwm.downstream.record import GREEDY, RANDOM, REAL, STORE_DIR, DownstreamRecord
from graphwm.store.files import read_json
from graphwm.store.paths import listed_files
from graphwm.store.records import check_digest

TABLE_NAME = "downstream"
FIGURE_NAME = "downstream"


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
            f"{_fmt(r.gdd_single)} | {_fmt(r.gdd_multi)} |"  # three decimals, as every GDD
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


#: markers cycled per model (colours from tab10/tab20), so every point is named by the legend
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
#: a yardstick (real / greedy / random agent) further than this many times the points' range
#: from them is left off the axis (and named in the notes): drawing it would squash the points
YARDSTICK_SPAN = 2.0
_YARDSTICKS = {REAL: ("black", "-"), GREEDY: ("tab:purple", "--"), RANDOM: ("tab:gray", ":")}


def _model_styles(models: Sequence[str]) -> dict[str, tuple[Any, str]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(models) <= 10 else "tab20"]
    return {m: (cmap(i % cmap.N), MARKERS[i % len(MARKERS)]) for i, m in enumerate(models)}


def _overlapping(points: Sequence[tuple[float, float]]) -> bool:
    """Whether any two ``(mean, half-width)`` intervals overlap (then ranks are unresolved)."""
    spans = sorted((m - h, m + h) for m, h in points if math.isfinite(m))
    return any(b[0] <= a[1] for a, b in zip(spans, spans[1:], strict=False))


def downstream_figure(records: Iterable[DownstreamRecord], path: str | Path) -> Path:
    """Real-env return (+- s.e.) against single- (left) and multi-step (right) GDD, one row
    per env, one point per dream agent (a colour and marker per model, named in the legend);
    the real-env agent and the yardsticks as horizontal lines, or named in the notes when they
    lie far from the points; Spearman's rho and its caveat in each panel.

    One legend, above the panels, with the notes as its title (as every report figure).
    """
    import textwrap

    from matplotlib.figure import Figure

    records = list(records)
    envs = sorted({r.env for r in records})
    if not envs:
        raise ValueError("no downstream records to plot")
    fig = Figure(figsize=(10, 3.6 * len(envs) + 0.3), layout="constrained")  # no pyplot
    axes = fig.subplots(len(envs), 2, squeeze=False)
    corr = correlations(records)
    models = sorted({r.model for r in records if r.model is not None})
    style = _model_styles(models)  # the same in every panel
    notes: list[str] = []
    for row, env in enumerate(envs):
        rs = [r for r in records if r.env == env]
        episodes = sorted({r.episodes for r in rs})
        for col, (attr, label) in enumerate(
            (("gdd_single", "1-step"), ("gdd_multi", "multi-step"))
        ):
            ax = axes[row, col]
            pts = [r for r in rs if r.model is not None and getattr(r, attr) is not None]
            for r in pts:
                assert r.model is not None  # pts keeps the records with a model only
                color, marker = style[r.model]
                ax.errorbar(
                    getattr(r, attr),
                    r.mean_return,
                    yerr=nan_if_none(r.se_return),
                    fmt=marker,
                    fillstyle="none",
                    markersize=7,
                    capsize=3,
                    color=color,
                    label=r.model,
                )
            lo = min((r.mean_return - (r.se_return or 0.0) for r in pts), default=math.nan)
            hi = max((r.mean_return + (r.se_return or 0.0) for r in pts), default=math.nan)
            span = (hi - lo) or abs(hi) or 1.0
            for r in rs:
                if r.agent not in _YARDSTICKS:
                    continue
                far = math.isfinite(lo) and not (
                    lo - YARDSTICK_SPAN * span <= r.mean_return <= hi + YARDSTICK_SPAN * span
                )
                if far:
                    side = "above" if r.mean_return > hi else "below"
                    note = (
                        f"{env}: the {r.agent} agent's return ({_fmt(r.mean_return)}) lies far"
                        f" {side} the dream agents' and is left off the axes."
                    )
                    if note not in notes:
                        notes.append(note)
                    continue
                color, ls = _YARDSTICKS[r.agent]
                ax.axhline(r.mean_return, color=color, ls=ls, lw=1, label=f"{r.agent} agent")
            c = corr.get(env, {})
            rho = c.get("single" if col == 0 else "multi", math.nan)
            n = len(pts)
            ax.set_title(
                f"{env}: return vs {label} GDD\nSpearman {_fmt(rho, 2)} over n = {n} models",
                fontsize=10,
            )
            ax.set_xlabel(f"{label} GDD (unitless; lower is better)")
            per = "/".join(map(str, episodes))
            ax.set_ylabel(f"real-env return (mean ± s.e., {per} episodes)")
            if not pts:
                ax.text(0.5, 0.5, "no GDD results", transform=ax.transAxes, ha="center")
            elif n < 10 or _overlapping([(r.mean_return, r.se_return or 0.0) for r in pts]):
                note = (
                    f"{env}: the dream agents' return error bars overlap (or there are fewer"
                    " than 10 of them): Spearman is indicative only, their rank order is not"
                    " resolved."
                )
                if note not in notes:
                    notes.append(note)
    found: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(name, handle)
    order = [*models, *(f"{agent} agent" for agent in _YARDSTICKS)]  # models, then yardsticks
    handles = {name: found[name] for name in order if name in found}
    title = "\n".join(textwrap.fill(note, 120) for note in notes) or None
    legend = fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside upper center",
        ncols=min(5, max(1, len(handles))),
        fontsize="small",
        title=title,
        title_fontsize="small",
        alignment="left",
    )
    fig.set_figheight(fig.get_figheight() + legend.get_window_extent().height / fig.dpi)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


# --------------------------------------------------------------------------- the stored records
def downstream_files(run_dir: Path) -> list[Path]:
    """The downstream records of a run: those ``run.json`` lists under ``downstream``
    (the last preset run), else every ``downstream/*.json``."""
    run_dir = Path(run_dir)
    return listed_files(run_dir, "downstream", "downstream record", run_dir / STORE_DIR)


def load_downstream(run_dir: Path) -> list[DownstreamRecord]:
    """Read and validate the downstream records of a run (each against its digest)."""
    out = []
    for path in downstream_files(run_dir):
        raw = read_json(path)
        out.append(DownstreamRecord.from_dict(raw, path))
        check_digest(raw, path)
    return out


def _agents_line(records: Sequence[DownstreamRecord]) -> str:
    """What the trained agents were: policy and parallel envs (``unknown`` in older records)."""
    trained = [r for r in records if r.budget > 0]
    if not trained:
        return ""
    policies = sorted({r.policy or "unknown" for r in trained})
    counts = sorted({str(r.num_envs) if r.num_envs else "unknown" for r in trained})
    return (
        f"MaskablePPO agents: {', '.join(policies)} policy, {', '.join(counts)} parallel env(s) "
        "per agent; budget = env steps over all of them.\n\n"
    )


def build_downstream_report(
    run_dir: Path,
    out_dir: Path,
    results: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write ``downstream.md`` and ``downstream.png`` into ``out_dir`` from the stored
    downstream records, with each model's GDD taken from ``results`` (the report's result
    dicts: ``kind``, ``env``, ``model``, ``seed``, ``size``, ``gdd``). ``labels``: the
    preset's env labels, which ``results`` already carry as their ``env``. Returns the
    written files (``{}`` and stale files removed when the run has no downstream records)."""
    out_dir = Path(out_dir)
    table_path, figure_path = out_dir / f"{TABLE_NAME}.md", out_dir / f"{FIGURE_NAME}.png"
    records = load_downstream(run_dir)
    if labels:
        records = [dataclasses.replace(r, env=labels.get(r.env, r.env)) for r in records]
    if not records:
        for path in (table_path, figure_path):
            path.unlink(missing_ok=True)
        return {}
    single = [r for r in results if r.get("kind") == "single_step"]
    multi = [r for r in results if r.get("kind") == "multi_step"]
    with_gdd: list[DownstreamRecord] = []
    for n in sorted({r.num_nodes for r in records}):
        s, m = gdd_maps(single, multi, n)
        with_gdd += attach_gdd([r for r in records if r.num_nodes == n], s, m)
    text = (
        "### Downstream RL: real-env return of agents trained in each model's dream env\n\n"
        + _agents_line(records)
        + downstream_table(with_gdd)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    if not table_path.exists() or table_path.read_text(encoding="utf-8") != text:
        table_path.write_text(text, encoding="utf-8")
    downstream_figure(with_gdd, figure_path)
    return {"table": table_path, "figure": figure_path}
