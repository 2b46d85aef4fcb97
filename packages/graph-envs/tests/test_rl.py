"""The observation contract trains with real RL code: MaskablePPO on SAR, PPO on RGC."""

from __future__ import annotations

import warnings

import graph_envs  # noqa: F401
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("sb3_contrib")


def test_maskable_ppo_on_sar_trains_and_respects_the_mask():
    import torch
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    torch.set_num_threads(1)
    env = gym.make("graphenv/SAR-v0", num_nodes=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MaskablePPO(
            "MultiInputPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu"
        )
        model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    vec = model.get_env()
    obs = vec.reset()
    for _ in range(40):
        masks = get_action_masks(vec)
        np.testing.assert_array_equal(masks[0], obs["action_mask"][0].astype(bool))
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert masks[0, action[0]]  # the masked policy only picks neighbours
        obs, _, _, infos = vec.step(action)
        assert not infos[0]["invalid_action"]


def test_ppo_multi_input_policy_on_rgc():
    """PPO trains on RGC's observation, zero-width node feature arrays included.

    SB3's ``predict``/``obs_to_tensor`` cannot reshape a zero-size array to ``(-1, N, 0)``, so
    acting goes through the policy's forward pass; dropping the zero-width keys with
    ``gymnasium.wrappers.FilterObservation`` makes ``predict`` work as usual.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import obs_as_tensor

    torch.set_num_threads(1)
    env = gym.make("graphenv/RGC-v0", num_nodes=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PPO("MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0)
        model.learn(total_timesteps=64)
    assert model.num_timesteps >= 64
    obs, _ = env.reset(seed=0)
    with torch.no_grad():
        actions, values, _ = model.policy(
            obs_as_tensor({k: v[None] for k, v in obs.items()}, "cpu")
        )
    assert actions.shape == (1, 2) and torch.isfinite(values).all()
    assert env.action_space.contains(actions[0].numpy().astype(np.int64))

    keys = [k for k, space in env.observation_space.spaces.items() if np.prod(space.shape) > 0]
    filtered = gym.wrappers.FilterObservation(gym.make("graphenv/RGC-v0", num_nodes=8), keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PPO("MultiInputPolicy", filtered, n_steps=32, batch_size=32, n_epochs=1, seed=0)
        model.learn(total_timesteps=32)
    obs, _ = filtered.reset(seed=0)
    action, _ = model.predict(obs)
    assert filtered.action_space.contains(action)


def test_maskable_ppo_multidiscrete_mask_on_rgc():
    """MaskablePPO accepts RGC's (2N,) ``action_masks()`` and never picks a masked node."""
    import networkx as nx
    import torch
    from graph_envs.rgc.env import edge_budget
    from graph_envs.rgc.types import RGCState
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.utils import obs_as_tensor

    torch.set_num_threads(1)
    env = gym.make("graphenv/RGC-v0", num_nodes=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MaskablePPO(
            "MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu"
        )
        model.learn(total_timesteps=32)
    assert model.num_timesteps >= 32
    rgc = env.unwrapped
    rgc.reset(seed=0)
    star = nx.to_numpy_array(nx.star_graph(7), dtype=np.int8)  # hub 0 has full degree
    rgc._state = RGCState(
        adjacency=star,
        degrees=star.sum(axis=1, dtype=np.int64),
        budget=edge_budget(8),
        edges_added=0,
        robustness=rgc.robustness(star),
    )
    masks = rgc.action_masks()
    assert masks.shape == (16,) and not masks[0] and not masks[8] and masks[1:8].all()
    obs = obs_as_tensor({k: v[None] for k, v in rgc._observation().items()}, "cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        actions = torch.cat([model.policy(obs, action_masks=masks[None])[0] for _ in range(100)])
    assert actions.shape == (100, 2) and not (actions == 0).any()
