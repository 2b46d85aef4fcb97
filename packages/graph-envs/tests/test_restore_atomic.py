"""A failed restore leaves the env as it was (issue 38, "Data loss"): every argument is checked
before the env changes, in all four envs."""

from __future__ import annotations

import copy

import graphwm_envs  # noqa: F401  (registers the envs)
import gymnasium as gym
import numpy as np
import pytest

ENVS = ["graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/SAR-v0", "graphenv/CF-v0"]


def _advanced(env_id: str):
    """An env one step into an episode, and a snapshot taken at its start."""
    env = gym.make(env_id, num_nodes=20).unwrapped
    env.reset(seed=3)
    snapshot = env.clone_state()
    for _ in range(1):
        _, _, terminated, truncated, _ = env.step(env.sample_valid_action(env.np_random))
        assert not (terminated or truncated)
    return env, snapshot


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("seed", [-5, 1.5, "7", True, np.float64(2.0)])
def test_a_bad_restore_seed_changes_nothing(env_id, seed):
    env, snapshot = _advanced(env_id)
    before = env.clone_state()
    obs_before = env._observation()
    with pytest.raises(ValueError, match="restore seed must be None or an integer >= 0"):
        env.restore_state(snapshot, seed=seed)
    assert env.elapsed_steps == 1  # not switched to the snapshot's step 0
    after = env.clone_state()
    assert after.rng_state == before.rng_state
    for key, value in env._observation().items():
        np.testing.assert_array_equal(value, obs_before[key])


@pytest.mark.parametrize("env_id", ENVS)
def test_good_seeds_still_restore(env_id):
    env, snapshot = _advanced(env_id)
    env.restore_state(snapshot, seed=np.int64(4))
    assert env.elapsed_steps == 0
    env.restore_state(snapshot, seed=0)
    assert env.elapsed_steps == 0


def test_an_rng_state_out_of_range_is_a_value_error():
    env, snapshot = _advanced("graphenv/OD-v0")
    bad = copy.deepcopy(snapshot)
    bad.rng_state["state"]["state"] = 2**200
    with pytest.raises(ValueError, match="rng_state"):
        env.restore_state(bad)
    assert env.elapsed_steps == 1


def test_a_snapshot_with_a_location_off_the_graph_is_refused():
    env, snapshot = _advanced("graphenv/SAR-v0")
    for bad in (-1, 20, 2.0):
        forged = copy.deepcopy(snapshot)
        forged.state.location = bad
        with pytest.raises(ValueError, match="snapshot state location"):
            env.restore_state(forged)
        assert env.elapsed_steps == 1


def test_a_snapshot_from_an_env_with_other_parameters_is_refused():
    from graphwm_envs.sar.types import SARParams

    env, snapshot = _advanced("graphenv/SAR-v0")
    other = gym.make("graphenv/SAR-v0", num_nodes=20, params=SARParams(step_reward=-2.0))
    other.unwrapped.reset(seed=0)
    with pytest.raises(ValueError, match="other parameters"):
        other.unwrapped.restore_state(snapshot)
    same = gym.make("graphenv/SAR-v0", num_nodes=20).unwrapped
    same.reset(seed=1)
    same.restore_state(snapshot)  # equal parameters restore


@pytest.mark.parametrize("rng", [None, 0, np.random.RandomState(0)])
def test_sample_valid_action_names_a_missing_generator(rng):
    env, _ = _advanced("graphenv/OD-v0")
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        env.sample_valid_action(rng)
    fresh = gym.make("graphenv/OD-v0", num_nodes=20).unwrapped
    with pytest.raises(RuntimeError, match="reset"):
        fresh.sample_valid_action(np.random.default_rng(0))


@pytest.mark.parametrize(
    "env_id", ["graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/SAR-v0", "graphenv/CF-v0"]
)
def test_action_to_nodes_refuses_a_node_off_the_graph(env_id):
    env = gym.make(env_id, num_nodes=20).unwrapped
    env.reset(seed=0)
    good = env.sample_valid_action(env.np_random)
    assert env.action_to_nodes(good).sum() >= 1
    bad = -1 if np.ndim(good) == 0 else np.full(np.shape(good), -1)
    with pytest.raises(ValueError, match="outside the action space"):
        env.action_to_nodes(bad)  # was node N - 1 (a negative index wraps around)
    big = 999 if np.ndim(good) == 0 else np.full(np.shape(good), 999)
    with pytest.raises(ValueError, match="outside the action space"):
        env.action_to_nodes(big)  # was an IndexError
