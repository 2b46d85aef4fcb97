"""Robust Graph Construction (paper appendix "Environment Descriptions", RGC)."""

from graphwm_envs.rgc.env import RGCEnv
from graphwm_envs.rgc.generator import RGCGenerator
from graphwm_envs.rgc.robustness import targeted_robustness
from graphwm_envs.rgc.types import RGCParams, RGCState

__all__ = ["RGCEnv", "RGCGenerator", "RGCParams", "RGCState", "targeted_robustness"]
