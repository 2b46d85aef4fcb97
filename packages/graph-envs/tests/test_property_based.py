"""Property-based env invariants (hypothesis): over random envs, sizes, seeds and action
sequences, the adjacency is a symmetric 0/1 matrix with zero diagonal, the published mask is
the env's mask rule (never empty), every observation honours the contract and lies in the
observation space, and an action drawn from the mask is valid.

Hypothesis chooses (and shrinks) the env, N, the reset seed and the seed of the actions;
few examples and no deadline keep the default run fast.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from graphwm_envs import ENV_IDS
from graphwm_envs.core.validation import validate_observation
from hypothesis import given, settings
from hypothesis import strategies as st

STEPS = 12


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    env_id=st.sampled_from(ENV_IDS),
    num_nodes=st.integers(9, 16),
    seed=st.integers(0, 2**31 - 1),
    action_seed=st.integers(0, 2**31 - 1),
)
def test_adjacency_and_mask_invariants(env_id, num_nodes, seed, action_seed):
    env = gym.make(env_id, num_nodes=num_nodes).unwrapped
    rng = np.random.default_rng(action_seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(STEPS):
        adj = obs["adjacency"]
        assert adj.shape == (num_nodes, num_nodes) and set(np.unique(adj)) <= {0, 1}
        np.testing.assert_array_equal(adj, adj.T)
        assert not np.diagonal(adj).any()
        validate_observation(obs, env.schema, num_nodes)
        assert env.observation_space.contains(obs)
        rule = env._mask().astype(bool)
        mask = obs["action_mask"].astype(bool)
        assert mask.any()
        np.testing.assert_array_equal(mask, rule if rule.any() else np.ones_like(rule))
        action = env.sample_valid_action(rng)
        chosen = env.action_to_nodes(action).astype(bool)
        if rule.sum() >= chosen.sum():  # enough valid nodes: the drawn action is valid
            assert (chosen <= rule).all()
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset(seed=seed + 1)
