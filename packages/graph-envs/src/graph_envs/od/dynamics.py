"""OD transition pieces (paper appendix "Opinion Dynamics", after Holme and Newman 2006).

Each function mutates an :class:`ODState` in place and touches only the rows/columns of the
nodes involved (O(N) per selected node, no O(N^2) work).
"""

from __future__ import annotations

import numpy as np

from graph_envs.od.types import ODParams, ODState


def softmax_sample(logits: np.ndarray, rng: np.random.Generator) -> int:
    """Index drawn with ``P(i) proportional to exp(logits[i])`` (stable: max subtracted)."""
    weights = np.exp(logits - logits.max())
    cumulative = np.cumsum(weights)
    idx = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(idx, len(weights) - 1)


def rewire_candidates(state: ODState, node: int) -> tuple[np.ndarray, np.ndarray]:
    """``(neighbours, partners)`` of ``node`` for a rewiring event.

    ``partners`` are the non-neighbours other than ``node`` that hold ``node``'s opinion,
    computed before the drop (so the dropped neighbour is never re-chosen).
    """
    row = state.adjacency[node]
    neighbours = np.flatnonzero(row)
    same = state.opinion == state.opinion[node]
    same &= ~row
    same[node] = False
    return neighbours, np.flatnonzero(same)


def rewire(state: ODState, node: int, temperature: float, rng: np.random.Generator) -> bool:
    """Replace one edge of ``node``; returns whether the graph changed.

    The neighbour ``v`` to drop is drawn with ``P(v) propto exp(+d(node, v) / T)``; the new
    partner ``w`` among same-opinion non-neighbours with ``P(w) propto exp(-d(node, w) / T)``,
    ``d = |zeta(node) - zeta(.)|`` (paper appendix "Opinion Dynamics"). If ``node`` has no
    neighbour or no candidate partner, nothing happens and nothing is drawn.
    """
    neighbours, partners = rewire_candidates(state, node)
    if neighbours.size == 0 or partners.size == 0:
        return False
    zeta = state.vibe
    drop = neighbours[softmax_sample(np.abs(zeta[neighbours] - zeta[node]) / temperature, rng)]
    new = partners[softmax_sample(-np.abs(zeta[partners] - zeta[node]) / temperature, rng)]
    adj = state.adjacency
    adj[node, drop] = adj[drop, node] = False
    adj[node, new] = adj[new, node] = True
    return True


def copy_opinion(state: ODState, node: int, rng: np.random.Generator) -> bool:
    """``node`` adopts the opinion of a uniformly drawn neighbour; no neighbour: no change.

    Returns whether a neighbour was drawn.
    """
    neighbours = np.flatnonzero(state.adjacency[node])
    if neighbours.size == 0:
        return False
    state.opinion[node] = state.opinion[neighbours[rng.integers(neighbours.size)]]
    return True


def environment_moves(state: ODState, params: ODParams, rng: np.random.Generator) -> int:
    """The environment's part of a step; returns the number of rewiring events that happened.

    ``k_env = ceil(k_frac_env N)`` nodes drawn uniformly without replacement, processed in
    draw order (each sees the changes of the previous ones): with probability ``phi`` rewire,
    otherwise copy a neighbour's opinion.
    """
    n = len(state.opinion)
    rewired = 0
    for node in rng.choice(n, size=params.k_env(n), replace=False):
        if rng.random() < params.phi:
            rewired += rewire(state, int(node), params.temperature, rng)
        else:
            copy_opinion(state, int(node), rng)
    return rewired


def agent_influence(
    state: ODState, nodes: np.ndarray, params: ODParams, rng: np.random.Generator
) -> np.ndarray:
    """Each distinct node of ``nodes`` independently adopts the target opinion with
    probability ``adopt_prob`` (one draw per distinct node, ascending order); returns the
    nodes that adopted."""
    distinct = np.unique(np.asarray(nodes, dtype=np.int64))
    adopted = distinct[rng.random(distinct.size) < params.adopt_prob]
    state.opinion[adopted] = params.target_opinion
    return adopted
