"""Node loads of the CF env: shortest-path betweenness normalised by the pairs of the whole graph.

Paper appendix "Cascading Failures" (after Motter and Lai 2002):

    c_t(v) = (1 / P) * sum_{u, w} paths_t(u, w | v) / paths_t(u, w),

where ``paths_t(u, w | v)`` counts the shortest ``u``-``w`` paths through ``v`` (``v`` not an
endpoint). We sum over *unordered* pairs ``{u, w}`` of nodes other than ``v`` and use
``P = N (N - 1) / 2``, the number of unordered node pairs of the *whole* graph (failed nodes stay
in the node set as isolated nodes, so ``P`` never changes during an episode). Hence every load
lies in ``[0, (N - 2) / N]`` (the centre of a star attains the maximum) and a load is comparable
across steps.

Library semantics (checked against networkx in the tests, to 1e-9 and in practice bit for bit):
for an undirected graph, ``igraph.Graph.betweenness()`` (python-igraph's C core, Brandes'
algorithm) returns exactly this sum over unordered pairs of nodes other than ``v`` (the
ordered-pair sum divided by 2), as does ``networkx.betweenness_centrality(normalized=False)``;
isolated nodes get 0. igraph has no normalisation option; networkx' and rustworkx'
``normalized=True`` would divide by ``(n-1)(n-2)/2`` of the graph they are given instead, so we
never use them and divide the unnormalised value by ``P`` ourselves.

igraph is used because it is the fastest exact implementation available here (about 2x faster
than single-threaded rustworkx and about 50x faster than networkx on a 1000-node SHK graph,
see ``benchmarks/bench_cf_load.py``). Its C core is single-threaded and accumulates the
per-source terms in a fixed order, so the loads (and hence replays) are deterministic to the
last bit.
"""

from __future__ import annotations

import igraph as ig
import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components


def pair_count(num_nodes: int) -> int:
    """``P = N (N - 1) / 2``: the number of unordered node pairs of the whole graph."""
    return num_nodes * (num_nodes - 1) // 2


def _check_adjacency(adjacency: np.ndarray) -> np.ndarray:
    """The adjacency as a bool array; ``ValueError`` unless square, symmetric, 0/1, no loops."""
    adj = np.asarray(adjacency)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be a square (N, N) matrix, got shape {adj.shape}")
    if adj.dtype != bool:
        if not np.isin(adj, (0, 1)).all():
            raise ValueError("adjacency must hold only 0/1 (or bool) entries")
        adj = adj.astype(bool)
    if not np.array_equal(adj, adj.T):
        raise ValueError("adjacency must be symmetric (an undirected graph)")
    if adj.diagonal().any():
        raise ValueError("adjacency must have a zero diagonal (no self-loops)")
    return adj


def _raw_betweenness(adj: np.ndarray) -> np.ndarray:
    """Unnormalised betweenness (sum over unordered pairs) of every node of ``adj``."""
    n = adj.shape[0]
    rows, cols = np.nonzero(np.triu(adj, k=1))
    graph = ig.Graph(n=n, edges=np.column_stack((rows, cols)).tolist(), directed=False)
    return np.asarray(graph.betweenness(directed=False), dtype=np.float64)


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
