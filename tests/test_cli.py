"""The `graphwm` command line: demo, report and search on tiny settings."""

from __future__ import annotations

import json

import numpy as np

from graphwm.cli import main
from graphwm.demo import run_episode
from graphwm.pipeline import RunPaths, preset_dict
from graphwm.search import run_search


def test_demo_prints_statistics_and_writes_renders(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--seeds", "1", "--num-nodes", "6"]) == 0
    out = capsys.readouterr().out
    for name in ("RGC", "OD", "SAR", "CF"):
        assert f"graphenv/{name}-v0" in out
        for end in ("start", "end"):
            png = tmp_path / f"{name}_seed0_{end}.png"
            assert png.stat().st_size > 1000


def test_demo_episode_statistics_are_consistent():
    stats = run_episode("graphenv/SAR-v0", seed=3, num_nodes=8)
    assert stats.edges_added == 0  # SAR edges only ever collapse
    assert stats.length >= 1
    # every SAR step costs -1; bonuses are integers, so the return is an integer
    assert float(stats.episode_return).is_integer()
    rgc = run_episode("graphenv/RGC-v0", seed=3, num_nodes=8)
    assert rgc.edges_removed == 0  # RGC only adds edges
    budget = int(np.ceil(0.05 * 8 * 7 / 2))
    assert rgc.edges_added <= budget


def test_search_selects_the_lowest_mean_validation_gdd(tmp_path):
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["gdm"], ablations=[])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    best = run_search(preset, RunPaths(tmp_path), progress=False)
    summary = json.loads((tmp_path / "search" / "all.json").read_text())
    assert len(summary) == 2  # lr in {1e-3, 1e-4}
    winner = min(summary, key=lambda row: row["val_gdd"])
    assert best["SAR/gdm"]["point"] == winner["point"]
    assert best["SAR/gdm"]["val_gdd"] == winner["val_gdd"]
    assert json.loads((tmp_path / "search" / "best.json").read_text()) == best


def test_cost_estimate_scales_measured_unit_costs_by_job_counts():
    from graphwm.cost import estimate, format_estimate

    preset = preset_dict("tiny")
    preset.update(envs=["RGC"], models=["vanilla-gwm"], ablations=[], seeds=[0, 1, 2])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    (line,) = estimate(preset, "cpu", steps=1, probe_sizes=(8, 12))
    assert (line.env, line.model, line.train_jobs, line.steps_per_job) == (
        "RGC",
        "vanilla-gwm",
        3,
        preset["train"]["steps"],
    )
    assert line.sec_per_step > 0
    assert line.train_hours == line.sec_per_step * preset["train"]["steps"] * 3 / 3600
    # transitions per size = reference transitions x test episodes x jobs
    per = preset["evaluate"]["reference_transitions"] * preset["collect"]["test_episodes"] * 3
    assert line.eval_transitions == {7: per}
    assert line.sec_per_transition[7] >= 0
    # the metric half (env samples, GDD) is timed on the CPU and reported apart
    assert line.sec_per_transition_cpu[7] > 0
    assert line.eval_cpu_hours == line.sec_per_transition_cpu[7] * per / 3600
    table = format_estimate([line], "cpu")
    assert "RGC | vanilla-gwm" in table and "eval h, metric (CPU)" in table


def test_cost_estimate_counts_the_gdd_curve_points():
    """With train.eval_every every kept checkpoint of every job is one more evaluation of
    curve_episodes episodes at the smallest test size."""
    from graphwm.cost import estimate

    preset = preset_dict("tiny")
    preset.update(envs=["RGC"], models=["vanilla-gwm"], ablations=[], seeds=[0, 1, 2])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    preset["train"].update(steps=4, eval_every=2)
    preset["evaluate"]["curve_episodes"] = 1
    (line,) = estimate(preset, "cpu", steps=1, probe_sizes=(8, 12))
    ref = preset["evaluate"]["reference_transitions"]
    final = ref * preset["collect"]["test_episodes"] * 3
    # 3 jobs x 2 points (steps 2 and 4, the final checkpoint) x 1 episode
    assert line.eval_transitions == {7: final + 3 * 2 * ref * 1}
