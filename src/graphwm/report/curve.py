"""The GDD curve in the report: GDD and its components against training steps.

Reads the ``curve`` records (:mod:`graphwm.stages.curve`; ``run.json``'s ``curve`` list, else
every ``results/curve-*.json``) and writes, per env and model, mean and 95% band over seeds
(:mod:`graphwm.report.seed_stats`):

- the figure ``gdd_curve.png``: one column per env, rows GDD, node, graph, edge and joint
  squared MMD against the training step, with the env's self-GDD (and its components) at the
  curve's size as the floor; the GDD row carries the evaluation-noise band (error bars of
  +-1 SD, :mod:`graphwm.report.eval_noise`) beside the shaded interval over seeds;
- the table ``gdd_curve``: each model's GDD at each evaluated step (with its evaluation-noise
  SD), with one sentence per model under it (:func:`verdicts`) saying whether its last two
  evaluations differ by more than their intervals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphwm.report.eval_noise import mean_noise_sd, record_noise
from graphwm.report.figures import (
    FLOOR_COLOR,
    FLOOR_LABEL,
    FLOOR_NOTE,
    GDD_LABEL,
    STEP_LABEL,
    Style,
    _grid,
    _line_with_band,
    _note_coinciding,
    _Notes,
    _save,
)
from graphwm.report.formatting import format_mean_ci
from graphwm.report.seed_stats import SeedStats, mean_ci
from graphwm.report.table import Cell, Row, Table
from graphwm.report.tables import COMPONENTS, model_display, order_envs, order_models
from graphwm.store.paths import listed_files
from graphwm.store.records import read_records_once

__all__ = [
    "CURVE_NAME",
    "CURVE_TITLE",
    "curve_figure",
    "curve_series",
    "curve_table",
    "last_checkpoints",
    "last_checkpoints_table",
    "load_curve",
    "noise_series",
    "verdicts",
]

CURVE_NAME = "gdd_curve"
CURVE_TITLE = "GDD and its components against training steps (kept checkpoints, test subset)"
#: the rows of the figure: the GDD, then its squared-MMD components
PANELS = ("gdd", *COMPONENTS)
CURVE_NOTE = (
    "Each point: the single-step GDD of the checkpoint kept at that step, on the curve's "
    "fixed subset of test episodes (evaluate.curve_episodes) at the smallest test size; the "
    "last point is the final checkpoint. The figure's self-GDD floor is the final evaluation's "
    "(all its test episodes at that size), not re-measured on the curve's subset."
)
#: the legend entry of the evaluation-noise error bars, and the figure's note on both bands
EVAL_NOISE_LABEL = "eval. noise ±1 SD"
BANDS_NOTE = (
    "Error bars (GDD row): ±1 SD of evaluation noise, not of seeds: the SD measured by "
    "re-evaluating each checkpoint (graphwm noise) where the run has it, else a bootstrap over "
    "each evaluation's reference transitions, an upper bound (combined over seeds). Shaded: "
    "95% interval over training seeds."
)


def load_curve(run_dir: Path | str) -> list[dict]:
    """The curve records of a run as dicts (``run.json``'s ``curve`` list, else every
    ``results/curve-*.json``), each read through its record type and checked for its digest.

    Raises:
        ResultsFormatError: a malformed file, or two records of one (env, model, seed, step).
        CorruptFileError: a record edited after it was written.
    """
    run_dir = Path(run_dir)
    files = listed_files(run_dir, "curve", "curve result file", run_dir / "results")
    # the fallback lists every result; the curve's are named curve-<digest>
    return read_records_once(
        [path for path in files if path.name.startswith("curve-")],
        ("curve",),
        lambda record: record.to_dict(),
        lambda r: (r["env"], r["model"], r["seed"], r["step"]),
        "env, model, seed and step",
    )


def _value(record: dict, panel: str) -> float:
    return float(record["gdd"] if panel == "gdd" else record["components"][panel])


def curve_series(records: Sequence[dict], env: str, model: str, panel: str = "gdd"):
    """``(steps, [SeedStats per step])`` of one env and model: mean and 95% interval over
    seeds of the GDD (``panel="gdd"``) or one squared-MMD component at each evaluated step."""
    values: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r["env"] == env and r["model"] == model:
            values[int(r["step"])].append(_value(r, panel))
    steps = sorted(values)
    return steps, [mean_ci(values[s]) for s in steps]


def noise_series(records: Sequence[dict], env: str, model: str) -> tuple[list[int], list]:
    """``(steps, [noise SD per step])`` of one env and model: the evaluation-noise SD of the
    mean GDD over seeds at each evaluated step (None where a record lacks
    ``gdd_transitions``)."""
    values: dict[int, list[float | None]] = defaultdict(list)
    for r in records:
        if r["env"] == env and r["model"] == model:
            values[int(r["step"])].append(record_noise(r))
    steps = sorted(values)
    return steps, [mean_noise_sd(values[s]) for s in steps]


def _noise_bars(ax, steps: Sequence[int], means: np.ndarray, noise: Sequence, color) -> bool:
    """Error bars of +-1 evaluation-noise SD at the steps that have one; whether any."""
    have = [i for i, s in enumerate(noise) if s is not None and np.isfinite(s)]
    if not have:
        return False
    ax.errorbar([steps[i] for i in have], [means[i] for i in have],
                yerr=[noise[i] for i in have], fmt="none", ecolor=color, elinewidth=1.2,
                capsize=3, zorder=3)  # fmt: skip
    return True


def _floor(selfs: Sequence[dict], env: str, size: int, panel: str) -> SeedStats | None:
    """The env's self-GDD (or its component) at ``size``, over seeds; None if absent."""
    values = [
        _value(r, panel)
        for r in selfs
        if r["env"] == env
        and r["size"] == size
        and (panel == "gdd" or r.get("components") is not None)
    ]
    return mean_ci(values) if values else None


def curve_figure(
    records: list[dict], selfs: list[dict], path: Path, styles: dict[str, Style]
) -> Path | None:
    """One column per env, rows GDD and its four squared-MMD components against the training
    step: a line per model (open markers, its own line style) with its 95% band over seeds,
    and the self-GDD floor (``selfs``: ``self_gdd`` records) as a grey dashed line."""
    if not records:
        return None
    envs = order_envs(r["env"] for r in records)
    fig, axes = _grid(len(PANELS), len(envs))
    notes = _Notes()
    floor_drawn = noise_drawn = False
    for col, env in enumerate(envs):
        mine = [r for r in records if r["env"] == env]
        size = min(r["size"] for r in mine)
        steps_all = sorted({int(r["step"]) for r in mine})
        for row, panel in enumerate(PANELS):
            ax = axes[row, col]
            curves: dict[str, tuple[Sequence[float], np.ndarray]] = {}
            for model in order_models(r["model"] for r in mine):
                steps, series = curve_series(mine, env, model, panel)
                notes.seeds(series)
                label = model_display(model)
                means = _line_with_band(ax, steps, series, label, styles[model])
                curves[label] = (steps, means)
                if panel == "gdd":
                    _, noise = noise_series(mine, env, model)
                    color = styles[model].color
                    noise_drawn |= _noise_bars(ax, steps, means, noise, color)
            floor = _floor(selfs, env, size, panel)
            if floor is not None and np.isfinite(floor.mean):
                ax.axhline(floor.mean, color=FLOOR_COLOR, linestyle=(0, (2, 2)), linewidth=1.2,
                           label=FLOOR_LABEL, zorder=1)  # fmt: skip
                floor_drawn = True
            _note_coinciding(notes, f"{env} {panel}", curves)
            ax.set_xticks(steps_all)
            ax.tick_params(axis="x", labelsize="small")
            if row == len(PANELS) - 1:  # one step axis label per column, at the bottom
                ax.set_xlabel(STEP_LABEL + " (optimiser steps)")
            ax.set_ylabel(GDD_LABEL if panel == "gdd" else f"{panel} MMD$^2$ (unitless)")
            if row == 0:
                ax.set_title(f"{env} (N={size})")
    if floor_drawn:
        notes.add(FLOOR_NOTE)
    if noise_drawn:  # one grey legend entry for the error bars of every model
        axes[0, 0].errorbar([np.nan], [np.nan], yerr=[np.nan], fmt="none", ecolor="0.35",
                            capsize=3, label=EVAL_NOISE_LABEL)  # fmt: skip
        notes.add(BANDS_NOTE)
    return _save(fig, path, notes)


def _differ(a: SeedStats, b: SeedStats) -> bool:
    """The two means differ by more than the sum of their 95% half-widths."""
    return abs(b.mean - a.mean) > a.ci + b.ci


def _noise_clause(records: Sequence[dict], env: str, model: str, steps: Sequence[int]) -> str:
    """``"; the change is 1.4 x its evaluation-noise SD"``: the last change against the
    evaluation noise of the two points (sqrt(SD0^2 + SD1^2)); "" where unknown."""
    noise = dict(zip(*noise_series(records, env, model), strict=True))
    s0, s1 = (noise.get(s) for s in steps[-2:])
    if s0 is None or s1 is None or not (s0 > 0 or s1 > 0):
        return ""
    _, series = curve_series(records, env, model)
    change = series[-1].mean - series[-2].mean
    return f"; the change is {abs(change) / float(np.hypot(s0, s1)):.1f} x its evaluation-noise SD"


def verdicts(records: Sequence[dict]) -> list[str]:
    """One sentence per env and model: do its last two evaluations differ by more than their
    95% intervals (still improving, or getting worse) or not (no change the seeds resolve)?
    Where the records carry it, the change is also set against its evaluation noise."""
    out = []
    for env in order_envs(r["env"] for r in records):
        mine = [r for r in records if r["env"] == env]
        for model in order_models(r["model"] for r in mine):
            steps, series = curve_series(mine, env, model)
            name = f"{env}, {model_display(model)}"
            if len(steps) < 2:
                out.append(f"{name}: one evaluated step ({steps[0]}), no trend to judge.")
                continue
            (s0, a), (s1, b) = zip(steps[-2:], series[-2:], strict=True)
            change = f"GDD {format_mean_ci(a)} at step {s0} -> {format_mean_ci(b)} at step {s1}"
            change += _noise_clause(mine, env, model, steps)
            if min(a.n, b.n) < 2:
                out.append(f"{name}: {change}; one seed, no interval: cannot tell.")
            elif not _differ(a, b):
                out.append(
                    f"{name}: {change}; within their intervals: no change the seeds resolve."
                )
            elif b.mean < a.mean:
                out.append(
                    f"{name}: {change}; differs by more than the intervals: still improving."
                )
            else:
                out.append(f"{name}: {change}; differs by more than the intervals: getting worse.")
    return out


def curve_table(records: list[dict]) -> Table | None:
    """Each env and model's GDD (mean ± 95% interval over seeds) at each evaluated step; the
    sentences of :func:`verdicts` are its notes."""
    if not records:
        return None
    steps_all = sorted({int(r["step"]) for r in records})
    table = Table(
        CURVE_NAME,
        "GDD at each evaluated training step (GDD curve: kept checkpoints, fixed test subset, "
        "smallest test size)",
        ["Env", "N", "Model"],
        [f"step {s}" for s in steps_all],
        bold_best=False,
        notes=[CURVE_NOTE, *verdicts(records)],
    )
    for env in order_envs(r["env"] for r in records):
        mine = [r for r in records if r["env"] == env]
        size = min(r["size"] for r in mine)
        for i, model in enumerate(order_models(r["model"] for r in mine)):
            steps, series = curve_series(mine, env, model)
            by_step = dict(zip(steps, series, strict=True))
            noise = dict(zip(*noise_series(mine, env, model), strict=True))
            cells: list[Cell | None] = [
                Cell(by_step[s], noise=noise[s]) if s in by_step else None for s in steps_all
            ]
            labels = [env, str(size)] if i == 0 else ["", ""]
            table.rows.append(Row([*labels, model_display(model)], cells, group_start=i == 0))
    return table


#: the table of :func:`last_checkpoints_table` (written only when asked for)
LAST_NAME = "gdd_last_checkpoints"


def last_checkpoints(records: Sequence[dict], n: int) -> list[dict]:
    """Per env, model and seed: the mean GDD of its last ``n`` evaluated curve points (the
    final checkpoint and the ``n - 1`` kept before it), with their steps and the evaluation
    noise of that mean (``sqrt(sum SD^2) / n``; None where a record lacks the band).

    Raises:
        ValueError: ``n`` < 1.
    """
    if n < 1:
        raise ValueError(f"the number of last checkpoints to average must be >= 1, got {n}")
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["env"], r["model"], r["seed"], r["size"])].append(r)
    out = []
    for (env, model, seed, size), mine in groups.items():
        last = sorted(mine, key=lambda r: int(r["step"]))[-n:]
        out.append(
            {
                "env": env,
                "model": model,
                "seed": seed,
                "size": size,
                "steps": [int(r["step"]) for r in last],
                "gdd": float(np.mean([r["gdd"] for r in last])),
                "final": float(last[-1]["gdd"]),
                "noise": mean_noise_sd(record_noise(r) for r in last),
            }
        )
    return out


def last_checkpoints_table(records: list[dict], n: int) -> Table | None:
    """Each env and model's curve GDD at the final checkpoint beside its mean over the last
    ``n`` evaluated checkpoints (mean ± 95% interval over seeds, eval SD after it): the
    off-by-default averaging of docs/reproducing.md, "Evaluation noise"."""
    if not records:
        return None
    rows = last_checkpoints(records, n)
    steps = sorted({s for r in rows for s in r["steps"]})
    table = Table(
        LAST_NAME,
        f"GDD of the final checkpoint and averaged over the last {n} evaluated checkpoints "
        "(GDD curve: fixed test subset, smallest test size)",
        ["Env", "N", "Model"],
        ["final", f"mean of last {n}"],
        bold_best=False,
        notes=[
            f"Mean of last {n}: the mean of each seed's curve GDD at its last {n} evaluated "
            f"steps (here {', '.join(map(str, steps[-n:]))}), then mean over seeds; an option "
            "beyond the paper, which reports the final model (graphwm report --average-last)."
        ],
    )
    for env in order_envs(r["env"] for r in rows):
        mine = [r for r in rows if r["env"] == env]
        size = min(r["size"] for r in mine)
        for i, model in enumerate(order_models(r["model"] for r in mine)):
            group = [r for r in mine if r["model"] == model and r["size"] == size]
            final = [r for r in records if r["env"] == env and r["model"] == model]
            last_step = max(int(r["step"]) for r in final)
            finals = [r for r in final if int(r["step"]) == last_step and r["size"] == size]
            cells: list[Cell | None] = [
                Cell(mean_ci(r["gdd"] for r in finals),
                     noise=mean_noise_sd(record_noise(r) for r in finals)),
                Cell(mean_ci(r["gdd"] for r in group),
                     noise=mean_noise_sd(r["noise"] for r in group)),
            ]  # fmt: skip
            labels = [env, str(size)] if i == 0 else ["", ""]
            table.rows.append(Row([*labels, model_display(model)], cells, group_start=i == 0))
    return table
