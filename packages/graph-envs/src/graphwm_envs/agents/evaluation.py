"""The documented evaluation protocol of a trained agent (docs/agents.md, "Yardsticks").

Episode ``e`` starts from the real env's ``reset(seed=seed + e)``, ``e < episodes``: the initial
states that :func:`graphwm_envs.heuristics.evaluate_heuristic` gives the random and greedy
yardsticks with the same ``seed``, so agents and yardsticks are compared on the same episodes.
The agent acts deterministically (its most probable valid action) by default. The result is the
mean undiscounted return and its standard error (of the mean).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from graphwm_envs.heuristics import mean_and_standard_error

__all__ = ["agent_returns", "evaluate_agent"]


def agent_returns(
    model: Any,
    env_id: str,
    *,
    episodes: int = 100,
    seed: int = 0,
    deterministic: bool = True,
    **env_kwargs: Any,
) -> np.ndarray:
    """The (episodes,) undiscounted returns of ``model`` on ``reset(seed=seed + e)``.

    All episodes step in lockstep, each on its own unwrapped env, and the model acts on every
    running one in one batched ``model.predict(observations, action_masks=masks,
    deterministic=deterministic)`` call (``masks`` from each env's ``action_masks()``). With
    ``deterministic=True`` a batched call takes the actions one call per env would. With
    ``deterministic=False`` the actions are sampled from torch's global generator (seed it for
    a reproducible evaluation).

    Args:
        model: an SB3 / sb3-contrib model (e.g. from
            :func:`~graphwm_envs.agents.make_graph_agent` or
            :func:`~graphwm_envs.agents.load_graph_agent`), or anything with that ``predict``,
            bound to the env's N (``load_graph_agent`` rebinds a saved agent to any N).
        env_id: a registered id, e.g. ``"graphenv/SAR-v0"``.
        episodes: number of episodes (>= 1).
        seed: seed of the first episode.
        deterministic: the most probable valid action (the documented protocol) or a sample.
        **env_kwargs: passed to ``gymnasium.make`` (e.g. ``num_nodes=50``).
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    # the unwrapped graph envs (``action_masks`` is theirs, not ``gym.Env``'s)
    envs: list[Any] = [
        gym.make(env_id, disable_env_checker=True, **env_kwargs).unwrapped for _ in range(episodes)
    ]
    try:
        obs = [env.reset(seed=seed + e)[0] for e, env in enumerate(envs)]
        returns = [0.0] * episodes
        running = list(range(episodes))
        while running:
            batch = {k: np.stack([obs[i][k] for i in running]) for k in obs[running[0]]}
            masks = np.stack([envs[i].action_masks() for i in running])
            actions, _ = model.predict(batch, action_masks=masks, deterministic=deterministic)
            still = []
            for i, action in zip(running, actions, strict=True):
                obs[i], reward, terminated, truncated, _ = envs[i].step(action)
                returns[i] += float(reward)
                if not (terminated or truncated):
                    still.append(i)
            running = still
    finally:
        for env in envs:
            env.close()
    return np.asarray(returns, dtype=np.float64)


def evaluate_agent(model: Any, env_id: str, **options: Any) -> tuple[float, float]:
    """Mean undiscounted return of ``model`` and its **standard error** (``std(ddof=1) /
    sqrt(episodes)``, ``nan`` for one episode) over the episodes of :func:`agent_returns`.

    ``options`` are :func:`agent_returns`'s keywords: ``episodes=100``, ``seed=0``
    (episode e resets with ``seed + e``), ``deterministic=True`` (the documented protocol) and
    the env's constructor arguments (e.g. ``num_nodes=50``).
    """
    return mean_and_standard_error(agent_returns(model, env_id, **options))
