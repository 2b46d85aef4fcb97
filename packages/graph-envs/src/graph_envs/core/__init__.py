"""Shared machinery of the graph envs: schema, spaces, base env, rendering, graph helpers."""

from graph_envs.core.base import EnvSnapshot, GraphEnv
from graph_envs.core.schema import FeatureSchema
from graph_envs.core.spaces import build_observation_space

__all__ = ["EnvSnapshot", "FeatureSchema", "GraphEnv", "build_observation_space"]
