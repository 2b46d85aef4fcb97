"""Search and Rescue (paper appendix "Environment Descriptions", Search and Rescue)."""

from graph_envs.sar.env import SAREnv
from graph_envs.sar.generator import SARGenerator
from graph_envs.sar.types import SARParams, SARState

__all__ = ["SAREnv", "SARGenerator", "SARParams", "SARState"]
