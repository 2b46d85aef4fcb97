"""The GDD curve (issue 31, ``train.eval_every``): the settings and their errors, one code path
with the final evaluation (a kept checkpoint scores what ``graphwm evaluate`` gives for a run of
that many steps on the same subset), and an interrupted curve stage that resumes to identical
results without recomputing what was stored."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import graphwm.pipeline as pipeline
from graphwm.config import PresetError
from graphwm.pipeline import (
    curve_jobs,
    evaluation_jobs,
    preset_dict,
    stage_curve,
    stage_train,
    training_jobs,
)
from graphwm.report.build import build_report, load_results
from graphwm.report.curve import load_curve
from graphwm.stages import evaluate
from graphwm.stages.evaluate import single_step_job
from graphwm.store.paths import RunPaths

SEEDS = [0, 1]


def curve_preset(**train) -> dict:
    """The tiny preset cut to SAR, two models and two seeds trained as one ensemble, 4 steps
    with a curve point every 2 (steps 2 and 4), on the first test episode."""
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["gdm", "vanilla-gwm"], ablations=[], seeds=SEEDS)
    for section in ("multi_step", "downstream", "search"):
        preset.pop(section, None)
    preset["collect"] = {**preset["collect"], "test_episodes": 2}
    preset["train"] = {**preset["train"], "ensemble": 2, "eval_every": 2, **train}
    preset["evaluate"] = {
        "num_samples": 4,
        "reference_transitions": 2,
        "max_episodes": 2,
        "curve_episodes": 1,
    }
    return preset


def _done(run_dir: Path) -> Counter:
    lines = (run_dir / "jobs.log").read_text().splitlines()
    return Counter(json.loads(line)["kind"] for line in lines if '"done"' in line)


def _by_point(records) -> dict:
    return {(r.model, r.seed, r.step): r for r in records}


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train.eval_every": -1}, "preset key 'train.eval_every': must be an integer >= 0"),
        ({"train.eval_every": 5}, "preset key 'train.eval_every': must be at most 'steps' = 4"),
        ({"train.eval_every": "2"}, "preset key 'train.eval_every': must be an integer"),
        (
            {"train.eval_every": 2, "evaluate.curve_episodes": 0},
            "preset key 'evaluate.curve_episodes': must be an integer >= 1",
        ),
        (
            {"train.eval_every": 2, "evaluate.curve_episodes": 3},
            "preset key 'evaluate.curve_episodes': must be at most the 2 test episodes",
        ),
        (
            {"train.eval_every": 2, "train.steps": None, "train.epochs": 1},
            "preset key 'train.eval_every': needs the training length in 'steps'",
        ),
    ],
)
def test_bad_curve_settings_are_refused_naming_the_key(overrides, message):
    preset = curve_preset(eval_every=0)
    if overrides.get("train.steps", 0) is None:
        preset["train"].pop("steps")
        overrides = {k: v for k, v in overrides.items() if k != "train.steps"}
    with pytest.raises(PresetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_preset_dict(preset, overrides)


def load_preset_dict(preset: dict, overrides: dict) -> None:
    from graphwm.checks import parse_checked
    from graphwm.config import apply_overrides

    parse_checked(apply_overrides(preset, overrides))


def test_the_curve_keeps_and_evaluates_each_kth_checkpoint_and_is_off_by_default():
    off = curve_preset(eval_every=0)
    assert curve_jobs(off) == []
    assert all(job.keep_every is None and "keep_every" not in job.describe()
               for job in training_jobs(off))  # fmt: skip
    on = curve_preset()
    trains = training_jobs(on)
    assert [t.kept_steps() for t in trains] == [(2, 4)] * 4
    jobs = curve_jobs(on)
    assert [(j.model, j.seed, j.step) for j in jobs] == [
        (m, s, step) for m in ("gdm", "vanilla-gwm") for s in SEEDS for step in (2, 4)
    ]
    assert {(j.kind, j.size, j.max_episodes, j.permutations) for j in jobs} == {("curve", 7, 1, 0)}
    # the final evaluation is unchanged by the curve: same jobs but for the training keys
    final_on, final_off = evaluation_jobs(on), evaluation_jobs(off)
    assert [j.describe() | {"train": None} for j in final_on] == [
        j.describe() | {"train": None} for j in final_off
    ]
    assert all("step" not in j.describe() for j in final_on)
    assert curve_preset(steps=5)["train"]["steps"] == 5
    assert [t.kept_steps() for t in training_jobs(curve_preset(steps=5))][0] == (2, 4, 5)


# ---------------------------------------------------------------------------------------------
# One code path with the final evaluation
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def curve_run(tmp_path_factory) -> tuple[RunPaths, list]:
    paths = RunPaths(tmp_path_factory.mktemp("curve") / "run")
    records = stage_curve(curve_preset(), paths, progress=False)
    return paths, records


def test_a_kept_checkpoint_scores_what_evaluate_gives_for_that_checkpoint_and_subset(
    curve_run, one_torch_thread
):
    paths, records = curve_run
    points = _by_point(records)
    assert set(points) == {(m, s, st) for m in ("gdm", "vanilla-gwm") for s in SEEDS
                           for st in (2, 4)}  # fmt: skip
    # step 4 is the final checkpoint: graphwm evaluate's single-step jobs of this preset on
    # the curve's subset (its first episode) and without the permutation test
    subset = {"evaluate.max_episodes": 1, "evaluate.permutations": 0}
    final = [j for j in evaluation_jobs(load_preset_dict_raw(curve_preset(), subset))
             if j.kind == "single_step"]  # fmt: skip
    # step 2: the final checkpoint of a run of 2 steps (training resumes exactly, so the
    # checkpoint kept at step 2 of the 4-step run holds its weights)
    short = load_preset_dict_raw(curve_preset(steps=2, eval_every=0), subset)
    stage_train(short, paths, progress=False)
    final += [j for j in evaluation_jobs(short) if j.kind == "single_step"]
    assert len(final) == len(points)
    for job in final:
        assert job.train is not None
        record = single_step_job(job, paths.root)
        point = points[(job.model, job.seed, job.train.steps)]
        assert (point.gdd, point.gdd_unbiased, point.components, point.gdd_episodes) == (
            record.gdd,
            record.gdd_unbiased,
            record.components,
            record.gdd_episodes,
        )
        assert point.gdd_unbiased is not None  # a curve point stores both estimators
    # the report draws the curve and tabulates it
    report = build_report(paths.root)
    assert "gdd_curve" in report.figures and "gdd_curve" in report.tables_md
    assert len(load_curve(paths.root)) == 8 and load_results(paths.root) == []


def load_preset_dict_raw(preset: dict, overrides: dict) -> dict:
    from graphwm.config import apply_overrides

    raw = apply_overrides(preset, overrides)
    load_preset_dict(raw, {})
    return raw


# ---------------------------------------------------------------------------------------------
# Interrupted during an intermediate evaluation, then rerun
# ---------------------------------------------------------------------------------------------
def test_interrupted_curve_resumes_to_identical_results_recomputing_nothing_stored(
    curve_run, tmp_path, monkeypatch, one_torch_thread
):
    _, uninterrupted = curve_run
    paths = RunPaths(tmp_path / "run")
    preset = curve_preset()
    stage_train(preset, paths, progress=False)
    # stop inside the 4th curve job (its 2nd reference transition): 3 are stored then
    calls = {"n": 0}
    real = evaluate.ModelSampler.__call__

    def stop(self, point):
        calls["n"] += 1
        if calls["n"] == 3 * 2 + 2:
            raise KeyboardInterrupt
        return real(self, point)

    monkeypatch.setattr(evaluate.ModelSampler, "__call__", stop)
    with pytest.raises(KeyboardInterrupt):
        stage_curve(preset, paths, progress=False)
    monkeypatch.undo()
    assert _done(paths.root)["curve"] == 3
    stored = {p: p.stat().st_mtime_ns for p in (paths.root / "results").glob("curve-*.json")}
    assert len(stored) == 3

    ran: list = []
    real_job = pipeline.curve_job

    def counted(job, run_dir):
        ran.append(job.key)
        return real_job(job, run_dir)

    monkeypatch.setattr(pipeline, "curve_job", counted)
    resumed = stage_curve(preset, paths, progress=False)
    assert len(ran) == 5  # the 8 points less the 3 stored
    assert {p: p.stat().st_mtime_ns for p in stored} == stored  # untouched
    assert resumed == uninterrupted
    assert _done(paths.root)["train_ensemble"] == 2  # one per model, none retrained
    ran.clear()
    assert stage_curve(preset, paths, progress=False) == uninterrupted
    assert ran == []


def test_a_missing_kept_checkpoint_is_a_corrupt_training_job(curve_run, tmp_path):
    import shutil

    from graphwm.store.files import CorruptFileError

    src, _ = curve_run
    paths = RunPaths(tmp_path / "run")
    shutil.copytree(src.root, paths.root)
    job = training_jobs(curve_preset())[0]
    kept = job.checkpoint(paths.root, 2)
    shutil.rmtree(kept)
    with pytest.raises(CorruptFileError, match="step_000002"):
        stage_train(curve_preset(), paths, progress=False)


def test_two_curve_points_of_one_seed_and_step_are_refused(tmp_path):
    """A curve point stored twice (one seed counted twice in the band) is refused, naming both
    files; without the second file the curve loads."""
    from graphwm.store.records import CurveRecord, ResultsFormatError, seal

    point = CurveRecord(
        kind="curve", env="SAR", model="gdm", seed=0, size=7, step=2, gdd=0.5,
        components={"node": 0.1, "graph": 0.1, "edge": 0.1, "joint": 0.2},
    ).to_dict()  # fmt: skip
    results = tmp_path / "results"
    results.mkdir()
    (results / "curve-a.json").write_text(json.dumps(seal(point)))
    assert [r["step"] for r in load_curve(tmp_path)] == [2]
    (results / "curve-b.json").write_text(json.dumps(seal(point)))
    with pytest.raises(ResultsFormatError, match=r"curve-b\.json: duplicates .*curve-a\.json"):
        load_curve(tmp_path)
