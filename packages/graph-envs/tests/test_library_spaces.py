"""Spaces and infos every RL library reads (issue 35, part 1): the 0/1 arrays as int8
``Box(0, 1)``, a scalar for a one-node selection, no ``None`` in ``info``, and the action mask
of RGC's pair mode reachable from the observation (``graphwm_envs.wrappers``)."""

from __future__ import annotations

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest
import torch
from graphwm_envs.wrappers import ActionMasksObservation, TianshouMask
from gymnasium import spaces
from stable_baselines3.common.preprocessing import preprocess_obs


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_binary_keys_are_int8_boxes_and_observations_fit_them(env_id):
    env = gym.make(env_id, num_nodes=8)
    n = 8
    space = env.observation_space
    assert space["adjacency"] == spaces.Box(0, 1, (n, n), np.int8)
    assert space["action_mask"] == spaces.Box(0, 1, (n,), np.int8)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert space.contains(obs)
        obs, _, terminated, truncated, _ = env.step(env.unwrapped.sample_valid_action(rng))
        if terminated or truncated:
            obs, _ = env.reset()


def test_sb3_preprocesses_the_box_as_it_did_the_multibinary():
    """SB3 (and so MaskablePPO and the graph agents) sees the same float tensor as before."""
    env = gym.make("graphenv/SAR-v0", num_nodes=8)
    obs, _ = env.reset(seed=0)
    old_spaces = {"adjacency": spaces.MultiBinary((8, 8)), "action_mask": spaces.MultiBinary(8)}
    for key, old in old_spaces.items():
        x = torch.as_tensor(obs[key][None])
        new = preprocess_obs(x, env.observation_space[key])
        torch.testing.assert_close(new, preprocess_obs(x, old))
        assert new.dtype == torch.float32


def test_od_takes_a_scalar_for_a_one_node_selection():
    """torchrl turns MultiDiscrete([N]) into Categorical(N) and passes the node itself."""
    env = gym.make("graphenv/OD-v0", num_nodes=20, invalid_action="raise")
    assert env.action_space == spaces.MultiDiscrete([20])
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.int64(3))
    assert not info["invalid_action"]
    env.step(7)  # a Python int too
    big = gym.make("graphenv/OD-v0", num_nodes=40)  # k = 2: a scalar is not a selection
    big.reset(seed=0)
    with pytest.raises(ValueError, match="integer array of shape \\(2,\\)"):
        big.step(3)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_no_info_value_is_none(env_id):
    env = gym.make(env_id, num_nodes=8)
    rng = np.random.default_rng(1)
    _, info = env.reset(seed=1)
    infos = [info]
    for _ in range(60):
        _, _, terminated, truncated, info = env.step(env.unwrapped.sample_valid_action(rng))
        infos.append(info)
        if terminated or truncated:
            _, info = env.reset()
            infos.append(info)
    for info in infos:
        bad = {k: v for k, v in info.items() if not isinstance(v, bool | int | float | str)}
        assert not bad, bad
    if env_id == "graphenv/SAR-v0":
        outcomes = {i["outcome"] for i in infos if "outcome" in i}
        assert "none" in outcomes and len(outcomes) > 1  # a documented "none" and real ends


def test_pair_mask_is_reachable_from_the_observation():
    env = ActionMasksObservation(gym.make("graphenv/RGC-v0", num_nodes=8, action_mode="pair"))
    m = 8 * 7 // 2
    assert env.observation_space["action_masks"] == spaces.Box(0, 1, (m,), np.int8)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        assert env.observation_space.contains(obs)
        rgc = env.unwrapped
        np.testing.assert_array_equal(obs["action_masks"], rgc.addable_pairs())
        # every masked action adds an edge: a value-based agent masking with it is never invalid
        action = int(rng.choice(np.flatnonzero(obs["action_masks"])))
        obs, _, terminated, _, info = env.step(action)
        assert info["edge_added"] and not info["invalid_action"]
        if terminated:
            break


def test_action_masks_key_for_node_actions():
    """Node actions: the node mask itself (Discrete) or once per component (MultiDiscrete)."""
    sar = ActionMasksObservation(gym.make("graphenv/SAR-v0", num_nodes=8))
    obs, _ = sar.reset(seed=0)
    np.testing.assert_array_equal(obs["action_masks"], obs["action_mask"])
    rgc = ActionMasksObservation(gym.make("graphenv/RGC-v0", num_nodes=8))
    obs, _ = rgc.reset(seed=0)
    np.testing.assert_array_equal(obs["action_masks"], np.tile(obs["action_mask"], 2))
    with pytest.raises(ValueError, match="already has a key 'action_mask'"):
        ActionMasksObservation(gym.make("graphenv/SAR-v0", num_nodes=8), key="action_mask")


def test_tianshou_layout_and_refusals():
    env = TianshouMask(gym.make("graphenv/RGC-v0", num_nodes=8, action_mode="pair"))
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"obs", "mask"} and env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs["mask"], env.unwrapped.addable_pairs())
    assert set(obs["obs"]) == set(env.unwrapped.observation_space.spaces)
    od = TianshouMask(gym.make("graphenv/OD-v0", num_nodes=10))
    assert od.action_space == spaces.Discrete(10)
    od.reset(seed=0)
    obs, reward, *_ = od.step(4)
    assert isinstance(reward, float) and obs["mask"].all()
    with pytest.raises(ValueError, match="action_mode='pair'"):
        TianshouMask(gym.make("graphenv/RGC-v0", num_nodes=8))


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_arrays_of_the_old_multibinary_spaces_fit_the_new_boxes(env_id):
    """Data recorded under the MultiBinary spaces (before issue 35) is in the Box spaces."""
    space = gym.make(env_id, num_nodes=6).observation_space
    old = {"adjacency": spaces.MultiBinary((6, 6)), "action_mask": spaces.MultiBinary(6)}
    for key, old_space in old.items():
        old_space.seed(0)
        for _ in range(5):
            x = old_space.sample()
            assert x.dtype == space[key].dtype and space[key].contains(x), key
