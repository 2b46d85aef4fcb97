"""Small graph helpers on dense adjacency matrices (scipy's compiled csgraph routines)."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, connected_components


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
