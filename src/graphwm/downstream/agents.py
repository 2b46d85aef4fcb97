"""Agent training (sb3-contrib's MaskablePPO, in a dream env or the real env) and real-env
evaluation: mean undiscounted return +- its standard error over seeded episodes (episode e
resets with ``seed + e``, the convention of ``graphwm_envs.policies.evaluate_policy``, so every
agent and yardstick meets the same initial states)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from graphwm.downstream.config import DEFAULT_PPO
from graphwm.envs import make_env


def train_agent(env, budget: int, seed: int, ppo_kwargs: Mapping[str, Any] | None = None):
    """MaskablePPO (``MultiInputPolicy``, CPU) trained for ``budget`` env steps on ``env``."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    if int(budget) < 1:
        raise ValueError(f"budget must be >= 1 env step, got {budget}")
    kwargs = {**DEFAULT_PPO, **(ppo_kwargs or {})}
    kwargs["n_steps"] = min(int(kwargs["n_steps"]), int(budget))
    kwargs["batch_size"] = min(int(kwargs["batch_size"]), kwargs["n_steps"])
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3's notes on (N, F) observation shapes
        agent = MaskablePPO("MultiInputPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
        # a silent logger: SB3's default one makes an empty /tmp/SB3-<time> folder per agent
        agent.set_logger(Logger(folder=None, output_formats=[]))
        agent.learn(total_timesteps=int(budget))
    return agent


def evaluate_agent(
    agent,
    env_name: str,
    num_nodes: int,
    *,
    episodes: int = 100,
    seed: int = 0,
    deterministic: bool = False,
) -> tuple[float, float]:
    """Mean real-env return of a MaskablePPO agent and its standard error.

    Episode e starts from ``reset(seed=seed + e)``. Actions are sampled from the masked policy
    (the stochastic policy PPO optimises; torch's generator is seeded with ``seed``, so the
    evaluation is reproducible); ``deterministic=True`` takes its most probable valid action
    instead, which can be far worse where repeating one choice is poor (e.g. OD).
    """
    import torch

    if int(episodes) < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    env = make_env(env_name, num_nodes)
    returns = np.empty(int(episodes))
    torch.manual_seed(seed)
    for e in range(int(episodes)):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            action, _ = agent.predict(
                obs, action_masks=env.action_masks(), deterministic=deterministic
            )
            obs, reward, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.int64))
            total += float(reward)
            done = terminated or truncated
        returns[e] = total
    return _mean_se(returns)


def _mean_se(returns: np.ndarray) -> tuple[float, float]:
    n = len(returns)
    se = float(returns.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return float(returns.mean()), se
