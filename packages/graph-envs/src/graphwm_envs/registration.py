"""Registration of the env ids with Gymnasium (idempotent)."""

from __future__ import annotations

import gymnasium as gym

# id -> entry point; an env whose module is missing is skipped (lets packages grow per issue).
_ENTRY_POINTS = {
    "graphenv/RGC-v0": "graphwm_envs.rgc.env:RGCEnv",
    "graphenv/OD-v0": "graphwm_envs.od.env:ODEnv",
    "graphenv/SAR-v0": "graphwm_envs.sar.env:SAREnv",
    "graphenv/CF-v0": "graphwm_envs.cf.env:CFEnv",
}

ENV_IDS: tuple[str, ...] = tuple(_ENTRY_POINTS)


def register_envs() -> None:
    """Register every env id in the ``graphenv`` namespace (safe to call repeatedly)."""
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, entry_point=entry_point, kwargs={"num_nodes": 20})
