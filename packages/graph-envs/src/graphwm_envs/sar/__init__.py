"""Search and Rescue (paper appendix "Environment Descriptions", Search and Rescue)."""

from graphwm_envs.sar.env import SAREnv
from graphwm_envs.sar.generator import SARGenerator
from graphwm_envs.sar.types import SARParams, SARState

__all__ = ["SAREnv", "SARGenerator", "SARParams", "SARState"]
