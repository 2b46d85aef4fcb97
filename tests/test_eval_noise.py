"""Evaluation noise (issue 39): the repeat index of the sample seeds (repeat 0 is today's
evaluation), ``graphwm noise`` on a tiny trained run, the bootstrap band and its display in
the tables and the GDD curve, and averaging the last checkpoints' GDD (off by default)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from conftest import preset_sizing, tiny_sar_preset

from graphwm.cli import main
from graphwm.config import PresetError
from graphwm.metric.protocol import STREAM_ENV, STREAM_MODEL, sample_seeds
from graphwm.noise import noise_jobs, repeat_jobs, run_noise
from graphwm.pipeline import curve_jobs, evaluation_jobs, preset_dict, stage_curve
from graphwm.report.eval_noise import (
    attach_measured_noise,
    bootstrap_sd,
    load_measured_noise,
    mean_noise_sd,
    record_noise,
)
from graphwm.report.formatting import EVAL_NOISE_NOTE, to_latex, to_markdown
from graphwm.report.seed_stats import SeedStats
from graphwm.report.table import Cell, Row, Table
from graphwm.stages.evaluate import single_step_job
from graphwm.store.paths import RunPaths


def noise_preset() -> dict:
    """Tiny SAR, the GDM (posterior and imagination streams), one seed, 4 steps with a curve
    point every 2, two test episodes of 3 reference transitions."""
    evaluate = {"num_samples": 4, "reference_transitions": 3, "max_episodes": 2}
    preset = tiny_sar_preset(
        ["gdm"], [0], train={"eval_every": 2}, evaluate=evaluate | {"curve_episodes": 2}
    )
    return preset_dict(preset, {"models": preset["models"]})  # their overrides only


# ---------------------------------------------------------------------------------------------
# The repeat index: repeat 0 is today's evaluation
# ---------------------------------------------------------------------------------------------
def test_repeat_zero_seeds_are_today_s_and_a_repeat_draws_new_ones():
    for seed, t, stream in [(0, 0, STREAM_MODEL), (123, 7, STREAM_ENV), (2**31, 19, 4)]:
        today = [int(s) for s in np.random.SeedSequence([seed, t, stream]).generate_state(5)]
        assert sample_seeds(seed, t, stream, 5) == today == sample_seeds(seed, t, stream, 5, 0)
        again = [sample_seeds(seed, t, stream, 5, r) for r in (1, 2)]
        assert again[0] != today and again[1] != today and again[0] != again[1]
    with pytest.raises(ValueError, match="repeat must be >= 0, got -1"):
        sample_seeds(0, 0, 0, 1, -1)


def test_repeat_zero_keeps_every_job_key_and_a_repeat_is_its_own_job():
    preset = noise_preset()
    for job in evaluation_jobs(preset) + curve_jobs(preset):
        assert "repeat" not in job.describe() and "repeat_env" not in job.describe()
        assert dataclasses.replace(job, repeat_env=True).key == job.key  # no effect at 0
    job = next(j for j in evaluation_jobs(preset) if j.kind == "single_step")
    jobs = repeat_jobs(job, 3, env_samples=True)
    assert jobs[0] is job and [j.repeat for j in jobs] == [0, 1, 2]
    assert len({j.key for j in jobs}) == 3
    assert all(j.repeat_env and j.permutations == 0 for j in jobs[1:])


@pytest.fixture(scope="module")
def noise_run(tmp_path_factory):
    """The tiny run trained, its GDD curve evaluated (steps 2 and 4)."""
    paths = RunPaths(tmp_path_factory.mktemp("noise") / "run")
    records = stage_curve(noise_preset(), paths, progress=False)
    return paths, records


def test_repeats_redraw_model_samples_and_optionally_env_samples(noise_run, one_torch_thread):
    paths, _ = noise_run
    job = next(j for j in evaluation_jobs(noise_preset()) if j.kind == "single_step")
    base = single_step_job(job, paths.root)
    # repeat 0 is the job as it was: the same record again, bit for bit
    assert single_step_job(dataclasses.replace(job), paths.root) == base
    model_only = single_step_job(dataclasses.replace(job, repeat=1), paths.root)
    with_env = single_step_job(dataclasses.replace(job, repeat=1, repeat_env=True), paths.root)
    assert model_only.gdd != base.gdd and with_env.gdd not in (base.gdd, model_only.gdd)
    # every record carries its per-transition GDDs, whose means are the episodes' GDDs
    assert base.gdd_transitions is not None and base.gdd_episodes is not None
    assert [len(g) for g in base.gdd_transitions] == [3, 3]
    assert np.allclose([np.mean(g) for g in base.gdd_transitions], base.gdd_episodes)


def test_graphwm_noise_repeats_the_curve_reusing_its_stored_points(noise_run, one_torch_thread):
    paths, curve = noise_run
    result = run_noise(noise_preset(), paths, 3, "curve", progress=False)
    rows = result.rows
    assert [(r["step"], r["repeats"]) for r in rows] == [(2, 3), (4, 3)]
    stored = {r.step: r.gdd for r in curve}
    for row in rows:
        assert row["gdd"][0] == stored[row["step"]]  # repeat 0: the stored point, reused
        assert row["gdd_sd"] == pytest.approx(np.std(row["gdd"], ddof=1))
        assert row["gdd_sd"] > 0 and row["bootstrap_sd"] > 0
        assert set(row["components_sd"]) == {"node", "graph", "edge", "joint"}
    # the repeats are stored beside the run's results, never among them (the report's)
    assert len(list((paths.root / "noise" / "results").glob("curve-*.json"))) == 4
    assert json.loads(result.json_path.read_text())["rows"] == json.loads(json.dumps(rows))
    assert "| SAR | 7 | GDM | 0 | 2 | 2 | 3 |" in result.table
    # a rerun with more repeats computes only the new ones
    log = (paths.root / "jobs.log").read_text().count('"done"')
    more = run_noise(noise_preset(), paths, 4, "curve", steps=[4], progress=False)
    assert more.rows[0]["gdd"][:3] == rows[1]["gdd"]
    assert (paths.root / "jobs.log").read_text().count('"done"') == log + 1


def test_graphwm_noise_input_errors(tmp_path, capsys):
    with pytest.raises(PresetError, match="--steps \\[3\\]: the curve evaluates steps \\[2, 4\\]"):
        noise_jobs(noise_preset(), "curve", steps=[3])
    with pytest.raises(PresetError, match="--episodes must be in \\[1, 2\\].*got 3"):
        noise_jobs(noise_preset(), "final", episodes=3)
    with pytest.raises(PresetError, match="--steps selects GDD-curve points"):
        noise_jobs(noise_preset(), "final", steps=[2])
    assert [j.max_episodes for j in noise_jobs(noise_preset(), "final", episodes=1)] == [1]
    with pytest.raises(SystemExit) as stop:  # a usage error, before any work
        main(["noise", "--preset", "tiny", "--repeats", "1", "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert "--repeats: must be an integer >= 2, got 1" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The bootstrap band
# ---------------------------------------------------------------------------------------------
def test_bootstrap_sd_is_the_standard_error_of_the_mean_of_episode_means():
    rng = np.random.default_rng(1)
    episodes = [rng.normal(0.5, 0.1, size=20), rng.normal(0.8, 0.3, size=10)]
    # the stratified bootstrap's SD: sqrt(sum_e var_e / n_e) / E (var with ddof 0)
    expected = math.sqrt(sum(np.var(g) / g.size for g in episodes)) / len(episodes)
    assert bootstrap_sd(episodes, draws=20000) == pytest.approx(expected, rel=0.03)
    assert bootstrap_sd(episodes) == bootstrap_sd(episodes)  # seeded: a pure function
    assert math.isnan(bootstrap_sd([[0.3], [0.4]]))
    assert bootstrap_sd([[0.2, 0.2, 0.2]]) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="every episode"):
        bootstrap_sd([[0.1, 0.2], []])
    assert record_noise({"gdd": 0.3}) is None  # a record of an older run: no band
    assert record_noise({"gdd_transitions": [[0.3], [0.4]]}) is None  # nothing to resample
    assert mean_noise_sd([0.03, 0.04]) == pytest.approx(0.025)
    assert mean_noise_sd([0.03, None]) is None


def test_tables_show_the_eval_sd_after_the_seed_interval_and_say_which_is_which():
    table = Table("t", "caption", ["Model"], ["N=20"])
    table.rows.append(Row(["GDM"], [Cell(SeedStats(0.624, 0.061, 3), noise=0.0123)]))
    table.rows.append(Row(["Vanilla GWM"], [Cell(SeedStats(0.8, 0.02, 3))]))
    md = to_markdown(table)
    assert "| GDM | 0.624 ± 0.061 (eval SD 0.012) |" in md
    assert "| Vanilla GWM | 0.800 ± 0.020 |" in md
    assert EVAL_NOISE_NOTE in md and "95% CI over training seeds" in EVAL_NOISE_NOTE
    assert "±" not in EVAL_NOISE_NOTE  # a one-seed table shows no ± at all
    assert "0.624 $\\pm$ 0.061 (eval SD 0.012)" in to_latex(table)
    table.rows[0].cells[0].noise = None  # no band: no note
    assert EVAL_NOISE_NOTE not in to_markdown(table)


def _curve_record(model: str, seed: int, step: int, values: list[list[float]]) -> dict:
    gdd = float(np.mean([np.mean(v) for v in values]))
    comps = {c: gdd**2 for c in ("node", "graph", "edge", "joint")}
    return {"kind": "curve", "env": "OD", "model": model, "seed": seed, "size": 20, "step": step,
            "gdd": gdd, "components": comps, "gdd_transitions": values}  # fmt: skip


def test_the_curve_figure_draws_the_noise_band_and_its_table_the_eval_sd(tmp_path, monkeypatch):
    from matplotlib.container import ErrorbarContainer

    from graphwm.report import curve
    from graphwm.report.figures import model_styles

    rng = np.random.default_rng(0)
    records = [
        _curve_record(m, s, step, [list(rng.uniform(0.2, 0.9, 5)) for _ in range(2)])
        for m in ("gdm", "vanilla-gwm") for s in (0, 1) for step in (10, 20, 30)
    ]  # fmt: skip
    drawn = {}
    monkeypatch.setattr(curve, "_save", lambda fig, path, notes: drawn.update(fig=fig, notes=notes))
    curve.curve_figure(records, [], tmp_path / "c.png", model_styles(["gdm", "vanilla-gwm"]))
    gdd_axes = drawn["fig"].axes[0]
    bars = [c for c in gdd_axes.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 3  # one per model, and the legend's grey entry
    assert curve.EVAL_NOISE_LABEL in gdd_axes.get_legend_handles_labels()[1]
    assert curve.BANDS_NOTE in drawn["notes"].text()
    # the band of each point: the models' bootstrap SD over their two seeds
    _, noise = curve.noise_series(records, "OD", "gdm")
    seeds = [bootstrap_sd(r["gdd_transitions"]) for r in records[:6:3]]
    assert noise[0] == pytest.approx(math.sqrt(sum(s * s for s in seeds)) / 2)
    text = to_markdown(curve.curve_table(records))
    assert f"(eval SD {noise[0]:.3f})" in text and EVAL_NOISE_NOTE in text
    assert "x its evaluation-noise SD" in text  # the verdicts set the last change against it
    # averaging the last checkpoints: a table only when asked for
    (gdm,) = [
        r for r in curve.last_checkpoints(records, 2) if (r["model"], r["seed"]) == ("gdm", 0)
    ]
    assert gdm["steps"] == [20, 30] and gdm["gdd"] == pytest.approx(
        np.mean([records[1]["gdd"], records[2]["gdd"]])
    )
    last = to_markdown(curve.last_checkpoints_table(records, 2))
    assert "mean of last 2" in last and "GDD of the final checkpoint" in last
    with pytest.raises(ValueError, match="last checkpoints to average must be >= 1, got 0"):
        curve.last_checkpoints(records, 0)


def test_report_average_last_is_off_by_default(noise_run):
    paths, _ = noise_run
    assert main(["report", str(paths.root), "--average-last", "2"]) == 0
    report = paths.root / "report"
    assert "mean of last 2" in (report / "gdd_last_checkpoints.md").read_text()
    assert "(eval SD " in (report / "gdd_curve.md").read_text()
    assert main(["report", str(paths.root)]) == 0  # the default drops the table again
    assert not (report / "gdd_last_checkpoints.md").exists()


def test_the_report_shows_the_measured_noise_where_graphwm_noise_ran(noise_run, one_torch_thread):
    """After ``graphwm noise``, a curve point's (eval SD x) and error bar are its measured
    re-evaluation SD, not the bootstrap; report.md says for how many points."""
    from graphwm.report import curve

    paths, _ = noise_run
    result = run_noise(noise_preset(), paths, 3, "curve", progress=False)  # steps 2 and 4
    assert main(["report", str(paths.root)]) == 0
    index = (paths.root / "report" / "report.md").read_text()
    assert "measured by re-evaluation" in index and "2 of 2 GDD curve points" in index
    points = curve.load_curve(paths.root)
    bootstrap = [record_noise(r) for r in sorted(points, key=lambda r: r["step"])]
    assert attach_measured_noise(points, load_measured_noise(paths.root)) == 2
    _, band = curve.noise_series(points, "SAR", "gdm")
    measured = [row["gdd_sd"] for row in sorted(result.rows, key=lambda r: r["step"])]
    assert band == pytest.approx(measured) and band != pytest.approx(bootstrap)
    assert f"(eval SD {measured[-1]:.3f})" in (paths.root / "report" / "gdd_curve.md").read_text()


def test_measured_noise_prefers_env_samples_then_more_repeats_and_names_a_bad_file(tmp_path):
    from graphwm.store.records import ResultsFormatError

    def row(sd, env_samples, repeats, step=None):
        where = {"env": "OD", "size": 20, "model": "gdm", "seed": 0, "step": step, "episodes": 2}
        return {**where, "gdd_sd": sd, "env_samples": env_samples, "repeats": repeats}

    (tmp_path / "noise").mkdir()
    files = {"a": [row(0.1, False, 9)], "b": [row(0.2, True, 3)], "c": [row(0.3, True, 5)]}
    for name, rows in files.items():
        (tmp_path / "noise" / f"{name}.json").write_text(json.dumps({"rows": rows}))
    assert load_measured_noise(tmp_path) == {("OD", 20, "gdm", 0, None, 2): 0.3}
    final = {"kind": "single_step", "env": "OD", "size": 20, "model": "gdm", "seed": 0,
             "gdd_transitions": [[0.5, 0.6], [0.4, 0.7]]}  # fmt: skip
    other = {**final, "gdd_transitions": [[0.5, 0.6]]}  # one episode: another evaluation
    assert attach_measured_noise([final, other], load_measured_noise(tmp_path)) == 1
    assert record_noise(final) == 0.3 and record_noise(other) == pytest.approx(
        bootstrap_sd(other["gdd_transitions"])
    )
    assert load_measured_noise(tmp_path / "nowhere") == {}
    (tmp_path / "noise" / "d.json").write_text('{"rows": [{"env": "OD"}]}')
    with pytest.raises(ResultsFormatError, match="d.json"):
        load_measured_noise(tmp_path)


# ---------------------------------------------------------------------------------------------
# The long preset (config level: a 2-step run of it would collect medium's data)
# ---------------------------------------------------------------------------------------------
def test_long_preset_fits_its_2_hour_sizing_with_a_curve_every_10_percent():
    from graphwm.config import Preset
    from graphwm.jobs import training_units
    from graphwm.stages.ensemble import EnsembleJob

    raw = preset_dict("long", {"device": "cpu"})  # validated (no GPU needed here)
    long = Preset.parse(raw)
    assert long.envs == ("OD", "SAR") and long.models == ("gdm", "vanilla-gwm")
    assert long.seeds == (0, 1) and long.train.ensemble == 2 and long.ablations == ()
    medium = Preset.parse(preset_dict("medium"))
    assert long.collect == medium.collect and long.train.model_overrides == {}
    # the curve: every 10% of training, the final checkpoint last, every test episode
    train = training_units(parse_checked_long(raw))
    assert all(isinstance(u, EnsembleJob) for u in train) and len(train) == 4
    steps = long.train.steps
    assert train[0].parts[0].kept_steps() == tuple(range(steps // 10, steps + 1, steps // 10))
    assert long.evaluate.curve_episodes == long.collect.test_episodes
    jobs = curve_jobs(raw)
    assert len(jobs) == 4 * 2 * 10 and {j.max_episodes for j in jobs} == {10}
    # the sizing lines agree with the preset and the 2-hour budget
    text, sizing, per_unit, sec_per_step = preset_sizing("long")
    assert list(per_unit) == [(u.env, u.model) for u in train]
    assert f"after {sec_per_step:.2f} s per step" in text
    train_min = steps * sec_per_step / 60
    assert sizing["steps"] == steps and train_min <= sizing["training"]
    assert f"{steps} x {sec_per_step:.2f} s = {round(train_min)} min" in text
    assert sizing["training"] + sizing["overhead"] + sizing["curve"] <= 120
    # the steps the budget would fit at the measured step times, as the comment says
    spare = 120 - sizing["overhead"] - sizing["curve"]
    fits = round(spare * 60 / sec_per_step, -1)
    assert f"about {fits:,.0f} steps" in text and steps <= fits


def parse_checked_long(raw: dict):
    from graphwm.checks import parse_checked

    return parse_checked(raw)


def test_the_noise_measurement_preset_validates_with_medium_s_curve_settings():
    from pathlib import Path

    from graphwm.config import Preset

    path = Path(__file__).parents[1] / "benchmarks" / "eval_noise_smoke_od.toml"
    mine, medium = Preset.parse(preset_dict(path)), Preset.parse(preset_dict("medium"))
    for name in ("num_samples", "reference_transitions", "curve_episodes"):
        assert getattr(mine.evaluate, name) == getattr(medium.evaluate, name)
    assert min(mine.collect.test_sizes) == min(medium.collect.test_sizes) == 20
    assert [j.step for j in curve_jobs(preset_dict(path))][:3] == [40, 80, 120]
