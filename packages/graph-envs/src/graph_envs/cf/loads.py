"""Node loads of the CF env: shortest-path betweenness normalised by the pairs of the whole graph.

Paper appendix "Cascading Failures" (after Motter and Lai 2002):

    c_t(v) = (1 / P) * sum_{u, w} paths_t(u, w | v) / paths_t(u, w),

where ``paths_t(u, w | v)`` counts the shortest ``u``-``w`` paths through ``v`` (``v`` not an
endpoint). We sum over *unordered* pairs ``{u, w}`` of nodes other than ``v`` and use
``P = N (N - 1) / 2``, the number of unordered node pairs of the *whole* graph (failed nodes stay
in the node set as isolated nodes, so ``P`` never changes during an episode). Hence every load
lies in ``[0, (N - 2) / N]`` (the centre of a star attains the maximum) and a load is comparable
across steps.

Library semantics (checked against networkx in the tests): for undirected graphs both
``networkx.betweenness_centrality(normalized=False)`` and
``rustworkx.betweenness_centrality(normalized=False, endpoints=False)`` return exactly this sum
over unordered pairs (the ordered-pair sum divided by 2). Their ``normalized=True`` options divide
by ``(n-1)(n-2)/2`` of the graph they are given instead, so we never use them; we divide the
unnormalised value by ``P`` ourselves.

rustworkx runs single-threaded here (``parallel_threshold`` above any N): its multithreaded
accumulation adds the per-source terms in a timing-dependent order, which makes the last bits of
the loads (and hence replays) non-deterministic.
"""

from __future__ import annotations

import numpy as np
import rustworkx as rx
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

_SINGLE_THREADED = 2**62


def pair_count(num_nodes: int) -> int:
    """``P = N (N - 1) / 2``: the number of unordered node pairs of the whole graph."""
    return num_nodes * (num_nodes - 1) // 2


def _check_adjacency(adjacency: np.ndarray) -> np.ndarray:
    adj = np.asarray(adjacency)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be a square (N, N) matrix, got shape {adj.shape}")
    return adj.astype(bool, copy=False)


def _raw_betweenness(adj: np.ndarray) -> np.ndarray:
    """Unnormalised betweenness (sum over unordered pairs) of every node of ``adj``."""
    n = adj.shape[0]
    rows, cols = np.nonzero(np.triu(adj, k=1))
    graph = rx.PyGraph(multigraph=False, node_count_hint=n, edge_count_hint=len(rows))
    graph.add_nodes_from(range(n))
    graph.add_edges_from_no_data(list(zip(rows.tolist(), cols.tolist(), strict=True)))
    result = rx.betweenness_centrality(
        graph, normalized=False, endpoints=False, parallel_threshold=_SINGLE_THREADED
    )
    return np.fromiter((result[i] for i in range(n)), dtype=np.float64, count=n)


def betweenness_load(adjacency: np.ndarray) -> np.ndarray:
    """Load ``c(v)`` of every node (float64, shape (N,)), normalised by ``P = N(N-1)/2``.

    Args:
        adjacency: (N, N) symmetric 0/1 (or bool) adjacency matrix; isolated nodes allowed.
    """
    adj = _check_adjacency(adjacency)
    n = adj.shape[0]
    if n < 3:
        return np.zeros(n, dtype=np.float64)
    return _raw_betweenness(adj) / pair_count(n)


def update_loads(adjacency: np.ndarray, loads: np.ndarray, touched: np.ndarray) -> np.ndarray:
    """Loads after edges next to ``touched`` nodes were removed, recomputing only what changed.

    Betweenness only counts pairs inside a connected component, so the loads of components
    that contain no touched node are unchanged. Every component holding a touched node (the
    nodes that lost edges and their former neighbours) is recomputed exactly, still normalised
    by ``P`` of the whole graph.

    Args:
        adjacency: the new (N, N) adjacency.
        loads: (N,) loads of the previous adjacency (not modified).
        touched: indices of every node whose incident edges changed, and their former
            neighbours.

    Returns:
        A new (N,) float64 array equal to ``betweenness_load(adjacency)``.
    """
    adj = _check_adjacency(adjacency)
    n = adj.shape[0]
    loads = np.asarray(loads, dtype=np.float64)
    if loads.shape != (n,):
        raise ValueError(f"loads has shape {loads.shape}, expected ({n},)")
    touched = np.asarray(touched, dtype=np.int64).reshape(-1)
    new_loads = loads.copy()
    if touched.size == 0 or n < 3:
        return new_loads if n >= 3 else np.zeros(n, dtype=np.float64)
    _, labels = connected_components(csr_array(adj), directed=False)
    nodes = np.flatnonzero(np.isin(labels, labels[touched]))
    sub = adj[np.ix_(nodes, nodes)]
    new_loads[nodes] = _raw_betweenness(sub) / pair_count(n)
    return new_loads
