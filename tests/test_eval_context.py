"""One evaluation context per job: the extended schema is built once and one env instance
serves every replay and env sample, with the numbers of the one-off protocol functions."""

from __future__ import annotations

import numpy as np
import pytest

from graphwm.config import Preset
from graphwm.envs import env_schema
from graphwm.metric import protocol
from graphwm.metric.graph import stack_graphs
from graphwm.metric.protocol import (
    STREAM_ENV,
    STREAM_SELF,
    env_samples,
    reference_indices,
    replay_episode,
    sample_seeds,
    transition_gdd,
)
from graphwm.pipeline import fit_job
from graphwm.stages.collect import DataRef, load_episodes
from graphwm.stages.evaluate import EvalJob, self_gdd_job
from graphwm.stages.fit import load_fitted

ENV, SIZE, KAPPA, REFS = "SAR", 8, 8, 4


def _job(preset) -> EvalJob:
    test = DataRef(ENV, "test", SIZE, Preset.parse(preset).collect.test_episodes, False)
    return EvalJob("self_gdd", ENV, SIZE, 0, test, fit_job(preset, ENV), KAPPA, REFS)


def _reference_self_gdd(job: EvalJob, run_dir) -> float:
    """The self-GDD through the one-off functions: a fresh env per replay and per sample set,
    the schema extended per transition."""
    bandwidths, _ = load_fitted(job.fit.dir(run_dir))
    schema = env_schema(ENV)
    episodes, seeds = load_episodes(job.data.path(run_dir))
    per_episode = []
    for episode, seed in zip(episodes, seeds, strict=True):
        seed = int(seed)
        refs = reference_indices(len(episode["reward"]), REFS)
        replay = replay_episode(ENV, SIZE, seed, episode["actions"], refs, check=episode)
        values = []
        for t in map(int, refs):
            action = episode["actions"][t : t + 1]
            sets = [
                stack_graphs(
                    env_samples(
                        ENV, SIZE, replay.snapshots[t], action, sample_seeds(seed, t, s, KAPPA)
                    )[0][0]
                )
                for s in (STREAM_SELF, STREAM_ENV)
            ]
            terminal = bool(replay.terminated[t])
            values.append(transition_gdd(*sets, schema, bandwidths, terminal).gdd)
        per_episode.append(np.mean(values))
    return float(np.mean(per_episode))


def test_a_job_builds_its_context_once_with_unchanged_numbers(all_envs_run, monkeypatch):
    preset, paths = all_envs_run
    job = _job(preset)
    expected = _reference_self_gdd(job, paths.root)

    calls = {"extend_schema": 0, "make_env": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for name in calls:
        monkeypatch.setattr(protocol, name, counting(name, getattr(protocol, name)))
    result = self_gdd_job(job, paths.root)
    assert result.num_transitions >= 2  # several transitions share the one context
    # one extended schema and one env for the whole job (was: per transition / per sample set)
    assert calls == {"extend_schema": 1, "make_env": 1}
    assert result.gdd == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert result.gdd > 0.0  # SAR is stochastic: the comparison is not between zeros
