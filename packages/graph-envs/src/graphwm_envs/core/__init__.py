"""Shared machinery of the graph envs: schema, spaces, base env, rendering, graph helpers."""

from graphwm_envs.core.base import EnvSnapshot, GraphEnv
from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.core.spaces import build_observation_space

__all__ = ["EnvSnapshot", "FeatureSchema", "GraphEnv", "build_observation_space"]
