"""Env names of the experiments, and env construction.

A preset names an env by the paper's short name (``"SAR"``) or by any Gymnasium id of a graph
env: ``"mypkg/MyEnv-v0"``, or Gymnasium's ``"mypkg.envs:mypkg/MyEnv-v0"`` form, which imports
``mypkg.envs`` (the module that registers the id) first. Every function here resolves the name
in the process that calls it, so a worker process or a Ray task imports the registering module
itself (jobs carry the name as written). What is read without building an env (schema, size
range, model hyperparameters) comes from :func:`graphwm_envs.graph_env_info`, the one registration
point (docs/own-env.md). An env is driven only through the graph env protocol
(:func:`graphwm_envs.check_graph_env`), so any env that satisfies it works, not only
``GraphEnv`` subclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from graphwm_envs import GraphEnv

#: the paper's envs by short name
ENV_IDS = {
    "RGC": "graphenv/RGC-v0",
    "OD": "graphenv/OD-v0",
    "SAR": "graphenv/SAR-v0",
    "CF": "graphenv/CF-v0",
}


def is_paper_env(name: str) -> bool:
    """Whether ``name`` is one of the paper's short env names."""
    return name in ENV_IDS


def env_id(name: str) -> str:
    """Gymnasium id of an env name: ``"SAR"`` -> ``"graphenv/SAR-v0"``; any other name is a
    Gymnasium id (``"module:id"`` imports ``module`` first) and must be registered.

    Raises:
        ValueError: naming the env and why it is unknown.
    """
    if name in ENV_IDS:
        return ENV_IDS[name]
    import graphwm_envs

    try:
        return graphwm_envs.resolve_env_id(name)
    except ValueError as err:
        raise ValueError(
            f"unknown env {name!r}; choose from {sorted(ENV_IDS)} or a registered Gymnasium "
            f"id of a graph env ({err})"
        ) from None


def preset_key(name: str) -> str:
    """The env's key in ``gdm_models``' presets: the short name, else the Gymnasium id."""
    return name if name in ENV_IDS else env_id(name)


def _require_protocol(env: Any, name: str) -> None:
    from graphwm_envs.check import PROTOCOL_MEMBERS

    missing = [m for m in PROTOCOL_MEMBERS if not hasattr(env, m)]
    if missing:
        raise TypeError(
            f"env {name!r} ({type(env).__name__}) lacks {missing} of the graph env protocol "
            "(graphwm_envs.check_graph_env names every part; docs/own-env.md)"
        )


def make_env(name: str, num_nodes: int, **kwargs: Any) -> GraphEnv:
    """``gym.make`` of an env name, returning the unwrapped env.

    The experiments drive the env through clone/restore and never rely on wrapper behaviour
    (the envs handle their own truncation), so the unwrapped env is returned. It must have
    the graph env protocol's members (``TypeError`` otherwise).
    """
    import graphwm_envs  # noqa: F401  (registers graphenv/*)

    gid = env_id(name)
    env = gym.make(gid, num_nodes=num_nodes, disable_env_checker=True, **kwargs).unwrapped
    _require_protocol(env, name)
    return env  # type: ignore[return-value]


def check_own_env(name: str, num_nodes: int) -> None:
    """Build env ``name`` at ``num_nodes`` and run :func:`graphwm_envs.check_graph_env` on it
    (a short seeded episode): what a preset's envs that are not the paper's pass before any
    work, so that nothing of an env that breaks the contract is stored or scored.

    Raises:
        ValueError: naming the env and the first problem (a broken contract part, or any
            exception its constructor, ``reset`` or ``step`` raised).
    """
    from graphwm_envs import GraphEnvContractError, check_graph_env

    try:
        env = make_env(name, num_nodes)
    except Exception as err:  # a user's constructor may raise anything
        raise ValueError(
            f"env {name!r} cannot be built at N = {num_nodes}: {type(err).__name__}: {err}"
        ) from None
    try:
        check_graph_env(env)
    except GraphEnvContractError as err:
        raise ValueError(
            f"env {name!r} breaks the graph env contract at N = {num_nodes} ({err}; "
            "docs/contract.md)"
        ) from None
    except Exception as err:  # its reset or step raised: name it before any work
        raise ValueError(
            f"env {name!r} fails at N = {num_nodes}: {type(err).__name__}: {err}"
        ) from None
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def graph_env(env: gym.Env) -> GraphEnv:
    """``env.unwrapped`` if it has the graph env protocol's members (``TypeError`` else)."""
    real = env.unwrapped
    _require_protocol(real, type(real).__name__)
    return real  # type: ignore[return-value]


def schema_of(env: Any) -> dict[str, Any]:
    """The plain schema dict of an env instance (``env.unwrapped.schema``: an object with
    ``to_dict()``, or the dict itself)."""
    raw = env.unwrapped.schema
    return dict(raw.to_dict() if hasattr(raw, "to_dict") else raw)


def env_class(name: str) -> type[GraphEnv]:
    """The env class of an env name, not built: its size limit (``max_nodes``) and, for a
    ``GraphEnv`` subclass, its feature schema are class-level."""
    from graphwm_envs import env_class as registered_class

    return registered_class(env_id(name))


def env_schema(name: str) -> dict:
    """The plain schema dict of an env with its default parameters (the declared one, else
    read from the class; docs/own-env.md)."""
    if name in ENV_IDS:
        return env_class(name).feature_schema().to_dict()
    from graphwm_envs import graph_env_info

    env_id(name)  # an unknown name: the message above
    return graph_env_info(name).schema


def env_limits(name: str) -> tuple[int, int]:
    """``(min N, max N)`` the env accepts (no env is built)."""
    from graphwm_envs import graph_env_info

    env_id(name)
    info = graph_env_info(ENV_IDS.get(name, name))
    return info.min_nodes, info.max_nodes


def model_hyperparameters(model: str, name: str) -> dict[str, Any]:
    """The hyperparameters of ``model`` on an env: the paper's, else the defaults for an env
    the paper did not tune (``gdm_models.default_hyperparameters``), unless some were registered
    with ``gdm_models.register_hyperparameters`` under the env's Gymnasium id in this process."""
    from gdm_models import get_hyperparameters

    if name in ENV_IDS:
        return get_hyperparameters(model, name)
    return get_hyperparameters(model, preset_key(name), schema=env_schema(name))


def resolved_configs(
    model: str,
    env: str,
    model_overrides: Mapping[str, Any] | None = None,
    train_overrides: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model_config, trainer)`` of ``model`` on ``env``: :func:`model_hyperparameters`'s
    ``"model"`` and ``"train"`` tables under the overrides (the one place a training job's
    hyperparameters are resolved: the jobs and the preset checks read them alike)."""
    values = model_hyperparameters(model, env)
    return (
        {**values["model"], **(model_overrides or {})},
        {**values["train"], **(train_overrides or {})},
    )


def sample_valid_action(env: Any, obs: dict[str, np.ndarray], rng: np.random.Generator) -> Any:
    """The paper's random policy: the env's ``sample_valid_action(rng)`` where it has one,
    else k distinct nodes drawn uniformly from ``obs["action_mask"]`` (k = 1 for
    ``Discrete(N)``, the same rule as ``GraphEnv.sample_valid_action``)."""
    own = getattr(env, "sample_valid_action", None)
    if callable(own):
        return own(rng)
    space = env.action_space
    valid = np.flatnonzero(np.asarray(obs["action_mask"]))
    k = 1 if isinstance(space, gym.spaces.Discrete) else len(space.nvec)
    if len(valid) >= k:
        chosen = rng.choice(valid, size=k, replace=False)
    else:
        chosen = rng.integers(0, int(env.num_nodes), size=k)
    if isinstance(space, gym.spaces.Discrete):
        return int(chosen[0])
    return chosen.astype(np.int64)
