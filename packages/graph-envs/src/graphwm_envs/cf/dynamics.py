"""One CF transition: agent removal, stochastic overload failures, load recomputation."""

from __future__ import annotations

import numpy as np

from graphwm_envs.cf.loads import update_loads
from graphwm_envs.cf.types import CFState


def failure_probability(load_prev: np.ndarray, capacity: np.ndarray, xi: float) -> np.ndarray:
    """Per-node failure probability (paper appendix "Cascading Failures").

    ``p(v) = min(1, (load_{t-1}(v) - xi c(v)) / (xi c(v)))`` if ``load_{t-1}(v) > xi c(v)``
    (strict), else 0. A node with capacity 0 and a positive load has ``p = 1`` (the limit of
    the formula; it cannot occur for exact loads, since a node with zero initial betweenness has
    a clique neighbourhood and keeps zero betweenness when edges are only removed).
    """
    load_prev = np.asarray(load_prev, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    threshold = xi * capacity
    over = load_prev > threshold
    prob = np.zeros_like(load_prev)
    safe = over & (threshold > 0.0)
    prob[safe] = np.minimum(1.0, (load_prev[safe] - threshold[safe]) / threshold[safe])
    prob[over & ~(threshold > 0.0)] = 1.0
    return prob


def cascade_step(state: CFState, node: int | None, rng: np.random.Generator) -> np.ndarray:
    """Apply one transition to ``state`` in place; returns the boolean mask of failed nodes.

    Order (paper): failures are decided on ``load_{t-1}`` (the loads before this step), one
    uniform draw per node (N draws, always); the agent's ``node`` (``None`` for an
    invalid-action noop) and every failed node lose all their edges; the loads are recomputed
    (only on the components that changed, see :func:`update_loads`). The agent's node is
    checked like every other node; that makes no difference, it loses its edges anyway.
    """
    prob = failure_probability(state.load, state.capacity, state.xi)
    failed = rng.random(len(prob)) < prob
    removed = failed.copy()
    if node is not None:
        removed[node] = True
    adj = state.adjacency
    removed &= adj.any(axis=1)  # nodes that actually lose edges
    if removed.any():
        touched = removed | adj[removed].any(axis=0)
        adj[removed, :] = False
        adj[:, removed] = False
        state.load = update_loads(adj, state.load, np.flatnonzero(touched))
    return failed
