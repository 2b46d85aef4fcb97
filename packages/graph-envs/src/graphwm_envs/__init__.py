"""Gymnasium environments with evolving graph topology from "Beyond Static Graph World Models".

Importing this package registers the env ids in the ``graphenv`` namespace::

    import gymnasium as gym
    import graphwm_envs  # noqa: F401  (registers graphenv/*)

    env = gym.make("graphenv/SAR-v0", num_nodes=20)

or, without an explicit import, ``gym.make("graphwm_envs:graphenv/SAR-v0")``.

An env of your own: :func:`register_graph_env` registers it for every consumer and
:func:`check_graph_env` names the part of the contract it breaks (docs/own-env.md).
"""

from graphwm_envs.check import GraphEnvContractError, check_graph_env
from graphwm_envs.core import EnvSnapshot, FeatureSchema, GraphEnv
from graphwm_envs.registration import (
    ENV_IDS,
    GraphEnvInfo,
    env_class,
    graph_env_info,
    register_envs,
    register_graph_env,
    resolve_env_id,
)

register_envs()

__version__ = "0.1.0"

__all__ = [
    "ENV_IDS",
    "EnvSnapshot",
    "FeatureSchema",
    "GraphEnv",
    "GraphEnvContractError",
    "GraphEnvInfo",
    "check_graph_env",
    "env_class",
    "graph_env_info",
    "register_envs",
    "register_graph_env",
    "resolve_env_id",
]
