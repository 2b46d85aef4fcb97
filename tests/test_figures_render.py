"""Every report figure renders readably (issue 29): each curve has its own colour, marker and
line style; coinciding curves are named in a note; the full GDM and the self-GDD floor are
reference lines; every axis is labelled with its unit; one legend, above the panels; no two
labels overlap; no error bars for one seed; each model's loss on its own panel."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import single_step_record
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from graphwm.downstream.record import GREEDY, RANDOM, REAL, DownstreamRecord
from graphwm.report import figures
from graphwm.report.training_logs import TrainingLog

ENVS = ("SAR", "OD")
MODELS = ("gdm", "g-rssm", "ea-gwm", "vanilla-gwm")
# gdm:same-as-gdm has exactly the GDM's values: it would hide under it without its own style
ABLATIONS = ("gdm:same-as-gdm", "gdm:no-h-plus")
SIZES = (10, 20, 40)
COMPONENTS = ("node", "graph", "edge", "joint")


def _gdd(model: str, size: int, seed: int) -> float:
    base = {"gdm": 0.9, "g-rssm": 1.1, "ea-gwm": 1.05, "vanilla-gwm": 1.08}
    base |= {"gdm:same-as-gdm": 0.9, "gdm:no-h-plus": 0.97}
    return base[model] + 0.001 * size + 0.01 * seed


def _single(env: str, model: str, size: int, seed: int) -> dict:
    features = {"stability": 0.1 + 0.01 * seed, "reward": 0.2, "exit_node": 0.3}
    if env == "OD":
        features = {"opinion": 0.3, "reward": 0.2 + 0.01 * seed}
    return single_step_record(
        env,
        model,
        size,
        seed,
        _gdd(model, size, seed),
        components={c: 0.1 * (i + 1) + 0.01 * seed for i, c in enumerate(COMPONENTS)},
        factor_metrics={"adjacency_bce": 0.4 + 0.01 * seed, "features": features},
    )


def _records(seeds: int) -> list[dict]:
    out = []
    for env in ENVS:
        for seed in range(seeds):
            for size in SIZES:
                out += [_single(env, m, size, seed) for m in MODELS]
                if env == "SAR":
                    out += [_single(env, m, size, seed) for m in ABLATIONS]
                gdd = 0.1 + 0.01 * seed
                out.append({"kind": "self_gdd", "env": env, "size": size, "seed": seed, "gdd": gdd})
            for model in MODELS:
                h = [1, 2, 3]
                out.append(
                    {
                        "kind": "multi_step",
                        "env": env,
                        "model": model,
                        "seed": seed,
                        "size": 20,
                        "horizons": h,
                        "gdd": [_gdd(model, 20, seed) + 0.01 * t for t in h],
                        "components": {c: [0.1 * t for t in h] for c in COMPONENTS},
                        "invalid_rate_model": [0.05 * t for t in h],
                        "invalid_rate_env": [0.0 for _ in h],
                    }
                )
    return out


def _logs(seeds: int) -> list[TrainingLog]:
    steps = np.arange(1, 41)
    scale = {"gdm": 5.0, "g-rssm": 10.0, "ea-gwm": 4.0, "vanilla-gwm": 2.0}
    scale |= {"gdm:same-as-gdm": 5.0, "gdm:no-h-plus": 6.0}
    return [
        TrainingLog(env, m, s, steps, scale[m] * np.exp(-steps / 20) + 1, Path("log.csv"))
        for env in ENVS
        for m in (*MODELS, *ABLATIONS)
        if env == "SAR" or ":" not in m
        for s in range(seeds)
    ]


def _render(records: list[dict], logs: list[TrainingLog], out: Path, monkeypatch) -> dict:
    """Every figure of build_figures, name -> the saved matplotlib Figure (drawn)."""
    saved: dict[str, Figure] = {}
    save = figures._save

    def keep(fig, path, notes=None):
        saved[Path(path).stem] = fig
        return save(fig, path, notes)

    monkeypatch.setattr(figures, "_save", keep)
    written = figures.build_figures(records, logs, out)
    assert set(written) == set(figures.FIGURE_TITLES) == set(saved)
    for fig in saved.values():
        fig.draw_without_rendering()  # the layout as saved
    return saved


@pytest.fixture(scope="module", params=[1, 3], ids=["one-seed", "three-seeds"])
def rendered(request, tmp_path_factory) -> tuple[int, dict[str, Figure]]:
    seeds = request.param
    with pytest.MonkeyPatch.context() as mp:
        out = tmp_path_factory.mktemp(f"figures{seeds}")
        return seeds, _render(_records(seeds), _logs(seeds), out, mp)


def _panels(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.axison]


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _legend_labels(fig: Figure) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def _legend_title(fig: Figure) -> str:
    (legend,) = fig.legends
    return legend.get_title().get_text().replace("\n", " ")


@pytest.mark.parametrize("name", list(figures.FIGURE_TITLES))
def test_every_axis_is_labelled_with_a_unit_and_the_top_panels_titled(rendered, name):
    _, saved = rendered
    panels = _panels(saved[name])
    top = max(ax.get_position().y1 for ax in panels)
    for ax in panels:
        if ax.get_position().y1 == top:  # a panel below a titled one may go without
            assert ax.get_title(), name
        for label in (ax.get_xlabel(), ax.get_ylabel()):
            assert label.strip(), (name, ax.get_title())
        assert "(" in ax.get_ylabel(), (name, ax.get_ylabel())  # its unit or scale


@pytest.mark.parametrize("name", list(figures.FIGURE_TITLES))
def test_one_legend_above_the_panels_and_no_label_overlaps_another(rendered, name):
    _, saved = rendered
    fig = saved[name]
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    box, frame = fig.legends[0].get_window_extent(), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 <= box.y1 <= frame.y1
    boxes = [("legend", box)]
    for ax in _panels(fig):
        assert box.y0 >= ax.get_window_extent().y1 - 1  # above every panel
        for text in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts):
            if text.get_text():
                boxes.append((f"{ax.get_title()}: {text.get_text()}", text.get_window_extent()))
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1 :]:
            assert not _overlap(ba, bb), (name, a, b)


@pytest.mark.parametrize("name", list(figures.FIGURE_TITLES))
def test_curves_of_one_panel_have_distinct_styles(rendered, name):
    _, saved = rendered
    for ax in _panels(saved[name]):
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        styles = [(str(ln.get_color()), ln.get_marker(), str(ln.get_linestyle())) for ln in lines]
        assert len(set(styles)) == len(styles), (name, ax.get_title(), styles)
        # and every marker shape differs from the others (coinciding curves stay visible)
        markers = [ln.get_marker() for ln in lines if ln.get_marker() not in (None, "None", "")]
        assert len(set(markers)) == len(markers), (name, ax.get_title(), markers)


def test_ablation_figures_name_the_full_gdm_the_floor_and_the_coinciding_curves(rendered):
    _, saved = rendered
    for name in ("ablation_gdd_vs_size", "ablation_training_curves"):
        labels = _legend_labels(saved[name])
        assert labels[0] == figures.FULL_GDM_LABEL, (name, labels)
        assert set(ABLATIONS) <= set(labels)
        # the full GDM and gdm:same-as-gdm coincide: the note says so
        assert f"SAR: {figures.FULL_GDM_LABEL} and gdm:same-as-gdm coincide" in _legend_title(
            saved[name]
        )
    assert figures.FLOOR_LABEL in _legend_labels(saved["ablation_gdd_vs_size"])


def test_gdd_vs_size_draws_the_self_gdd_floor(rendered):
    _, saved = rendered
    fig = saved["gdd_vs_size"]
    assert figures.FLOOR_LABEL in _legend_labels(fig)
    for ax in _panels(fig):
        (floor,) = [ln for ln in ax.get_lines() if ln.get_label() == figures.FLOOR_LABEL]
        assert list(floor.get_xdata()) == list(SIZES)
        assert ax.get_ylim()[0] <= min(floor.get_ydata())  # on the axis, not cut off


def test_components_put_the_gdd_and_the_squared_mmds_on_separate_axes(rendered):
    seeds, saved = rendered
    fig = saved["gdd_components"]
    panels = _panels(fig)
    assert len(panels) == 2 * len(ENVS)
    ylabels = sorted({ax.get_ylabel() for ax in panels})
    assert ylabels == sorted([figures.GDD_LABEL, figures.MMD2_LABEL])
    for ax in panels:
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert bars
        for c in bars:  # no zero-length error caps for one seed
            assert (c.errorbar is not None) == (seeds > 1), (seeds, ax.get_title())
    assert ("One seed" in _legend_title(fig)) == (seeds == 1)


def test_training_curves_give_each_model_its_own_panel(rendered):
    _, saved = rendered
    fig = saved["training_curves"]
    panels = _panels(fig)
    assert len(panels) == len(ENVS) * len(MODELS)
    titles = {ax.get_title() for ax in panels}
    assert titles == {f"{e}: {figures.model_display(m)}" for e in ENVS for m in MODELS}
    for ax in panels:
        assert len([ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]) == 1
    assert "not comparable" in _legend_title(fig)


def test_factor_metrics_legend_is_at_the_top(rendered):
    _, saved = rendered
    fig = saved["factor_metrics"]
    top_panel = max(ax.get_window_extent().y1 for ax in _panels(fig))
    assert fig.legends[0].get_window_extent().y0 >= top_panel - 1
    units = {ax.get_ylabel() for ax in _panels(fig)}
    assert units <= set(figures.METRIC_UNITS.values()), units


def test_coinciding_groups_curves_within_a_share_of_the_range():
    curves = {
        "a": ([1, 2], np.array([1.0, 2.0])),
        "b": ([1, 2], np.array([1.001, 2.0])),  # 0.1% of the range from a
        "c": ([1, 2], np.array([1.5, 2.5])),
        "d": ([1, 2], np.array([math.nan, 2.5])),
    }
    assert figures.coinciding(curves) == [["a", "b"]]
    assert figures.coinciding({"x": ([1], np.array([1.0]))}) == []


def test_downstream_figure_names_every_point_in_one_legend(tmp_path, monkeypatch):
    from graphwm.downstream import report

    models = ["gdm", "gdm:all-pairs-mp", "g-rssm", "ea-gwm", "vanilla-gwm"]
    recs = [
        DownstreamRecord("SAR", 8, f"dream:{m}", m, 0, 64, -27.0 + 0.1 * i, 4.0, 20,
                         gdd_single=0.93 if i < 2 else 1.0 + 0.02 * i, gdd_multi=0.9 + 0.03 * i)
        for i, m in enumerate(models)
    ]  # fmt: skip
    recs += [
        DownstreamRecord("SAR", 8, REAL, None, 0, 64, -29.7, 0.3, 20),
        DownstreamRecord("SAR", 8, RANDOM, None, 0, 0, -28.4, 0.5, 20),
        DownstreamRecord("SAR", 8, GREEDY, None, 0, 0, 22.4, 0.5, 20),  # far above the points
    ]
    saved = []
    savefig = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    report.downstream_figure(recs, tmp_path / "downstream.png")
    (fig,) = saved
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = _legend_labels(fig)
    assert labels == [*sorted(models), "real agent", "random agent"]  # greedy: off the axes
    title = _legend_title(fig)
    assert "greedy agent's return (22.400) lies far above" in title
    assert "Spearman is indicative only" in title
    for ax in fig.axes:
        assert ax.get_ylim()[1] < 0  # the points are not squashed by the greedy line
        assert "(" in ax.get_xlabel() and "(" in ax.get_ylabel()
        assert not ax.texts  # no point labels that could overlap
        styles = [(str(c[0].get_color()), c[0].get_marker()) for c in ax.containers]
        assert len(set(styles)) == len(styles) == len(models)
    assert isinstance(fig.legends[0].legend_handles[-1], Line2D)


# ---------------------------------------------------------------------------------------------
# The GDD curve (issue 31): GDD and its components against training steps
# ---------------------------------------------------------------------------------------------
CURVE_STEPS = (100, 200, 300, 350)


def _curve_records(seeds: int) -> list[dict]:
    """Curve points falling with the step (the GDM still falling, the others flat), at N=20."""
    out = []
    for env in ENVS:
        for model in MODELS:
            for seed in range(seeds):
                for step in CURVE_STEPS:
                    fall = 0.6 * (1 - step / 350) if model == "gdm" else 0.0
                    gdd = _gdd(model, 20, seed) + fall
                    comps = {
                        c: 0.1 * (i + 1) + fall + 0.01 * seed + 0.03 * MODELS.index(model)
                        for i, c in enumerate(COMPONENTS)
                    }
                    point = {"env": env, "model": model, "seed": seed, "size": 20, "step": step}
                    out.append({"kind": "curve", **point, "gdd": gdd, "components": comps})
    return out


def _self_records(seeds: int) -> list[dict]:
    return [
        {
            "kind": "self_gdd",
            "env": env,
            "size": 20,
            "seed": s,
            "gdd": 0.1 + 0.01 * s,
            "components": dict.fromkeys(COMPONENTS, 0.01),
        }  # fmt: skip
        for env in ENVS
        for s in range(seeds)
    ]


@pytest.fixture(scope="module", params=[1, 3], ids=["one-seed", "three-seeds"])
def curve_rendered(request, tmp_path_factory) -> tuple[int, Figure, Path]:
    from graphwm.report import curve

    seeds = request.param
    saved: list[Figure] = []
    with pytest.MonkeyPatch.context() as mp:
        save = curve._save

        def keep(fig, path, notes=None):
            saved.append(fig)
            return save(fig, path, notes)

        mp.setattr(curve, "_save", keep)
        path = tmp_path_factory.mktemp(f"curve{seeds}") / "gdd_curve.png"
        styles = figures.model_styles(MODELS)
        assert curve.curve_figure(_curve_records(seeds), _self_records(seeds), path, styles)
    (fig,) = saved
    fig.draw_without_rendering()
    return seeds, fig, path


def test_gdd_curve_renders_readably_with_one_and_three_seeds(curve_rendered):
    from graphwm.report import curve

    seeds, fig, path = curve_rendered
    assert path.stat().st_size > 0
    panels = _panels(fig)
    assert len(panels) == len(ENVS) * len(curve.PANELS)
    # labelled axes with units; the step ticks are the evaluated steps; the env on top
    top = max(ax.get_position().y1 for ax in panels)
    bottom = min(ax.get_position().y0 for ax in panels)
    for ax in panels:
        assert "(" in ax.get_ylabel(), ax.get_ylabel()
        assert list(ax.get_xticks()) == list(CURVE_STEPS)
        if ax.get_position().y1 == top:
            assert ax.get_title() in {f"{e} (N=20)" for e in ENVS}
        if ax.get_position().y0 == bottom:
            assert ax.get_xlabel() == "training step (optimiser steps)"
    # one legend above the panels, naming every model and the floor; no labels overlap
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = _legend_labels(fig)
    assert set(labels) == {figures.model_display(m) for m in MODELS} | {figures.FLOOR_LABEL}
    box = fig.legends[0].get_window_extent()
    boxes = [("legend", box)]
    for ax in panels:
        assert box.y0 >= ax.get_window_extent().y1 - 1
        for text in (ax.title, ax.xaxis.label, ax.yaxis.label):
            if text.get_text():
                boxes.append((text.get_text(), text.get_window_extent()))
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1 :]:
            assert not _overlap(ba, bb), (a, b)
    for ax in panels:
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        models = [ln for ln in lines if ln.get_label() != figures.FLOOR_LABEL]
        styles = [(str(ln.get_color()), ln.get_marker(), str(ln.get_linestyle())) for ln in models]
        assert len(set(styles)) == len(styles) == len(MODELS)
        assert len({ln.get_marker() for ln in models}) == len(MODELS)
        (floor,) = [ln for ln in lines if ln.get_label() == figures.FLOOR_LABEL]
        assert ax.get_ylim()[0] <= min(floor.get_ydata())  # the floor is on the axis
        # a 95% band per model with three seeds, none with one
        assert len(ax.collections) == (len(MODELS) if seeds > 1 else 0)
    assert ("One seed" in _legend_title(fig)) == (seeds == 1)


def test_gdd_curve_table_and_verdicts_per_model():
    from graphwm.report import curve
    from graphwm.report.formatting import to_markdown

    table = curve.curve_table(_curve_records(3))
    assert table is not None
    assert table.value_columns == [f"step {s}" for s in CURVE_STEPS]
    assert len(table.rows) == len(ENVS) * len(MODELS)
    text = to_markdown(table)
    for env in ENVS:
        # the GDM falls by 0.086 between the last two steps, more than its 2 x 0.025 intervals
        assert f"{env}, GDM: GDD" in text and "still improving" in text
        assert f"{env}, Vanilla GWM: GDD" in text
    verdicts = curve.verdicts(_curve_records(3))
    gdm = [v for v in verdicts if ", GDM:" in v]
    others = [v for v in verdicts if ", GDM:" not in v]
    assert len(verdicts) == len(ENVS) * len(MODELS)
    assert all("still improving" in v for v in gdm)
    assert all("no change the seeds resolve" in v for v in others)
    assert all("cannot tell" in v for v in curve.verdicts(_curve_records(1)))
    assert curve.curve_table([]) is None
