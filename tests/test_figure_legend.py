"""The shared legend of a report figure lies inside the figure (it was cut off at the right
edge of a one-panel figure with many models), above the panels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwm.report import figures
from graphwm.report.training_logs import TrainingLog

ABLATIONS = [
    "gdm",
    "gdm:no-h-plus",
    "gdm:no-adjacency-kl",
    "gdm:no-hierarchy",
    "gdm:deterministic",
    "gdm:mlp-decoder",
]


def _logs(envs: list[str], models: list[str]) -> list[TrainingLog]:
    steps = np.arange(1, 61)
    return [
        TrainingLog(env, model, seed, steps, np.exp(-steps / (20 + 5 * i)) + 0.1, Path("log.csv"))
        for env in envs
        for i, model in enumerate(models)
        for seed in range(2)
    ]


@pytest.mark.parametrize(
    ("envs", "models"),
    [
        (["RGC"], ["gdm", "vanilla-gwm", "ea-gwm", "g-rssm"]),
        (["RGC"], ABLATIONS),
        (["RGC", "OD", "SAR", "CF"], ABLATIONS),
    ],
    ids=["one-panel", "one-panel-ablations", "four-panels-ablations"],
)
def test_training_curves_legend_lies_inside_the_figure(tmp_path, monkeypatch, envs, models):
    saved = []

    def keep(fig, path, notes=None):
        saved.append(fig)
        return save(fig, path, notes)

    save = figures._save
    monkeypatch.setattr(figures, "_save", keep)
    draw = figures.ablation_training_curves_figure if ":" in models[1] else None
    draw = draw or figures.training_curves_figure
    path = draw(_logs(envs, models), tmp_path / "curves.png", figures.model_styles(models))
    assert path is not None and path.is_file()
    (fig,) = saved
    (legend,) = fig.legends
    names = [figures.model_display(m) for m in figures.order_models(models)]
    if ":" in models[1]:  # the ablation figure: the full GDM is its reference line
        names[0] = figures.FULL_GDM_LABEL
    assert [t.get_text() for t in legend.get_texts()] == names
    fig.draw_without_rendering()  # the constrained layout of the saved figure
    box, frame = legend.get_window_extent(), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)
    assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
    for ax in fig.axes:  # and above the panels, not over them
        assert box.y0 >= ax.get_window_extent().y1
