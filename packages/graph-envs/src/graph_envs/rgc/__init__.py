"""Robust Graph Construction (paper appendix "Environment Descriptions", RGC)."""

from graph_envs.rgc.env import RGCEnv
from graph_envs.rgc.generator import RGCGenerator
from graph_envs.rgc.robustness import targeted_robustness
from graph_envs.rgc.types import RGCParams, RGCState

__all__ = ["RGCEnv", "RGCGenerator", "RGCParams", "RGCState", "targeted_robustness"]
