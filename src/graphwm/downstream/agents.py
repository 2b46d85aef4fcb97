"""Agent training: sb3-contrib's MaskablePPO with the graph or the MLP policy, on parallel
dream envs or real envs. A trained agent is evaluated in the real env the documented way,
:func:`graphwm_envs.agents.evaluate_agent` (deterministic actions; episode e resets with
``seed + e``, the convention of ``graphwm_envs.heuristics.evaluate_heuristic``, so every agent
and yardstick meets the same initial states; mean return and its standard error)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphwm.downstream.section import (
    DEFAULT_PPO,
    GRAPH,
    GRAPH_HIDDEN_DIM,
    GRAPH_NUM_LAYERS,
    POLICIES,
)
from graphwm.envs import make_env


def dream_vec_env(model, env_name: str, num_nodes: int, num_envs: int, seed: int):
    """``num_envs`` imagined episodes of ``model`` as an SB3 ``VecEnv`` (one batched model
    forward pass per step for all of them; episode i starts from the real ``reset(seed + i)``
    once the agent seeds it)."""
    from gymnasium.vector import AutoresetMode

    from graphwm.dream import DreamVectorEnv
    from graphwm.dream.sb3_vec_env import DreamSB3VecEnv

    real = make_env(env_name, num_nodes)
    same_step = AutoresetMode.SAME_STEP  # SB3's own autoreset convention
    dream = DreamVectorEnv(model, real, _count(num_envs), seed=seed, autoreset_mode=same_step)
    return DreamSB3VecEnv(dream)


def real_vec_env(env_name: str, num_nodes: int, num_envs: int):
    """``num_envs`` real envs in SB3's ``DummyVecEnv`` (the real-env agent's counterpart of
    :func:`dream_vec_env`, so both spend the same budget the same way)."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: make_env(env_name, num_nodes) for _ in range(_count(num_envs))])


def _count(num_envs: int) -> int:
    if int(num_envs) < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return int(num_envs)


def train_agent(
    env,
    budget: int,
    seed: int,
    ppo_kwargs: Mapping[str, Any] | None = None,
    policy: str = GRAPH,
    *,
    policy_hidden_dim: int = GRAPH_HIDDEN_DIM,
    policy_num_layers: int = GRAPH_NUM_LAYERS,
    tensorboard_dir: str | Path | None = None,
):
    """MaskablePPO (CPU) trained for ``budget`` env steps on ``env`` (a Gymnasium env or an
    SB3 ``VecEnv``; the budget counts the steps of all its envs, rounded up to whole rollouts).

    ``policy``: ``"graph"`` (``graphwm_envs.agents.MaskableGraphPolicy`` with node embedding
    width ``policy_hidden_dim`` and ``policy_num_layers`` message-passing layers) or ``"mlp"``
    (SB3's ``MultiInputPolicy``; the two network settings must then keep their defaults).
    ``n_steps`` is the rollout length per env (SB3's meaning), capped so that one rollout of
    all envs does not exceed the budget. ``tensorboard_dir``: SB3's training scalars
    (``rollout/ep_rew_mean``, ``train/loss``, ...) as TensorBoard event files there (needs the
    ``tensorboard`` package); else the agent logs nothing.
    """
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger, configure

    if int(budget) < 1:
        raise ValueError(f"budget must be >= 1 env step, got {budget}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    net = {"hidden_dim": int(policy_hidden_dim), "num_layers": int(policy_num_layers)}
    if net["hidden_dim"] < 1 or net["num_layers"] < 0:
        raise ValueError(
            f"policy_hidden_dim must be >= 1 and policy_num_layers >= 0, got {policy_hidden_dim} "
            f"and {policy_num_layers}"
        )
    defaults = (GRAPH_HIDDEN_DIM, GRAPH_NUM_LAYERS)
    if policy != GRAPH and (net["hidden_dim"], net["num_layers"]) != defaults:
        raise ValueError(
            f"policy_hidden_dim / policy_num_layers set the graph policy's network, but policy "
            f"is {policy!r}"
        )
    num_envs = int(getattr(env, "num_envs", 1))
    kwargs = {**DEFAULT_PPO, **(ppo_kwargs or {})}
    kwargs["n_steps"] = min(int(kwargs["n_steps"]), math.ceil(int(budget) / num_envs))
    kwargs["batch_size"] = min(int(kwargs["batch_size"]), kwargs["n_steps"] * num_envs)
    kwargs.update(seed=seed, device="cpu", verbose=0)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3's notes on (N, F) observation shapes
        if policy == GRAPH:
            from graphwm_envs.agents import make_graph_agent

            agent = make_graph_agent(env, algo="MaskablePPO", policy_kwargs=net, **kwargs)
        else:
            agent = MaskablePPO("MultiInputPolicy", env, **kwargs)
        # a silent logger: SB3's default one makes an empty /tmp/SB3-<time> folder per agent
        if tensorboard_dir is None:
            agent.set_logger(Logger(folder=None, output_formats=[]))
        else:
            agent.set_logger(configure(str(tensorboard_dir), ["tensorboard"]))
        agent.learn(total_timesteps=int(budget))
    return agent
