"""Heuristic reference policies and their evaluation: the yardsticks of every graph env.

(The SB3 policies of the trained graph agents are another thing: :mod:`graphwm_envs.agents`.)

A policy is any callable ``policy(env, rng) -> action`` on the *unwrapped* env (a
:class:`~graphwm_envs.core.base.GraphEnv`) and a seeded ``numpy.random.Generator``; every random
choice (ties included) flows from ``rng``, so a policy is deterministic for a seed.

* :func:`random_action`: a uniformly random valid action (the paper's data-collection policy).
* :func:`greedy_action`: one hand-written heuristic per env (the paper tuned the env
  parameters for a margin between a greedy and a random policy, appendix "Environment
  Descriptions"; it does not spell the heuristics out, so ours are documented per env below
  and in ``docs/envs.md``, section "Yardsticks").
* :func:`evaluate_heuristic`: mean return and its **standard error** (not a standard
  deviation) over seeded episodes; :func:`episode_returns`: the returns themselves.
  (SB3's ``evaluate_heuristic`` is another function: it evaluates a trained model and returns a
  standard deviation; :func:`graphwm_envs.agents.evaluate_agent` is this module's counterpart
  for trained agents.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from scipy.sparse import csr_array
from scipy.sparse.csgraph import shortest_path

import graphwm_envs  # noqa: F401  (registers the ids for evaluate_heuristic)

Policy = Callable[[Any, np.random.Generator], Any]

__all__ = [
    "Policy",
    "episode_returns",
    "evaluate_heuristic",
    "greedy_action",
    "has_greedy_heuristic",
    "mean_and_standard_error",
    "random_action",
]


# --------------------------------------------------------------------------- random policy
def random_action(env: Any, rng: np.random.Generator) -> Any:
    """A uniformly random valid action of the unwrapped graph env ``env``.

    ``Discrete`` action spaces: uniform over the entries of ``env.action_masks()``.
    ``MultiDiscrete([N] * k)``: k *distinct* nodes drawn uniformly from the node mask, in random
    order (the paper's random policy, ``a subset of the mask with |a| = k``; for RGC's default
    k = 2 node selection this may pick an existing edge, a noop the mask cannot express).

    Raises:
        ValueError: when the mask allows no action (the env is at a terminal state).
    """
    env = _unwrapped(env)
    space = env.action_space
    mask = np.asarray(env.action_masks(), dtype=bool)
    if isinstance(space, spaces.Discrete):
        valid = np.flatnonzero(mask)
        if valid.size == 0:
            raise ValueError(f"{type(env).__name__}: the action mask allows no action")
        return int(space.start + valid[rng.integers(valid.size)])
    if isinstance(space, spaces.MultiDiscrete):
        k, n = len(space.nvec), int(space.nvec[0])
        valid = np.flatnonzero(mask[:n])
        if valid.size < k:
            raise ValueError(
                f"{type(env).__name__}: {valid.size} valid nodes, fewer than the k = {k} to select"
            )
        return rng.choice(valid, size=k, replace=False).astype(np.int64)
    raise NotImplementedError(f"unsupported action space {space}")


# --------------------------------------------------------------------------- greedy policy
def greedy_action(env: Any, rng: np.random.Generator) -> Any:
    """The env's greedy heuristic action (ties broken uniformly by ``rng``).

    * **RGC**: add the addable edge (a non-adjacent pair ``i != j``) with the largest one-step
      robustness gain, i.e. the largest reward (Darvariu et al. 2021's greedy baseline).
    * **OD**: select the k nodes not holding the target opinion with the most reach: node v
      scores ``sum over non-target neighbours u of 1 / deg(u)``, the expected number of
      non-target neighbours that would copy v if each were picked by the env once (every
      non-target node has the same one-step gain, so the greedy step looks at who v
      converts next). Target-holding nodes fill the selection only when fewer than k others
      remain.
    * **SAR** (uses only what the agent observes: the graph, visible survivors, exit,
      location): escorting, take a shortest path to the exit; otherwise take a shortest path
      to the nearest *visible* survivor; when none is visible, step towards the nearest
      unseen node (more than two hops away) to explore; nothing reachable: any neighbour.
    * **CF**: disconnect the node with the most edges left (highest current degree): each step
      removes as many edges as possible. (Measured at N in {20, 50}, 100 episodes, this beats
      the highest-load attack of Motter & Lai 2002 by 0.02-0.06 in return, and a one-step
      largest-component lookahead by 0.15.)

    Raises:
        TypeError: for an env this module has no heuristic for.
    """
    env = _unwrapped(env)
    name = type(env).__name__
    heuristic = _GREEDY.get(name)
    if heuristic is None:
        raise TypeError(f"no greedy heuristic for {name}; known: {sorted(_GREEDY)}")
    return heuristic(env, rng)


def has_greedy_heuristic(env: Any) -> bool:
    """Whether :func:`greedy_action` has a heuristic for ``env``: an env, a wrapped env or an
    env class (no env is built or stepped)."""
    cls = env if isinstance(env, type) else type(_unwrapped(env))
    return cls.__name__ in _GREEDY


def _argmax_ties(scores: np.ndarray, rng: np.random.Generator, atol: float = 0.0) -> int:
    """Index of the largest score; ties (within ``atol``) broken uniformly by ``rng``."""
    best = np.flatnonzero(scores >= scores.max() - atol)
    return int(best[rng.integers(best.size)])


def _greedy_rgc(env: Any, rng: np.random.Generator) -> Any:
    adjacency = env.state.adjacency
    rows, cols = np.nonzero(np.triu(adjacency == 0, k=1))
    if rows.size == 0:
        raise ValueError("RGCEnv: the graph is complete, no edge can be added")
    work = adjacency.copy()
    gains = np.empty(rows.size)
    for idx, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        work[i, j] = work[j, i] = 1
        gains[idx] = env.robustness(work)
        work[i, j] = work[j, i] = 0
    # The robustness is a deterministic estimate, so equal gains are exactly equal floats;
    # a tolerance only guards against summation-order noise.
    pick = _argmax_ties(gains, rng, atol=1e-12)
    i, j = int(rows[pick]), int(cols[pick])
    return _rgc_edge_action(env, i, j)


def _rgc_edge_action(env: Any, i: int, j: int) -> Any:
    """The env's action for the edge (i, j), i < j, in either RGC action mode."""
    space = env.action_space
    if isinstance(space, spaces.MultiDiscrete):
        return np.array([i, j], dtype=np.int64)
    return int(env.pair_index(i, j))  # "pair" mode: Discrete over the pairs i < j


def _greedy_od(env: Any, rng: np.random.Generator) -> Any:
    state = env.state
    target = env.params.target_opinion
    adjacency = state.adjacency.astype(np.float64)
    degree = adjacency.sum(axis=1)
    non_target = state.opinion != target
    inv_degree = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    reach = adjacency @ (inv_degree * non_target)
    # non-target nodes first, by reach; ties (and the target-holding filler) in random order
    order = np.lexsort((rng.random(env.num_nodes), -reach, ~non_target))
    return order[: env.k].astype(np.int64)


def _greedy_sar(env: Any, rng: np.random.Generator) -> Any:
    from graphwm_envs.sar.dynamics import visible_nodes

    state = env.state
    graph = csr_array(np.asarray(state.adjacency, dtype=np.int8))
    location = int(state.location)
    neighbours = np.flatnonzero(state.adjacency[location])
    if neighbours.size == 0:
        raise ValueError("SAREnv: the agent has no neighbour to move to")
    dist = shortest_path(graph, unweighted=True, indices=location)
    visible = visible_nodes(state)
    if state.escorting:
        targets = np.array([state.exit_node])
    else:
        targets = np.flatnonzero(state.survivors & visible)  # the observed survivors only
        if not np.isfinite(dist[targets]).any():
            targets = np.flatnonzero(~visible)  # explore: the nearest unseen nodes
    targets = targets[np.isfinite(dist[targets])]
    if targets.size == 0:
        return int(neighbours[rng.integers(neighbours.size)])
    nearest = targets[dist[targets] == dist[targets].min()]
    goal = int(nearest[rng.integers(nearest.size)])
    # first step of a shortest path: a neighbour one hop closer to the goal
    to_goal = shortest_path(graph, unweighted=True, indices=goal)[neighbours]
    return int(neighbours[_argmax_ties(-to_goal, rng)])


def _greedy_cf(env: Any, rng: np.random.Generator) -> Any:
    degree = np.count_nonzero(env.state.adjacency, axis=1)
    if not degree.any():
        raise ValueError("CFEnv: no node has an edge left (the episode has ended)")
    return _argmax_ties(degree, rng)


_GREEDY: dict[str, Callable[[Any, np.random.Generator], Any]] = {
    "RGCEnv": _greedy_rgc,
    "ODEnv": _greedy_od,
    "SAREnv": _greedy_sar,
    "CFEnv": _greedy_cf,
}


# --------------------------------------------------------------------------- evaluation
def evaluate_heuristic(
    env_id: str,
    policy: Policy,
    *,
    episodes: int = 100,
    seed: int = 0,
    **env_kwargs: Any,
) -> tuple[float, float]:
    """Mean undiscounted return of ``policy`` and its **standard error** (of the mean, not the
    standard deviation of the returns) over ``episodes`` episodes.

    Episode ``e`` starts from ``reset(seed=seed + e)``; the policy's generator is
    ``numpy.random.default_rng(seed)``, shared by the episodes in order. The same ``seed``
    therefore gives two policies the same initial states (a paired comparison). The standard
    error is ``std(returns, ddof=1) / sqrt(episodes)`` (``nan`` for a single episode).

    Args:
        env_id: a registered id, e.g. ``"graphenv/SAR-v0"``.
        policy: ``policy(env, rng) -> action`` on the unwrapped env.
        episodes: number of episodes (>= 1).
        seed: seed of the first episode and of the policy's generator.
        **env_kwargs: passed to ``gymnasium.make`` (e.g. ``num_nodes=50``).

    Returns:
        ``(mean, standard error)`` of the episode returns.
    """
    returns = episode_returns(env_id, policy, episodes=episodes, seed=seed, **env_kwargs)
    return mean_and_standard_error(returns)


def mean_and_standard_error(returns: Any) -> tuple[float, float]:
    """``(mean, std(ddof=1) / sqrt(n))`` of ``n`` episode returns (``nan`` error for n = 1)."""
    values = np.asarray(returns, dtype=np.float64)
    n = values.size
    if n == 0:
        raise ValueError("no returns to average")
    sem = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return float(values.mean()), sem


def episode_returns(
    env_id: str,
    policy: Policy,
    *,
    episodes: int = 100,
    seed: int = 0,
    **env_kwargs: Any,
) -> np.ndarray:
    """The (episodes,) undiscounted returns behind :func:`evaluate_heuristic` (same seeding)."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    if not callable(policy):
        raise TypeError(f"policy must be callable as policy(env, rng), got {policy!r}")
    env = _unwrapped(gym.make(env_id, **env_kwargs))
    rng = np.random.default_rng(seed)
    returns = np.empty(episodes)
    try:
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(policy(env, rng))
                total += reward
                done = terminated or truncated
            returns[episode] = total
    finally:
        env.close()
    return returns


def _unwrapped(env: Any) -> Any:
    return env.unwrapped if isinstance(env, gym.Env) else env
