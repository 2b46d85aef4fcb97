"""Short env names used throughout the experiments, and env construction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym

if TYPE_CHECKING:
    from graphwm_envs import GraphEnv

ENV_IDS = {
    "RGC": "graphenv/RGC-v0",
    "OD": "graphenv/OD-v0",
    "SAR": "graphenv/SAR-v0",
    "CF": "graphenv/CF-v0",
}


def env_id(name: str) -> str:
    """Gymnasium id of a short env name (``"SAR"`` -> ``"graphenv/SAR-v0"``)."""
    try:
        return ENV_IDS[name]
    except KeyError:
        raise ValueError(f"unknown env {name!r}; choose from {sorted(ENV_IDS)}") from None


def make_env(name: str, num_nodes: int, **kwargs: Any) -> GraphEnv:
    """``gym.make`` of a short env name, returning the unwrapped env.

    The experiments drive the env through clone/restore and never rely on wrapper behaviour
    (the envs handle their own truncation), so the unwrapped env is returned.
    """
    from graphwm_envs import GraphEnv  # importing graphwm_envs registers graphenv/*

    env = gym.make(env_id(name), num_nodes=num_nodes, disable_env_checker=True, **kwargs).unwrapped
    if not isinstance(env, GraphEnv):
        raise TypeError(f"{env_id(name)} made a {type(env).__name__}, not a graphwm_envs.GraphEnv")
    return env


def graph_env(env: gym.Env) -> GraphEnv:
    """``env.unwrapped`` as a :class:`graphwm_envs.GraphEnv` (``TypeError`` for any other env)."""
    from graphwm_envs import GraphEnv

    real = env.unwrapped
    if not isinstance(real, GraphEnv):
        raise TypeError(f"expected a graphwm_envs.GraphEnv, got {type(real).__name__}")
    return real


def env_class(name: str) -> type[GraphEnv]:
    """The env class of a short env name, not built: its feature schema
    (``feature_schema(params)``) and size limit (``max_nodes``) are class-level."""
    from graphwm_envs import env_class as registered_class

    return registered_class(env_id(name))


def env_schema(name: str) -> dict:
    """The plain schema dict of an env with its default parameters (read from the class)."""
    return env_class(name).feature_schema().to_dict()
