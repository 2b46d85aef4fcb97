"""Search and Rescue (paper appendix "Environment Descriptions", Search and Rescue)."""

from graph_envs.sar.env import SAREnv
from graph_envs.sar.types import SARState

__all__ = ["SAREnv", "SARState"]
