"""OD transition pieces (paper appendix "Opinion Dynamics", after Holme and Newman 2006).

Each function mutates an :class:`ODState` in place and touches only the rows/columns of the
nodes involved (O(N) per selected node, no O(N^2) work).
"""

from __future__ import annotations

import numpy as np

from graphwm_envs.od.types import ODParams, ODState


def softmax_sample(logits: np.ndarray, u: float) -> int:
    """Index drawn with ``P(i) proportional to exp(logits[i])`` by inverting the CDF at the
    uniform ``u`` in [0, 1) (stable softmax: the max is subtracted before ``exp``)."""
    weights = np.exp(logits - logits.max())
    cumulative = weights.cumsum()
    idx = int(cumulative.searchsorted(u * cumulative[-1], side="right"))
    return min(idx, len(weights) - 1)


def rewire_candidates(state: ODState, node: int) -> tuple[np.ndarray, np.ndarray]:
    """``(neighbours, partners)`` of ``node`` for a rewiring event.

    ``partners`` are the non-neighbours other than ``node`` that hold ``node``'s opinion,
    computed before the drop (so the dropped neighbour is never re-chosen).
    """
    row = state.adjacency[node]
    neighbours = row.nonzero()[0]
    same = state.opinion == state.opinion[node]
    same &= ~row
    same[node] = False
    return neighbours, same.nonzero()[0]


def rewire(state: ODState, node: int, temperature: float, u_drop: float, u_new: float) -> bool:
    """Replace one edge of ``node``; returns whether the graph changed.

    The neighbour ``v`` to drop is drawn (with the uniform ``u_drop``) with
    ``P(v) propto exp(+d(node, v) / T)``; the new partner ``w`` (with ``u_new``) among the
    same-opinion non-neighbours with ``P(w) propto exp(-d(node, w) / T)``,
    ``d = |zeta(node) - zeta(.)|`` (paper appendix "Opinion Dynamics"). If ``node`` has no
    neighbour or no candidate partner, nothing happens.
    """
    neighbours, partners = rewire_candidates(state, node)
    if neighbours.size == 0 or partners.size == 0:
        return False
    zeta = state.vibe
    z = zeta[node]
    drop = neighbours[softmax_sample(np.abs(zeta[neighbours] - z) / temperature, u_drop)]
    new = partners[softmax_sample(-np.abs(zeta[partners] - z) / temperature, u_new)]
    adj = state.adjacency
    adj[node, drop] = adj[drop, node] = False
    adj[node, new] = adj[new, node] = True
    return True


def copy_opinion(state: ODState, node: int, u: float) -> bool:
    """``node`` adopts the opinion of a uniformly drawn neighbour (index ``floor(u * degree)``);
    no neighbour: no change. Returns whether a neighbour was drawn."""
    neighbours = state.adjacency[node].nonzero()[0]
    if neighbours.size == 0:
        return False
    pick = min(int(u * neighbours.size), neighbours.size - 1)
    state.opinion[node] = state.opinion[neighbours[pick]]
    return True


def environment_moves(state: ODState, params: ODParams, rng: np.random.Generator) -> int:
    """The environment's part of a step; returns the number of rewiring events that happened.

    ``k_env = ceil(k_frac_env N)`` nodes drawn uniformly without replacement, processed in
    draw order (each sees the changes of the previous ones): with probability ``phi`` rewire,
    otherwise copy a neighbour's opinion. Randomness: the node draw, then three uniforms per
    selected node (the rewire coin, then the drop/neighbour choice, then the new partner), so
    the number of draws does not depend on the state.
    """
    n = len(state.opinion)
    k_env = params.k_env(n)
    nodes = rng.choice(n, size=k_env, replace=False).tolist()
    uniforms = rng.random((k_env, 3)).tolist()
    rewired = 0
    for node, (coin, u_a, u_b) in zip(nodes, uniforms, strict=True):
        if coin < params.phi:
            rewired += rewire(state, node, params.temperature, u_a, u_b)
        else:
            copy_opinion(state, node, u_a)
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
