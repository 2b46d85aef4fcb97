"""The envs work with mainstream RL code as they are: SB3 PPO and sb3-contrib MaskablePPO with
``MultiInputPolicy`` on the unwrapped env learn across several episode ends (terminal
observations included) and ``predict`` works, with no observation wrapper."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

# small sizes: every env ends an episode several times within the training budget below
SIZES = {"graphenv/RGC-v0": 8, "graphenv/OD-v0": 6, "graphenv/SAR-v0": 8, "graphenv/CF-v0": 8}
TIMESTEPS = 192  # OD is truncated every 50 steps: 3 episode ends, the other envs many more


def _unwrapped(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, num_nodes=SIZES[env_id], **kwargs).unwrapped


def _train(algo, env: gym.Env):
    import torch
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)
    before = set(Path(tempfile.gettempdir()).glob("SB3-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = algo(
            "MultiInputPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu"
        )
        # a silent logger: SB3's default one leaves an empty /tmp/SB3-<time> folder per run
        model.set_logger(Logger(folder=None, output_formats=[]))
        model.learn(total_timesteps=TIMESTEPS)
    assert model.num_timesteps >= TIMESTEPS
    assert set(Path(tempfile.gettempdir()).glob("SB3-*")) <= before  # no stray log folders
    # SB3's Monitor logs one entry per finished episode: the terminal observations went through
    assert len(model.ep_info_buffer) >= 3
    return model


def test_sizes_cover_every_env():
    assert set(SIZES) == set(graphwm_envs.ENV_IDS)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_ppo_learns_across_episode_ends_and_predicts(env_id):
    from stable_baselines3 import PPO

    env = _unwrapped(env_id)
    model = _train(PPO, env)
    obs, _ = env.reset(seed=1)
    for deterministic in (True, False):
        action, _ = model.predict(obs, deterministic=deterministic)
        assert env.action_space.contains(
            np.asarray(action).astype(np.int64).reshape(env.action_space.shape)
        )
    env.step(action)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_maskable_ppo_learns_across_episode_ends_and_respects_the_mask(env_id):
    from sb3_contrib import MaskablePPO

    env = _unwrapped(env_id)
    model = _train(MaskablePPO, env)
    n = env.num_nodes
    obs, _ = env.reset(seed=2)
    for _ in range(30):
        masks = env.action_masks()
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        nodes = np.atleast_1d(action)
        assert all(masks[c * n + int(v)] for c, v in enumerate(nodes))  # each component masked
        obs, _, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"]
        if terminated or truncated:
            obs, _ = env.reset()


def test_maskable_ppo_pair_mode_only_adds_edges():
    """RGC pair mode: the masks are exact, so a masked policy never picks a no-op."""
    from sb3_contrib import MaskablePPO

    env = _unwrapped("graphenv/RGC-v0", action_mode="pair")
    model = _train(MaskablePPO, env)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            assert info["edge_added"] and not info["invalid_action"]
            done = terminated or truncated
        assert obs["graph_continuous"][0] == 0.0  # the budget is spent, never wasted
