"""Registration of the env ids with Gymnasium (idempotent)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import gymnasium as gym

if TYPE_CHECKING:
    from graphwm_envs.core.base import GraphEnv

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


def env_class(env_id: str) -> type[GraphEnv]:
    """The env class of a registered id, imported but not built: its class-level information
    (``feature_schema(params)``, ``max_nodes``) needs no env.

    Raises:
        ValueError: for an id this package does not register.
    """
    try:
        entry_point = _ENTRY_POINTS[env_id]
    except KeyError:
        raise ValueError(f"unknown env id {env_id!r}; known: {list(ENV_IDS)}") from None
    module, _, name = entry_point.partition(":")
    cls: type[GraphEnv] = getattr(importlib.import_module(module), name)
    return cls
