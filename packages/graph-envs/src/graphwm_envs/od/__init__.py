"""Opinion Dynamics (``graphenv/OD-v0``): Holme-Newman co-evolving opinions and topology."""

from graphwm_envs.od.env import ODEnv
from graphwm_envs.od.generator import ODGenerator
from graphwm_envs.od.types import ODParams, ODState

__all__ = ["ODEnv", "ODGenerator", "ODParams", "ODState"]
