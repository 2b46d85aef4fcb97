"""The reference points of a test file are made once per process for every model evaluated on
it (:func:`graphwm.stages.evaluate.reference_points`): the records are those made without
the cache, bit for bit, and no job can change the points another reads."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from graphwm.metric.protocol import EvalContext
from graphwm.pipeline import evaluation_jobs, preset_dict, stage_curve
from graphwm.stages import evaluate
from graphwm.stages.evaluate import multi_step_job, single_step_job
from graphwm.store.paths import RunPaths

from .conftest import tiny_sar_preset


def _preset() -> dict:
    evaluate_ = {"num_samples": 4, "reference_transitions": 3, "max_episodes": 2}
    preset = tiny_sar_preset(
        ["gdm"], [0], train={"eval_every": 2}, evaluate=evaluate_ | {"curve_episodes": 2}
    )
    preset["multi_step"] = {
        "size": 8,
        "horizon": 2,
        "num_samples": 4,
        "reference_transitions": 2,
        "max_episodes": 1,
    }
    return preset_dict(preset, {"models": preset["models"]})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The tiny SAR GDM trained 4 steps, a checkpoint kept at step 2."""
    paths = RunPaths(tmp_path_factory.mktemp("refcache") / "run")
    stage_curve(_preset(), paths, progress=False)
    return paths


@pytest.fixture
def sample_calls(monkeypatch):
    """The env-sample calls of the evaluations, counted; the cache starts empty."""
    monkeypatch.setattr(evaluate, "_reference_cache", type(evaluate._reference_cache)())
    calls = []
    samples = EvalContext.samples

    def counted(self, *args, **kwargs):
        calls.append(self.env_name)
        return samples(self, *args, **kwargs)

    monkeypatch.setattr(EvalContext, "samples", counted)
    return calls


def _jobs():
    final = next(j for j in evaluation_jobs(_preset()) if j.kind == "single_step")
    return final, dataclasses.replace(final, step=2)  # another model, the same test file


def test_a_second_model_reuses_the_points_and_gets_the_uncached_record(
    run, sample_calls, one_torch_thread
):
    final, early = _jobs()
    single_step_job(final, run.root)
    made = len(sample_calls)
    assert made == 6  # 2 episodes x 3 reference transitions
    cached = single_step_job(early, run.root)
    assert len(sample_calls) == made  # no env sample drawn again
    evaluate._reference_cache.clear()
    assert single_step_job(early, run.root) == cached  # bit for bit
    assert len(sample_calls) == 2 * made


def test_the_kept_points_are_read_only(run, sample_calls, one_torch_thread):
    final, _ = _jobs()
    single_step_job(final, run.root)
    ((points, size),) = evaluate._reference_cache.values()
    assert size > 0 and len(points) == 6
    env_set = points[0].env_sets[0]
    with pytest.raises(ValueError, match="read-only"):
        env_set["adjacency"][0, 0, 0] = 1
    assert not points[0].replay.observations[0]["adjacency"].flags.writeable


def test_other_settings_or_a_rewritten_file_are_misses(run, sample_calls, one_torch_thread):
    final, _ = _jobs()
    single_step_job(final, run.root)
    single_step_job(dataclasses.replace(final, num_samples=3), run.root)  # other samples
    assert len(sample_calls) == 12
    path = final.data.path(run.root)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # written again
    single_step_job(final, run.root)
    assert len(sample_calls) == 18
    # multi-step points (another horizon) are their own entry, shared by the models alike
    multi = next(j for j in evaluation_jobs(_preset()) if j.kind == "multi_step")
    first = multi_step_job(multi, run.root)
    drawn = len(sample_calls)
    assert multi_step_job(dataclasses.replace(multi, step=2), run.root) != first
    assert len(sample_calls) == drawn


def test_points_over_the_budget_are_not_kept(run, sample_calls, monkeypatch, one_torch_thread):
    monkeypatch.setattr(evaluate, "REFERENCE_CACHE_BYTES", 1)
    final, _ = _jobs()
    first = single_step_job(final, run.root)
    assert not evaluate._reference_cache
    assert single_step_job(final, run.root) == first
    assert len(sample_calls) == 12
    assert np.isfinite(first.gdd)
