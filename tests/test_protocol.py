"""The GDD protocol against the real envs and metric: replay, env samples, self-GDD."""

from __future__ import annotations

import numpy as np
import pytest

from graphwm.collect import load_episodes, record_episode, split_path
from graphwm.evaluate import self_gdd_job
from graphwm.executors import run_jobs
from graphwm.fit import load_fitted
from graphwm.jobs import ResultStore
from graphwm.metric_graph import stack_graphs
from graphwm.protocol import (
    STREAM_ENV,
    env_samples,
    reference_indices,
    replay_episode,
    sample_seeds,
    transition_gdd,
)


def _self_config(paths, env, size=8):
    return {
        "kind": "self_gdd",
        "env": env,
        "size": size,
        "seed": 0,
        "data_dir": str(paths.data),
        "fit_dir": str(paths.fit(env)),
        "num_samples": 16,
        "reference_transitions": 5,
    }


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
    _, paths = all_envs_run
    values = {}
    for env in ("RGC", "OD", "SAR", "CF"):
        # N = 20: at 8 nodes CF's overload failures (its only randomness) are too rare
        result = self_gdd_job(_self_config(paths, env, size=20))
        values[env] = result["gdd"]
        assert np.isfinite(result["gdd"])
    assert values["RGC"] == 0.0
    for env in ("OD", "SAR", "CF"):
        assert 0.0 < values[env] < 0.5, values


def test_env_samples_differ_from_a_shifted_transition(all_envs_run):
    """The protocol separates distributions: GDD between the env's next-state samples of two
    different reference transitions is much larger than its self-GDD."""
    _, paths = all_envs_run
    schema_env = "SAR"
    from graphwm.envs import env_schema

    bandwidths, _ = load_fitted(paths.fit(schema_env))
    episodes, seeds = load_episodes(split_path(paths.data, schema_env, "test", 8))
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
    near = self_gdd_job(_self_config(paths, schema_env))
    assert far.gdd > 3 * near["gdd"]


def test_ray_executor_matches_local(all_envs_run, tmp_path):
    _, paths = all_envs_run
    configs = [_self_config(paths, env) for env in ("RGC", "SAR")]
    local = run_jobs(
        self_gdd_job,
        configs,
        ResultStore(tmp_path / "local"),
        tmp_path,
        executor="local",
        max_workers=1,
        progress=False,
    )
    ray_results = run_jobs(
        self_gdd_job,
        configs,
        ResultStore(tmp_path / "ray"),
        tmp_path,
        executor="ray",
        progress=False,
    )
    for a, b in zip(local, ray_results, strict=True):
        assert a["gdd"] == b["gdd"]
        assert a["gdd_episodes"] == b["gdd_episodes"]
    import ray

    ray.shutdown()
    log = (tmp_path / "jobs.log").read_text().splitlines()
    assert len(log) == 4
