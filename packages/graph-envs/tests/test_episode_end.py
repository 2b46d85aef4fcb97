"""Episode-end discipline, the terminal mask, vector envs with autoreset, and the size limits."""

from __future__ import annotations

import time

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces


def _run_until_done(env, rng, max_steps=10_000):
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(env.sample_valid_action(rng))
        if terminated or truncated:
            return obs
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_step_after_the_end_raises_until_reset(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    obs = _run_until_done(env, rng)
    before = env.clone_state()
    for _ in range(2):  # keeps raising, and changes nothing
        with pytest.raises(RuntimeError, match=r"ended.*reset\(\)"):
            env.step(env.sample_valid_action(rng))
    after = env.clone_state()
    np.testing.assert_array_equal(after.state.adjacency, before.state.adjacency)
    assert after.steps == before.steps
    assert obs["action_mask"].any()
    env.reset(seed=1)
    env.step(env.sample_valid_action(rng))  # fine again after reset


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_restoring_a_live_snapshot_after_the_end_allows_steps(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    rng = np.random.default_rng(1)
    env.reset(seed=3)
    snap = env.clone_state()
    _run_until_done(env, rng)
    env.restore_state(snap, seed=5)
    env.step(env.sample_valid_action(rng))


def _masked_sample(space: spaces.Space, mask: np.ndarray, rng: np.random.Generator):
    """A masked random sampler as users write it: crashes on an all-zero mask."""
    valid = np.flatnonzero(mask)
    if isinstance(space, spaces.Discrete):
        return int(rng.choice(valid))
    return rng.choice(valid, size=len(space.nvec)).astype(np.int64)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_make_vec_with_a_masked_sampler_runs_2k_steps(env_id):
    """Next-step autoreset hands the terminal observation to the sampler: its mask must be
    usable, and the vector env must never step a finished sub-env. 2,000 env steps at N = 8
    end 36 (OD) to 451 (RGC) episodes at seed 0."""
    num_envs, vector_steps = 4, 500  # 2,000 env steps
    vec = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", num_nodes=8)
    single = vec.single_action_space
    rng = np.random.default_rng(0)
    obs, _ = vec.reset(seed=0)
    episodes = 0
    for _ in range(vector_steps):
        actions = np.stack([_masked_sample(single, m, rng) for m in obs["action_mask"]])
        obs, _, terminated, truncated, _ = vec.step(actions)
        episodes += int(np.sum(terminated | truncated))
    vec.close()
    assert episodes >= 5 * num_envs  # every run saw many terminal observations


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_same_step_autoreset_also_works(env_id):
    vec = gym.make_vec(
        env_id,
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        num_nodes=8,
    )
    rng = np.random.default_rng(0)
    obs, _ = vec.reset(seed=0)
    ends = 0
    for _ in range(300):
        actions = np.stack(
            [_masked_sample(vec.single_action_space, m, rng) for m in obs["action_mask"]]
        )
        obs, _, terminated, truncated, info = vec.step(actions)
        for i in np.flatnonzero(terminated | truncated):
            ends += 1
            assert info["final_obs"][i]["action_mask"].any()
    vec.close()
    assert ends >= 2


# ------------------------------------------------------------------------------ size limits
@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_over_limit_sizes_fail_fast_with_the_reason(env_id):
    cls = type(gym.make(env_id, num_nodes=5).unwrapped)
    assert 200 <= cls.max_nodes <= 10_000 and cls.max_nodes_reason
    for n in (cls.max_nodes + 1, 10**7):
        start = time.perf_counter()
        with pytest.raises(ValueError, match=rf"<= {cls.max_nodes}.*{cls.__name__}") as err:
            gym.make(env_id, num_nodes=n)
        assert time.perf_counter() - start < 1.0
        assert cls.max_nodes_reason in str(err.value)


def test_the_limit_itself_is_accepted():
    from graphwm_envs.rgc.env import RGCEnv

    env = RGCEnv(num_nodes=RGCEnv.max_nodes)  # construction allocates nothing N^2-sized
    assert env.num_nodes == RGCEnv.max_nodes
