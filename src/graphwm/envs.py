"""Short env names used throughout the experiments, and env construction."""

from __future__ import annotations

import gymnasium as gym

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


def make_env(name: str, num_nodes: int, **kwargs) -> gym.Env:
    """``gym.make`` of a short env name, returning the unwrapped env.

    The experiments drive the env through clone/restore and never rely on wrapper behaviour
    (the envs handle their own truncation), so the unwrapped env is returned.
    """
    import graphwm_envs  # noqa: F401  (registers graphenv/*)

    return gym.make(env_id(name), num_nodes=num_nodes, disable_env_checker=True, **kwargs).unwrapped


def env_schema(name: str) -> dict:
    """The plain schema dict of an env."""
    env = make_env(name, 5)
    return env.schema.to_dict()
