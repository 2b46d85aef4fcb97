"""``check_graph_env``: which part of the graph env contract (docs/contract.md) an env breaks.

The pipeline (graphwm) drives an env only through the *graph env protocol*: Gymnasium's
``reset``/``step`` plus the members below, on ``env.unwrapped``. A ``GraphEnv`` subclass has
them all; a plain ``gymnasium.Env`` may implement them itself (docs/own-env.md).

===========================  ======================================================================
member                       contract
===========================  ======================================================================
``num_nodes``                N, an int (the constructor takes ``num_nodes=``)
``schema``                   the feature schema: ``.to_dict()`` (or the dict itself)
``observation_space``        a ``spaces.Dict`` of the observation keys the schema implies
``action_space``             ``Discrete(N)`` or ``MultiDiscrete([N] * k)`` (node selections)
``action_to_nodes(a)``       the (N,) int8 0/1 node indicator of action ``a``, nonzero
``clone_state()``            an independent snapshot of the full state (RNG included)
``restore_state(s, seed)``   restore ``s``, return its observation; ``seed=None`` replays the
                             future exactly, an int reseeds the transition randomness (two
                             seeds must be able to give two next states: see below)
``action_masks()``           the current mask in MaskablePPO's form: ``obs["action_mask"]`` as
                             bool, tiled k times for ``MultiDiscrete([N] * k)``
``sample_valid_action(r)``   optional: a random valid action from numpy Generator ``r`` (else
                             the pipeline draws k distinct nodes of ``obs["action_mask"]``)
===========================  ======================================================================

**Reseeding.** The GDD's reference sample set restores one snapshot with many seeds: an env
whose ``restore_state`` ignores the seed collapses it to one sample. The checker restores each
checked snapshot with the :data:`RESEED_SEEDS` and takes the same action. The seed counts as
used when two seeds give two different next states (observation or reward), or, for an env
that keeps its randomness in Gymnasium's ``env.np_random`` (every ``GraphEnv``), when two
seeds leave two different generator states. Otherwise the check fails, unless the env says
that its transitions are deterministic (only ``reset`` draws randomness, or nothing does) with
the class attribute ``deterministic_transitions = True`` on ``env.unwrapped``: a
deterministic env has nothing to reseed.

Each violation raises :class:`GraphEnvContractError`, whose ``part`` names the broken part
(``"observation['adjacency']"``, ``"clone_state/restore_state"``, ...) and whose message says
what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from graphwm_envs.core.schema import FEATURE_KEYS
from graphwm_envs.core.validation import OBS_DTYPES, observation_shapes

__all__ = ["PROTOCOL_MEMBERS", "GraphEnvContractError", "check_graph_env"]

#: how many seeds :func:`check_graph_env` restores each checked snapshot with
RESEED_SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)

#: the members of the graph env protocol every env must have (on ``env.unwrapped``)
PROTOCOL_MEMBERS = (
    "num_nodes",
    "schema",
    "action_to_nodes",
    "action_masks",
    "clone_state",
    "restore_state",
)

_DTYPES = {key: np.dtype(dtype) for key, dtype in OBS_DTYPES.items()}
_FEATURES = FEATURE_KEYS


class GraphEnvContractError(ValueError):
    """An env breaks the graph env contract; ``part`` names the part (docs/contract.md)."""

    def __init__(self, part: str, problem: str) -> None:
        super().__init__(f"contract part {part!r}: {problem}")
        self.part = part
        self.problem = problem


def _fail(part: str, problem: str) -> GraphEnvContractError:
    return GraphEnvContractError(part, problem)


def _schema(env: Any) -> dict[str, Any]:
    from graphwm_envs.core.schema import FeatureSchema

    raw = env.schema
    data = raw.to_dict() if hasattr(raw, "to_dict") else raw
    if not isinstance(data, Mapping):
        raise _fail("schema", f"must have .to_dict() or be a dict, got {type(raw).__name__}")
    try:
        return FeatureSchema.from_dict(data).to_dict()
    except (ValueError, TypeError, AttributeError) as err:
        raise _fail("schema", f"is not a valid schema ({err})") from None


def _widths(schema: Mapping[str, Any]) -> dict[str, int]:
    return {key: len(schema.get(key, ())) for key in _FEATURES}


def _expected_keys(schema: Mapping[str, Any]) -> set[str]:
    return {"adjacency", "action_mask"} | {k for k, w in _widths(schema).items() if w}


def _check_members(env: Any) -> int:
    missing = [m for m in PROTOCOL_MEMBERS if not hasattr(env, m)]
    for name in missing:
        raise _fail(name, f"{type(env).__name__} has no {name!r} (the graph env protocol)")
    for name in ("action_to_nodes", "action_masks", "clone_state", "restore_state"):
        if not callable(getattr(env, name)):
            raise _fail(name, f"{type(env).__name__}.{name} must be a method")
    n = env.num_nodes
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise _fail("num_nodes", f"must be a positive int, got {n!r}")
    return int(n)


def _check_spaces(env: Any, schema: Mapping[str, Any], n: int) -> None:
    space = env.observation_space
    if not isinstance(space, spaces.Dict):
        raise _fail("observation_space", f"must be a spaces.Dict, got {space}")
    want = _expected_keys(schema)
    if set(space.spaces) != want:
        raise _fail(
            "observation_space",
            f"keys {sorted(space.spaces)} != {sorted(want)} (a feature type the schema lacks "
            "is absent; adjacency and action_mask are always present)",
        )
    action = env.action_space
    if isinstance(action, spaces.Discrete):
        ok = int(action.n) == n and int(action.start) == 0
    elif isinstance(action, spaces.MultiDiscrete):
        ok = action.nvec.ndim == 1 and bool(np.all(action.nvec == n))
    else:
        ok = False
    if not ok:
        raise _fail(
            "action_space",
            f"must be Discrete({n}) or MultiDiscrete([{n}] * k) (node selections), got {action}",
        )


def _check_observation(obs: Any, schema: Mapping[str, Any], n: int, where: str) -> None:
    if not isinstance(obs, Mapping):
        raise _fail("observation", f"{where}: must be a dict of arrays, got {type(obs).__name__}")
    want = _expected_keys(schema)
    for key in sorted(want - set(obs)):
        raise _fail(f"observation[{key!r}]", f"{where}: the key is missing")
    for key in sorted(set(obs) - want):
        why = "a feature type the schema lacks must be absent" if key in _FEATURES else "unknown"
        raise _fail(f"observation[{key!r}]", f"{where}: unexpected key ({why})")
    widths = _widths(schema)
    shapes = observation_shapes(widths, n)
    for key in sorted(want):
        arr = obs[key]
        part = f"observation[{key!r}]"
        if not isinstance(arr, np.ndarray):
            raise _fail(part, f"{where}: must be a numpy array, got {type(arr).__name__}")
        if arr.dtype != _DTYPES[key]:
            raise _fail(part, f"{where}: dtype {arr.dtype}, the contract's is {_DTYPES[key]}")
        if arr.shape != shapes[key]:
            extra = ""
            if key in _FEATURES and arr.ndim == len(shapes[key]):
                extra = f" (the schema declares {widths[key]} {key} feature(s))"
            raise _fail(part, f"{where}: shape {arr.shape}, expected {shapes[key]}{extra}")
    adj = obs["adjacency"]
    if not np.isin(adj, (0, 1)).all():
        raise _fail("observation['adjacency']", f"{where}: entries other than 0/1")
    if not np.array_equal(adj, adj.T):
        i, j = np.argwhere(adj != adj.T)[0]
        raise _fail(
            "observation['adjacency']",
            f"{where}: not symmetric (adjacency[{i}, {j}] = {adj[i, j]}, "
            f"adjacency[{j}, {i}] = {adj[j, i]})",
        )
    if np.any(np.diagonal(adj)):
        raise _fail("observation['adjacency']", f"{where}: self-loops on the diagonal")
    mask = obs["action_mask"]
    if not np.isin(mask, (0, 1)).all():
        raise _fail("observation['action_mask']", f"{where}: entries other than 0/1")
    if not mask.any():
        raise _fail("observation['action_mask']", f"{where}: all zero (never allowed)")
    for key in ("node_continuous", "graph_continuous"):
        if key in obs:
            ranges = schema.get("ranges", {})
            arr = obs[key]
            if not np.isfinite(arr).all():
                raise _fail(f"observation[{key!r}]", f"{where}: NaN or inf")
            for col, name in enumerate(schema[key]):
                lo, hi = ranges.get(name, (-np.inf, np.inf))
                vals = arr[..., col]
                if vals.size and (vals.min() < lo or vals.max() > hi):
                    raise _fail(
                        f"observation[{key!r}]",
                        f"{where}: feature {name!r} outside its declared range [{lo}, {hi}]",
                    )
    for key in ("node_categorical", "graph_categorical"):
        if key in obs:
            for col, (name, card) in enumerate(schema[key].items()):
                vals = obs[key][..., col]
                if vals.size and (vals.min() < 0 or vals.max() >= card):
                    raise _fail(
                        f"observation[{key!r}]",
                        f"{where}: feature {name!r} has values outside [0, {card - 1}]",
                    )


def _equal_obs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def _valid_action(env: Any, mask: np.ndarray, rng: np.random.Generator) -> Any:
    nodes = np.flatnonzero(mask)
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return int(rng.choice(nodes))
    k = len(space.nvec)
    if len(nodes) < k:
        return None
    return rng.choice(nodes, size=k, replace=False).astype(np.int64)


def _check_action(env: Any, action: Any, mask: np.ndarray, n: int, where: str) -> np.ndarray:
    try:
        nodes = np.asarray(env.action_to_nodes(action))
    except Exception as err:
        raise _fail("action_to_nodes", f"{where}: raised {type(err).__name__}: {err}") from None
    if nodes.shape != (n,):
        raise _fail("action_to_nodes", f"{where}: shape {nodes.shape}, expected ({n},)")
    if nodes.dtype != np.int8:
        raise _fail("action_to_nodes", f"{where}: dtype {nodes.dtype}, expected int8")
    if not np.isin(nodes, (0, 1)).all() or not nodes.any():
        raise _fail("action_to_nodes", f"{where}: must be a nonzero 0/1 indicator, got {nodes}")
    outside = np.flatnonzero(nodes.astype(bool) & ~mask.astype(bool))
    if outside.size:
        raise _fail(
            "action_mask",
            f"{where}: action {action!r} drawn from the mask selects node(s) "
            f"{outside.tolist()} the mask forbids (action_to_nodes and action_mask disagree)",
        )
    return nodes


def _check_action_masks(env: Any, mask: np.ndarray, where: str) -> None:
    got = np.asarray(env.action_masks()).astype(bool)
    space = env.action_space
    reps = 1 if isinstance(space, spaces.Discrete) else len(space.nvec)
    want = np.tile(mask.astype(bool), reps)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise _fail(
            "action_mask",
            f"{where}: action_masks() {got.astype(int).tolist()} differs from "
            f"obs['action_mask'] (tiled per component) {want.astype(int).tolist()}",
        )


def _step(env: Any, action: Any, schema: Mapping[str, Any], n: int, where: str) -> tuple:
    out = env.step(action)
    if not isinstance(out, tuple) or len(out) != 5:
        raise _fail("step", f"{where}: must return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    _check_observation(obs, schema, n, where)
    if not isinstance(reward, int | float | np.number) or not np.isfinite(reward):
        raise _fail("step", f"{where}: reward must be a finite number, got {reward!r}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool | np.bool_):
            raise _fail("step", f"{where}: {name} must be a bool, got {flag!r}")
    if not isinstance(info, dict):
        raise _fail("step", f"{where}: info must be a dict, got {type(info).__name__}")
    return obs, float(reward), bool(terminated), bool(truncated), info


def _same_step(a: tuple, b: tuple) -> bool:
    return _equal_obs(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]


def _generator_state(env: Any) -> Any:
    """The state of Gymnasium's ``env.np_random`` if the env has created one (read without
    creating it: the property seeds a fresh generator on first access), else ``None``."""
    rng = getattr(env, "_np_random", None)
    return rng.bit_generator.state if isinstance(rng, np.random.Generator) else None


def _check_restore(
    env: Any, schema: Mapping[str, Any], n: int, obs: Any, rng, where: str
) -> tuple[Any, bool]:
    """clone -> step -> restore must give back the cloned observation and, with ``seed=None``,
    the same next observation and reward again; returns the restored observation and whether
    restoring with different seeds gave different next states (:data:`RESEED_SEEDS`)."""
    part = "clone_state/restore_state"
    snap = env.clone_state()
    action = _valid_action(env, obs["action_mask"], rng)
    if action is None:
        return obs, False
    first = env.step(action)
    try:
        back = env.restore_state(snap)
    except Exception as err:
        raise _fail(part, f"{where}: restore_state(snapshot) raised {err!r}") from None
    _check_observation(back, schema, n, f"{where}, restore_state's observation")
    if not _equal_obs(back, obs):
        raise _fail(part, f"{where}: restore_state did not return the cloned observation")
    again = env.step(action)
    if not _equal_obs(first[0], again[0]) or first[1] != again[1] or first[2] != again[2]:
        raise _fail(
            part,
            f"{where}: after restore_state(snapshot) the same action gave another next "
            "state or reward (the snapshot must hold the full state, RNG included)",
        )
    try:
        env.restore_state(snap, seed=12345)
    except TypeError as err:
        raise _fail(part, f"restore_state must accept seed= (an int reseeds): {err}") from None
    reseeded, generators = [], []
    for seed in RESEED_SEEDS:
        env.restore_state(snap, seed=seed)
        generators.append(_generator_state(env))
        reseeded.append(env.step(action))
    differ = any(not _same_step(reseeded[0], other) for other in reseeded[1:])
    differ |= generators[0] is not None and any(g != generators[0] for g in generators[1:])
    return env.restore_state(snap), differ


def check_graph_env(env: gym.Env, *, seed: int = 0, steps: int = 8) -> None:
    """Check that ``env`` satisfies the graph env contract; raise on the first violation.

    Checks the protocol members, the schema, the spaces, every observation of a short random
    episode (keys, dtypes, shapes against the schema's widths, a symmetric 0/1 adjacency without
    self-loops, a nonzero 0/1 action mask, ranges and cardinalities), that ``reset(seed)`` is
    deterministic, that ``action_to_nodes`` gives an (N,) int8 indicator inside the mask for
    actions drawn from the mask, that ``action_masks()`` agrees with the
    observation's mask, that ``clone_state``/``restore_state`` reproduce the future and that
    ``restore_state`` uses its seed (two seeds give two next states or two generator states,
    unless the env declares ``deterministic_transitions = True``; the module docstring,
    "Reseeding").

    Args:
        env: the env (wrappers are looked through: ``env.unwrapped`` must have the protocol).
        seed: reset seed of the checked episode.
        steps: most steps checked.

    Raises:
        GraphEnvContractError: naming the broken part (``.part``) and what is wrong.
    """
    real = env.unwrapped
    n = _check_members(real)
    schema = _schema(real)
    _check_spaces(real, schema, n)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    if not isinstance(info, dict):
        raise _fail("reset", f"must return (obs, info) with an info dict, got {type(info)}")
    _check_observation(obs, schema, n, "reset")
    obs_again, _ = env.reset(seed=seed)
    if not _equal_obs(obs, obs_again):
        raise _fail("reset", f"reset(seed={seed}) twice gave different observations")
    reseed_changes = False
    checked = 0
    for t in range(steps):
        where = f"step {t}"
        _check_action_masks(real, obs["action_mask"], where)
        obs, differ = _check_restore(real, schema, n, obs, rng, where)
        reseed_changes |= differ
        checked += 1
        action = _valid_action(real, obs["action_mask"], rng)
        if action is None:
            break
        _check_action(real, action, obs["action_mask"], n, where)
        obs, _, terminated, truncated, info = _step(env, action, schema, n, where)
        if info.get("invalid_action") is True:
            raise _fail(
                "action_mask",
                f"{where}: action {action!r} drawn from obs['action_mask'] was reported "
                "invalid (info['invalid_action']): the mask allows actions the env refuses",
            )
        if terminated or truncated:
            break
    if checked and not reseed_changes and getattr(real, "deterministic_transitions", 0) is not True:
        raise _fail(
            "clone_state/restore_state",
            f"restore_state(snapshot, seed=s) with {len(RESEED_SEEDS)} different seeds gave the "
            f"same next state at each of the {checked} checked step(s) (and no env.np_random "
            "that the seed changed): it ignores the seed, so the GDD's reference samples "
            "would all be one; an int seed must reseed the transition randomness. An env "
            "whose transitions are deterministic declares deterministic_transitions = True",
        )
