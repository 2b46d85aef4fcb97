"""Gymnasium environments with evolving graph topology from "Beyond Static Graph World Models".

Importing this package registers the env ids in the ``graphenv`` namespace::

    import gymnasium as gym
    import graphwm_envs  # noqa: F401  (registers graphenv/*)

    env = gym.make("graphenv/SAR-v0", num_nodes=20)

or, without an explicit import, ``gym.make("graphwm_envs:graphenv/SAR-v0")``.
"""

from graphwm_envs.core import EnvSnapshot, FeatureSchema, GraphEnv
from graphwm_envs.registration import ENV_IDS, env_class, register_envs

register_envs()

__version__ = "0.1.0"

__all__ = [
    "ENV_IDS",
    "EnvSnapshot",
    "FeatureSchema",
    "GraphEnv",
    "env_class",
    "register_envs",
]
