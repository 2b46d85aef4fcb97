"""Graph envs that are not the paper's four: what a user writes (docs/own-env.md).

Importing this package registers ``example/Spread-v0`` (a ``GraphEnv`` subclass, with
:func:`graphwm_envs.register_graph_env`) and ``example/EdgeFlip-v0`` (a plain
``gymnasium.Env`` written from docs/contract.md alone, with Gymnasium's own ``register``).
"""

import gymnasium as gym
from graphwm_envs import register_graph_env

register_graph_env("example/Spread-v0", "example_envs.spread:SpreadEnv")
if "example/EdgeFlip-v0" not in gym.registry:
    gym.register("example/EdgeFlip-v0", "example_envs.edgeflip:EdgeFlipEnv")
