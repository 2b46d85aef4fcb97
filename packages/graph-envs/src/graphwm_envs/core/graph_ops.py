"""Small graph helpers on dense adjacency matrices (scipy's compiled csgraph routines)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, connected_components

MAX_ATTEMPTS = 100_000  # rejection sampling gives up (RuntimeError) after this many draws


def component_labels(adjacency: np.ndarray) -> np.ndarray:
    """Connected-component label of every node (isolated nodes get their own label)."""
    _, labels = connected_components(csr_array(adjacency), directed=False)
    return labels


def is_connected(adjacency: np.ndarray) -> bool:
    """Whether the graph is connected (a single component)."""
    n_comp, _ = connected_components(csr_array(adjacency), directed=False)
    return n_comp == 1


def largest_component_size(adjacency: np.ndarray) -> int:
    """Number of nodes in the largest connected component."""
    return int(np.bincount(component_labels(adjacency)).max())


def reachable_from(adjacency: np.ndarray, source: int) -> np.ndarray:
    """Boolean (N,) mask of the nodes reachable from ``source`` (itself included)."""
    order = breadth_first_order(
        csr_array(adjacency), source, directed=False, return_predecessors=False
    )
    mask = np.zeros(adjacency.shape[0], dtype=bool)
    mask[order] = True
    return mask


def within_hops(adjacency: np.ndarray, source: int, hops: int) -> np.ndarray:
    """Boolean (N,) mask of the nodes at most ``hops`` edges from ``source``.

    Touches only the rows of the frontier nodes (O(frontier * N) per hop, not O(N^2)).
    """
    mask = np.zeros(adjacency.shape[0], dtype=bool)
    mask[source] = True
    frontier = np.array([source])
    for _ in range(hops):
        if frontier.size == 0:
            break
        reached = np.any(adjacency[frontier] != 0, axis=0) & ~mask
        mask |= reached
        frontier = np.flatnonzero(reached)
    return mask


def erdos_renyi(rng: np.random.Generator, num_nodes: int, p: float) -> np.ndarray:
    """(N, N) bool adjacency of G(N, p): each of the N(N-1)/2 pairs is an edge w.p. ``p``.

    Draws one (N, N) uniform array and keeps its strict upper triangle.
    """
    upper = np.triu(rng.random((num_nodes, num_nodes)) < p, k=1)
    return upper | upper.T


def connected_erdos_renyi(
    rng: np.random.Generator,
    num_nodes: int,
    p: float,
    *,
    method: Literal["reject", "join"] = "reject",
) -> np.ndarray:
    """A connected G(N, p) graph as an (N, N) bool adjacency.

    ``method="reject"`` (RGC): G(N, p) *conditioned* on being connected and not complete, by
    rejection sampling (a complete graph leaves nothing to add); exact, but hopeless when a
    plain draw is rarely connected. ``RuntimeError`` after ``MAX_ATTEMPTS`` draws.

    ``method="join"`` (OD, mean degree 4 up to N = 1000, where about 2% of the nodes of a
    plain draw are isolated): one G(N, p) draw, its connected components put in a uniformly
    random order and consecutive components joined by one edge between a uniformly chosen
    node of each. Adds exactly ``#components - 1`` edges; connected at every N.
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    if method == "reject":
        full = num_nodes * (num_nodes - 1)
        for _ in range(MAX_ATTEMPTS):
            adj = erdos_renyi(rng, num_nodes, p)
            if int(adj.sum()) < full and is_connected(adj):
                return adj
        raise RuntimeError(f"no connected G({num_nodes}, {p}) in {MAX_ATTEMPTS} draws")
    if method == "join":
        adj = erdos_renyi(rng, num_nodes, p)
        n_comp, labels = connected_components(csr_array(adj), directed=False)
        if n_comp > 1:
            order = rng.permutation(n_comp)
            members = [np.flatnonzero(labels == c) for c in order]
            picks = [int(m[rng.integers(len(m))]) for m in members]
            for a, b in zip(picks[:-1], picks[1:], strict=True):
                adj[a, b] = adj[b, a] = True
        return adj
    raise ValueError(f"method must be 'reject' or 'join', got {method!r}")
