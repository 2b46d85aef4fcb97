"""Creating, saving and loading graph agents at any number of nodes."""

from __future__ import annotations

import io
import pathlib
import zipfile
from typing import Any

import gymnasium as gym


def make_graph_agent(env: Any, *, algo: str = "MaskablePPO", **kwargs: Any) -> Any:
    """A ``MaskablePPO`` (default) or ``PPO`` model with the graph policy on ``env``.

    ``kwargs`` go to the algorithm (``policy_kwargs`` may set ``hidden_dim``, ``num_layers``,
    ``conv``); the policy is :class:`MaskableGraphPolicy` / :class:`GraphPolicy`.
    """
    from graphwm_envs.agents.policies import GraphPolicy, MaskableGraphPolicy

    if algo == "MaskablePPO":
        from sb3_contrib import MaskablePPO

        return MaskablePPO(MaskableGraphPolicy, env, **kwargs)
    if algo == "PPO":
        from stable_baselines3 import PPO

        return PPO(GraphPolicy, env, **kwargs)
    raise ValueError(f"algo must be 'MaskablePPO' or 'PPO', got {algo!r}")


def _algo_class(path: str | pathlib.Path | io.BufferedIOBase) -> Any:
    """MaskablePPO or PPO, from the policy class recorded in a saved model."""
    import json

    if isinstance(path, io.BufferedIOBase):
        raise TypeError("pass a file path; the algorithm is read from the archive first")
    path = pathlib.Path(path)
    if not path.exists() and path.with_suffix(".zip").exists():
        path = path.with_suffix(".zip")
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data").decode())
    # SB3 records the policy class's own methods by qualified name (no unpickling needed);
    # forward is defined by each graph policy class itself (__init__ is the shared mixin's)
    forward = str(data.get("policy_class", {}).get("forward", ""))
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    if "MaskableGraphPolicy." in forward:
        return MaskablePPO
    if "GraphPolicy." in forward:
        return PPO
    raise ValueError(f"{path} does not hold a graph agent (policy forward {forward!r})")


def load_graph_agent(path: str | pathlib.Path, env: gym.Env | Any, **kwargs: Any) -> Any:
    """Load a saved graph agent onto ``env``, which may have a different number of nodes.

    The network's weights do not depend on N (see :mod:`graphwm_envs.agents.network`), so
    the model is rebuilt with ``env``'s observation and action spaces and the saved weights
    are loaded into it: a policy trained at N = 20 acts at N = 50. ``env`` must be the same
    env kind (same features and action layout). ``kwargs`` go to the algorithm's ``load``
    (e.g. ``device``).
    """
    algo = _algo_class(path)
    custom = dict(kwargs.pop("custom_objects", {}) or {})
    custom.update(observation_space=env.observation_space, action_space=env.action_space)
    return algo.load(path, env=env, custom_objects=custom, **kwargs)
