"""Registration of graph envs with Gymnasium, and what every consumer reads of a graph env id.

The four paper envs are registered on import (``graphenv/*``). An env of your own is
registered once with :func:`register_graph_env` (Gymnasium's registry plus the declared facts
the pipeline needs without building an env: the feature schema and the size range); a plain
``gymnasium.register`` works too, and its facts are then read from the class (or, for a schema
the class does not declare, from one env built at the smallest size). :func:`graph_env_info`
gives the facts of any id; ids may use Gymnasium's ``"module:id"`` form, which imports
``module`` (the module that registers the id) first, in whatever process reads it (a worker
process, a Ray task). docs/own-env.md walks through it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

if TYPE_CHECKING:
    from graphwm_envs.core.base import GraphEnv

# id -> entry point; an env whose module is missing is skipped (lets packages grow per issue).
_ENTRY_POINTS = {
    "graphenv/RGC-v0": "graphwm_envs.rgc.env:RGCEnv",
    "graphenv/OD-v0": "graphwm_envs.od.env:ODEnv",
    "graphenv/SAR-v0": "graphwm_envs.sar.env:SAREnv",
    "graphenv/CF-v0": "graphwm_envs.cf.env:CFEnv",
}

ENV_IDS: tuple[str, ...] = tuple(_ENTRY_POINTS)

#: the smallest and largest N of an env that declares none (``GraphEnv``'s own defaults)
DEFAULT_MIN_NODES = 5
DEFAULT_MAX_NODES = 5000


@dataclass(frozen=True)
class GraphEnvDecl:
    """What :func:`register_graph_env` declared beyond Gymnasium's spec (``None``: read from
    the env class)."""

    schema: dict[str, Any] | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None


#: id -> declaration, filled by :func:`register_graph_env`
_DECLARED: dict[str, GraphEnvDecl] = {}


@dataclass(frozen=True)
class GraphEnvInfo:
    """The facts of a graph env id that the pipeline reads without stepping an env.

    Attributes:
        env_id: the Gymnasium id (without a ``module:`` prefix).
        env_class: the class its entry point names (``None`` for a factory function).
        schema: the plain schema dict (docs/contract.md, "Schema").
        min_nodes: smallest accepted N.
        max_nodes: largest accepted N.
    """

    env_id: str
    env_class: type | None
    schema: dict[str, Any]
    min_nodes: int
    max_nodes: int


class VectorEntryPoint:
    """The ``vector_entry_point`` of a graph env id: ``gym.make_vec(id, num_envs=k)`` (the
    default vectorization mode) refuses a ``num_envs`` that is not an integer >= 1 by name,
    then builds what Gymnasium's ``"sync"`` mode builds: a ``SyncVectorEnv`` of ``k`` envs.
    ``SyncVectorEnv``'s own arguments (``autoreset_mode``, ``copy``, ``observation_mode``) may
    be given as keyword arguments; Gymnasium passes ``wrappers=`` and ``vector_kwargs=`` only
    with ``vectorization_mode="sync"`` (its rule for any id with a vector entry point)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, num_envs: Any = 1, **kwargs: Any) -> gym.vector.VectorEnv:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(
                f"gym.make_vec({self.env_id!r}): num_envs must be an integer >= 1, got {num_envs!r}"
            )
        vector = {k: kwargs.pop(k) for k in _SYNC_VECTOR_ARGS if k in kwargs}
        env_id = self.env_id
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id, **kwargs) for _ in range(num_envs)], **vector
        )


#: ``SyncVectorEnv``'s keyword arguments (not the env's)
_SYNC_VECTOR_ARGS = ("autoreset_mode", "copy", "observation_mode")


class SizedEntryPoint:
    """The Gymnasium entry point of an id registered with :func:`register_graph_env`: refuses
    a ``num_nodes`` outside the declared range by name (``gym.make`` enforces the range every
    consumer reads from :func:`graph_env_info`), then calls the registered entry point."""

    def __init__(self, env_id: str, entry_point: str | Callable[..., gym.Env]) -> None:
        self.env_id = env_id
        self.entry_point = entry_point

    def __call__(self, **kwargs: Any) -> gym.Env:
        n = kwargs.get("num_nodes")
        low, high = _size_range(self.env_id, _entry_class(self.entry_point))
        if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high:
            raise ValueError(
                f"env {self.env_id!r}: num_nodes must be an integer in [{low}, {high}] (its "
                f"declared range), got {n!r}"
            )
        make = self.entry_point
        if isinstance(make, str):
            module, _, attr = make.partition(":")
            make = getattr(importlib.import_module(module), attr)
        return make(**kwargs)


def register_envs() -> None:
    """Register every env id in the ``graphenv`` namespace (safe to call repeatedly)."""
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=entry_point,
            vector_entry_point=VectorEntryPoint(env_id),
            kwargs={"num_nodes": 20},
        )


def register_graph_env(
    env_id: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    schema: Mapping[str, Any] | Any | None = None,
    min_nodes: int | None = None,
    max_nodes: int | None = None,
    kwargs: Mapping[str, Any] | None = None,
    **gym_kwargs: Any,
) -> None:
    """Register a graph env of your own: the one place every consumer (gym.make, graphwm's
    presets, workers, model hyperparameters, the metric, dream envs) reads it from.

    Args:
        env_id: a Gymnasium id, e.g. ``"mypkg/MyEnv-v0"`` (a namespace is recommended: name it
            after the importable package that registers the id, so a worker process can find
            it; docs/own-env.md).
        entry_point: ``"module:Class"`` (recommended: picklable and importable in workers) or
            the class / a factory. The env must accept ``num_nodes`` as a keyword argument and
            satisfy the graph env protocol (:func:`graphwm_envs.check_graph_env`).
        schema: the feature schema (a ``FeatureSchema`` or its plain dict); ``None``: the
            class's ``feature_schema()`` for a ``GraphEnv`` subclass, else read from one env
            built at ``min_nodes``.
        min_nodes / max_nodes: the accepted range of N; ``None``: the class attributes
            ``min_nodes`` / ``max_nodes`` if it has them, else 5 and 5000.
        kwargs: default constructor keyword arguments (``num_nodes`` defaults to 20, or the
            nearest end of the declared range).
        **gym_kwargs: passed on to ``gymnasium.register`` (e.g. ``max_episode_steps``).

    ``gym.make`` refuses a ``num_nodes`` outside the range by name, and ``gym.make_vec`` a
    ``num_envs`` below 1. Registering an id again replaces it (so a reloaded module does not
    fail).

    Raises:
        ValueError: a bad id, schema or size range.
    """
    if not isinstance(env_id, str) or not env_id or ":" in env_id:
        raise ValueError(f"env_id must be a Gymnasium id like 'mypkg/MyEnv-v0', got {env_id!r}")
    plain = None if schema is None else _schema_dict(schema, f"schema of {env_id!r}")
    for name, value in (("min_nodes", min_nodes), ("max_nodes", max_nodes)):
        bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        if value is not None and bad:
            raise ValueError(f"{name} of {env_id!r} must be an integer >= 1, got {value!r}")
    if min_nodes is not None and max_nodes is not None and min_nodes > max_nodes:
        raise ValueError(f"min_nodes ({min_nodes}) > max_nodes ({max_nodes}) for {env_id!r}")
    if env_id in ENV_IDS:
        raise ValueError(f"{env_id!r} is one of the paper's envs; choose another id")
    try:
        cls = _entry_class(entry_point)
    except (ImportError, AttributeError):  # a module registering its own class mid-import
        cls = None
    low, high = _size_range(env_id, cls, GraphEnvDecl(None, min_nodes, max_nodes))
    if low > high:
        raise ValueError(
            f"the size range of {env_id!r} is empty: min_nodes {low} > max_nodes {high} (a "
            "bound not given is the class's, else 5 / 5000)"
        )
    if env_id in gym.registry:
        del gym.registry[env_id]
    _DECLARED[env_id] = GraphEnvDecl(plain, min_nodes, max_nodes)
    graph_env_info.cache_clear()
    defaults = dict(kwargs or {})
    if "num_nodes" not in defaults:  # 20, or the declared range's nearest end
        defaults["num_nodes"] = min(max(20, low), high)
    gym.register(
        id=env_id,
        entry_point=SizedEntryPoint(env_id, entry_point),
        **{"vector_entry_point": VectorEntryPoint(env_id), **gym_kwargs},
        kwargs=defaults,
    )


def split_env_name(name: str) -> tuple[str | None, str]:
    """``"module:id"`` -> ``("module", "id")``; a bare id -> ``(None, id)``."""
    module, sep, env_id = name.rpartition(":")
    return (module or None, env_id) if sep else (None, name)


def resolve_env_id(name: str) -> str:
    """The registered Gymnasium id of ``name``, importing what registers it first.

    ``name`` is an id (``"mypkg/MyEnv-v0"``) or Gymnasium's ``"module:id"`` form. The module
    of the ``module:id`` form is imported; an id that is still not registered has its
    namespace (``mypkg``) imported if that is an importable module (the convention that lets a
    worker process find an env registered on import of its package).

    Raises:
        ValueError: the module cannot be imported or the id is not registered after it.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"an env id must be a non-empty string, got {name!r}")
    module, env_id = split_env_name(name)
    if module is not None:
        if not all(part.isidentifier() for part in module.split(".")):
            raise ValueError(
                f"env {name!r}: {module!r} is not a Python module name (dotted identifiers, "
                "e.g. 'mypkg.envs'); the 'module:id' form imports that module"
            )
        _import_registering(name, module, missing_ok=False)
    if env_id not in gym.registry:
        namespace = env_id.partition("/")[0] if "/" in env_id else None
        if module is None and namespace and namespace.isidentifier():
            _import_registering(name, namespace, missing_ok=True)
    if env_id not in gym.registry:
        hint = (
            "" if module is not None else
            "; name the module that registers it as 'module:id' (e.g. 'mypkg.envs:"
            f"{env_id}') so that every process imports it"
        )  # fmt: skip
        raise ValueError(f"unknown env id {env_id!r}: not registered with Gymnasium{hint}")
    return env_id


def _import_registering(name: str, module: str, *, missing_ok: bool) -> None:
    """Import the module that registers env ``name``; any failure of it (an exception on
    import, ``sys.exit``) is a ``ValueError`` naming the module and the cause. ``missing_ok``:
    a module that does not exist is no error (the namespace convention is a guess)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as err:
        if missing_ok and err.name == module:
            return
        raise ValueError(f"env {name!r}: cannot import its module {module!r} ({err})") from None
    except (Exception, SystemExit) as err:  # a user's module may raise anything, or exit
        cause = (
            f"it called sys.exit({err.code!r})"
            if isinstance(err, SystemExit)
            else f"{type(err).__name__}: {err}"
        )
        raise ValueError(
            f"env {name!r}: importing its module {module!r} failed ({cause})"
        ) from None


def _size_range(env_id: str, cls: type | None, decl: GraphEnvDecl | None = None) -> tuple[int, int]:
    """``(min N, max N)`` of an id: declared, else the class attributes, else the defaults."""
    from graphwm_envs.core.base import MIN_NODES, GraphEnv

    decl = decl or _DECLARED.get(env_id, GraphEnvDecl())
    is_graph_env = cls is not None and issubclass(cls, GraphEnv)
    low = decl.min_nodes or getattr(cls, "min_nodes", None)
    low = int(low if low is not None else (MIN_NODES if is_graph_env else DEFAULT_MIN_NODES))
    high = decl.max_nodes or getattr(cls, "max_nodes", None)
    return low, int(high if high is not None else DEFAULT_MAX_NODES)


def _entry_class(entry_point: Any) -> type | None:
    if isinstance(entry_point, SizedEntryPoint):
        entry_point = entry_point.entry_point
    if isinstance(entry_point, str):
        module, _, attr = entry_point.partition(":")
        obj = getattr(importlib.import_module(module), attr)
    else:
        obj = entry_point
    return obj if inspect.isclass(obj) else None


def _schema_dict(schema: Any, what: str) -> dict[str, Any]:
    from graphwm_envs.core.schema import FeatureSchema

    data = schema.to_dict() if hasattr(schema, "to_dict") else schema
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a FeatureSchema or a schema dict, got {schema!r}")
    try:
        return FeatureSchema.from_dict(data).to_dict()
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{what} is not a valid schema ({err})") from None


@functools.lru_cache(maxsize=64)
def graph_env_info(name: str) -> GraphEnvInfo:
    """Schema, size range and class of a graph env id (``"module:id"`` accepted).

    Read from the declaration of :func:`register_graph_env`, else the class (a ``GraphEnv``
    subclass: ``feature_schema()``; size range: class attributes ``min_nodes`` /
    ``max_nodes``), else one env built at the smallest size (its ``schema``).
    """
    from graphwm_envs.core.base import GraphEnv

    env_id = resolve_env_id(name)
    spec = gym.spec(env_id)
    decl = _DECLARED.get(env_id, GraphEnvDecl())
    cls = _entry_class(spec.entry_point)
    is_graph_env = cls is not None and issubclass(cls, GraphEnv)
    low, high = _size_range(env_id, cls)
    schema = decl.schema
    if schema is None and is_graph_env:
        schema = cls.feature_schema().to_dict()  # type: ignore[union-attr]
    if schema is None:
        env = gym.make(env_id, num_nodes=low, disable_env_checker=True)
        try:
            found = getattr(env.unwrapped, "schema", None)
            if found is None:
                raise ValueError(
                    f"env {env_id!r} has no 'schema' attribute (docs/contract.md, 'Schema'); "
                    "give one to register_graph_env(..., schema=...)"
                )
            schema = _schema_dict(found, f"the schema of env {env_id!r}")
        finally:
            env.close()
    return GraphEnvInfo(env_id, cls, schema, low, high)


def env_class(env_id: str) -> type[GraphEnv]:
    """The env class of a registered id, imported but not built: its class-level information
    (``feature_schema(params)``, ``max_nodes``) needs no env.

    Raises:
        ValueError: for an id that is not registered, or whose entry point is no class.
    """
    if env_id in _ENTRY_POINTS:
        module, _, name = _ENTRY_POINTS[env_id].partition(":")
        cls: type[GraphEnv] = getattr(importlib.import_module(module), name)
        return cls
    try:
        found = graph_env_info(env_id).env_class
    except ValueError:
        raise ValueError(f"unknown env id {env_id!r}; known: {list(ENV_IDS)}") from None
    if found is None:
        raise ValueError(f"env id {env_id!r} has a factory entry point, not a class")
    return found
