"""The GDD protocol against the real envs and metric: replay, env samples, self-GDD."""

from __future__ import annotations

import numpy as np
import pytest

from graphwm.config import Preset
from graphwm.metric.graph import stack_graphs
from graphwm.metric.protocol import (
    STREAM_ENV,
    env_samples,
    reference_indices,
    replay_episode,
    sample_seeds,
    transition_gdd,
    transition_p_value,
)
from graphwm.pipeline import fit_job
from graphwm.stages.collect import DataRef, load_episodes, record_episode
from graphwm.stages.evaluate import EvalJob, self_gdd_job
from graphwm.stages.fit import load_fitted
from graphwm.store.executors import run_jobs
from graphwm.store.results import ResultStore


def _test_ref(preset, env, size=8) -> DataRef:
    return DataRef(env, "test", size, Preset.parse(preset).collect.test_episodes, False)


def _self_job(preset, env, size=8) -> EvalJob:
    """Self-GDD of ``env`` at ``size``: 16 samples, 5 reference transitions per episode."""
    return EvalJob(
        "self_gdd", env, size, 0, _test_ref(preset, env, size), fit_job(preset, env), 16, 5
    )


@pytest.mark.parametrize("env", ["RGC", "OD", "SAR", "CF"])
def test_replay_reproduces_recorded_episode(env):
    ep = record_episode(env, 8, seed=123)
    replay = replay_episode(env, 8, 123, ep["actions"], [0], keep_observations=True, check=ep)
    np.testing.assert_array_equal(replay.reward, ep["reward"])
    for t, obs in enumerate(replay.observations):
        for key, value in obs.items():
            np.testing.assert_array_equal(value, ep[key][t], err_msg=f"{key} at step {t}")


def test_collect_files_roundtrip_and_disjoint_seeds(all_envs_run):
    preset, paths = all_envs_run
    seen = set()
    for split in ("train", "val", "test"):
        for path in paths.data.glob(f"SAR/{split}_n*.npz"):
            episodes, seeds = load_episodes(path)
            assert len(episodes) == len(seeds)
            assert not seen & set(seeds.tolist())
            seen |= set(seeds.tolist())
            for ep, seed in zip(episodes, seeds, strict=True):
                again = record_episode(
                    "SAR",
                    ep["action_nodes"].shape[1],
                    int(seed),
                    store_observations=split != "test",
                )
                for key in again:
                    np.testing.assert_array_equal(again[key], ep[key])


def test_self_gdd_rgc_is_exactly_zero_and_stochastic_envs_small_positive(all_envs_run):
    preset, paths = all_envs_run
    values, unbiased = {}, {}
    for env in ("RGC", "OD", "SAR", "CF"):
        # N = 20: at 8 nodes CF's overload failures (its only randomness) are too rare
        result = self_gdd_job(_self_job(preset, env, size=20), paths.root)
        values[env], unbiased[env] = result.gdd, result.gdd_unbiased
        assert np.isfinite(result.gdd)
    assert values["RGC"] == 0.0 and unbiased["RGC"] == 0.0
    for env in ("OD", "SAR", "CF"):
        assert 0.0 < values[env] < 0.5, values
        # the unbiased estimate drops the within-set diagonal, where the kernel is largest:
        # below the biased one on the same samples, and near its expectation 0
        assert unbiased[env] < values[env] and abs(unbiased[env]) < 0.5, (unbiased, values)


def test_env_samples_differ_from_a_shifted_transition(all_envs_run):
    """The protocol separates distributions: GDD between the env's next-state samples of two
    different reference transitions is much larger than its self-GDD."""
    preset, paths = all_envs_run
    schema_env = "SAR"
    from graphwm.envs import env_schema

    bandwidths, _ = load_fitted(fit_job(preset, schema_env).dir(paths.root))
    episodes, seeds = load_episodes(_test_ref(preset, schema_env).path(paths.root))
    ep, seed = episodes[0], int(seeds[0])
    refs = reference_indices(len(ep["reward"]), 20)
    replay = replay_episode(schema_env, 8, seed, ep["actions"], refs, check=ep)
    t0, t1 = int(refs[0]), int(refs[-1])
    sets = []
    for t in (t0, t1):
        graphs, _ = env_samples(
            schema_env,
            8,
            replay.snapshots[t],
            ep["actions"][t : t + 1],
            sample_seeds(seed, t, STREAM_ENV, 16),
        )
        sets.append(stack_graphs(graphs[0]))
    far = transition_gdd(sets[0], sets[1], env_schema(schema_env), bandwidths, terminal=False)
    near = self_gdd_job(_self_job(preset, schema_env), paths.root)
    assert far.gdd > 3 * near.gdd
    # the permutation test of the indistinguishability column tells the two apart ...
    schema = env_schema(schema_env)
    p_far = transition_p_value(sets[0], sets[1], schema, bandwidths, False, 200, seed=1)
    assert p_far < 0.05
    # ... but not two sample sets of one transition
    graphs, _ = env_samples(
        schema_env,
        8,
        replay.snapshots[t0],
        ep["actions"][t0 : t0 + 1],
        sample_seeds(seed, t0, 9, 16),
    )
    p_same = transition_p_value(
        stack_graphs(graphs[0]), sets[0], schema, bandwidths, False, 200, seed=1
    )
    assert p_same >= 0.05
    # fixed seed: the p-value is reproducible
    assert p_far == transition_p_value(sets[0], sets[1], schema, bandwidths, False, 200, seed=1)


# the default run checks Ray against the local executor on a whole run, byte for byte
# (tests/test_cluster.py::test_ray_without_a_shared_disk_gives_the_local_bytes)
@pytest.mark.slow
def test_ray_executor_matches_local(all_envs_run, tmp_path):
    preset, paths = all_envs_run
    configs = [_self_job(preset, env) for env in ("RGC", "SAR")]
    log_path = paths.root / "jobs.log"
    before = len(log_path.read_text().splitlines()) if log_path.exists() else 0
    local = run_jobs(
        self_gdd_job,
        configs,
        ResultStore(tmp_path / "local"),
        paths.root,
        executor="local",
        max_workers=1,
        progress=False,
    )
    ray_results = run_jobs(
        self_gdd_job,
        configs,
        ResultStore(tmp_path / "ray"),
        paths.root,
        executor="ray",
        progress=False,
    )
    for a, b in zip(local, ray_results, strict=True):
        assert a == b
    import ray

    ray.shutdown()
    log = log_path.read_text().splitlines()
    assert len(log) - before == 4
