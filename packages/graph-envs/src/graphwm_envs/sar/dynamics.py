"""SAR transition pieces: stability loss, edge collapse, reachability, partial observation."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order

from graphwm_envs.sar.types import SARParams, SARState

# The paper's values (the defaults of SARParams).
STABILITY_LOSS = SARParams.stability_loss  # "u loses 0.3 stability with probability 0.5"
STABILITY_LOSS_PROB = SARParams.stability_loss_prob
COLLAPSE_THRESHOLD = SARParams.collapse_threshold  # (u, v) collapses when s(u) + s(v) < 1
OBSERVATION_HOPS = SARParams.observation_hops  # survivors are revealed within two hops


def collapse_edges(state: SARState, node: int, threshold: float = COLLAPSE_THRESHOLD) -> int:
    """Remove every edge (node, v) with ``stability(node) + stability(v) < 1``; return the count.

    Paper appendix (SAR): "The environment then removes every edge (u, v) incident to the
    visited node for which stability(u) + stability(v) < 1". Updates ``adjacency``,
    ``edge_alive`` and, if anything collapsed, the ``exit_reachable`` cache.
    """
    lo, hi = state.csr_indptr[node], state.csr_indptr[node + 1]
    entries = np.arange(lo, hi)[state.edge_alive[lo:hi]]
    neighbours = state.csr_indices[entries]
    collapse = state.stability[node] + state.stability[neighbours] < threshold
    if not collapse.any():
        return 0
    dead = entries[collapse]
    state.edge_alive[dead] = False
    state.edge_alive[state.csr_reverse[dead]] = False
    gone = neighbours[collapse]
    state.adjacency[node, gone] = 0
    state.adjacency[gone, node] = 0
    state.exit_reachable = reachable_mask(state, state.exit_node)
    return int(collapse.sum())


def reachable_mask(state: SARState, source: int) -> np.ndarray:
    """Boolean (N,) mask of the nodes connected to ``source`` in the current graph."""
    n = len(state.csr_indptr) - 1
    alive = state.edge_alive
    rows_alive = np.repeat(np.arange(n), np.diff(state.csr_indptr))[alive]
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows_alive, minlength=n), out=indptr[1:])
    indices = state.csr_indices[alive]
    graph = csr_array((np.ones(len(indices), dtype=np.int8), indices, indptr), shape=(n, n))
    order = breadth_first_order(graph, source, directed=True, return_predecessors=False)
    mask = np.zeros(n, dtype=bool)
    mask[order] = True
    return mask


def visible_nodes(state: SARState, hops: int = OBSERVATION_HOPS) -> np.ndarray:
    """Boolean (N,) mask of the nodes within ``hops`` edges of the agent (current graph).

    Breadth-first over the CSR neighbour lists, so the cost is the size of the
    neighbourhood, not O(N^2).
    """
    n = len(state.csr_indptr) - 1
    mask = np.zeros(n, dtype=bool)
    mask[state.location] = True
    frontier = np.array([state.location])
    for _ in range(hops):
        if frontier.size == 0:
            break
        nxt = np.concatenate([state.alive_neighbours(int(v)) for v in frontier])
        nxt = nxt[~mask[nxt]]
        mask[nxt] = True
        frontier = np.unique(nxt)
    return mask
