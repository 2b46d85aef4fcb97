"""Cascading Failures (``graphenv/CF-v0``): load-driven stochastic cascades on SHK power grids."""

from graphwm_envs.cf.env import CFEnv
from graphwm_envs.cf.generator import CFGenerator
from graphwm_envs.cf.loads import betweenness_load, pair_count, update_loads
from graphwm_envs.cf.shk import SHKGraph, SHKParams, shk_graph
from graphwm_envs.cf.types import CFParams, CFState

__all__ = [
    "CFEnv",
    "CFGenerator",
    "CFParams",
    "CFState",
    "SHKGraph",
    "SHKParams",
    "betweenness_load",
    "pair_count",
    "shk_graph",
    "update_loads",
]
