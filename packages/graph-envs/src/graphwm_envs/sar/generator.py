"""Initial SAR state: Delaunay graph, exit node, survivors and stabilities (paper appendix)."""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import Delaunay

from graphwm_envs.sar.types import SARParams, SARState

SURVIVOR_FRACTION = SARParams.survivor_fraction  # "30% of nodes, excluding the exit"
MAX_TRIANGULATION_ATTEMPTS = 100


def num_survivors(num_nodes: int, fraction: float = SURVIVOR_FRACTION) -> int:
    """Survivors placed at reset: 30% of the N - 1 non-exit nodes, rounded half up, at least 1."""
    return max(1, math.floor(fraction * (num_nodes - 1) + 0.5))


def delaunay_graph(
    rng: np.random.Generator, num_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Delaunay triangulation of ``num_nodes`` uniform points in the unit square.

    Returns ``(points (N, 2), indptr (N + 1,), indices)``: the neighbour lists in CSR form,
    sorted by neighbour index. Resamples (at most ``MAX_TRIANGULATION_ATTEMPTS`` times) in the
    probability-zero event that Qhull leaves a point out of the triangulation.
    """
    for _ in range(MAX_TRIANGULATION_ATTEMPTS):
        points = rng.random((num_nodes, 2))
        tri = Delaunay(points)
        if len(tri.coplanar) == 0:
            indptr, indices = tri.vertex_neighbor_vertices
            indptr = indptr.astype(np.int32)
            indices = indices.astype(np.int32)
            for v in range(num_nodes):  # sort each row (canonical CSR, deterministic order)
                indices[indptr[v] : indptr[v + 1]].sort()
            return points, indptr, indices
    raise RuntimeError(f"could not triangulate {num_nodes} points with every point a vertex")


def reverse_index(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """For each directed CSR entry (u -> v), the index of its reverse entry (v -> u)."""
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    # entries sorted by (row, col); the reverse of (u, v) is the entry (v, u)
    keys = rows.astype(np.int64) * n + indices
    reverse_keys = indices.astype(np.int64) * n + rows
    rev = np.searchsorted(keys, reverse_keys)
    if not np.array_equal(keys[rev], reverse_keys):
        raise ValueError("CSR structure is not symmetric")
    return rev


class SARGenerator:
    """Samples the initial SAR state from ``params`` as in the paper's appendix.

    The graph is the Delaunay triangulation of N uniform points; the exit is uniform; 30% of
    the other nodes (see :func:`num_survivors`) hold survivors; stabilities are U[0.5, 1] with
    the exit at 1; the agent starts at the exit, not escorting. Draws, in that order: points,
    exit, survivor nodes, stabilities.
    """

    def __init__(self, params: SARParams | None = None) -> None:
        self.params = params or SARParams()

    def __call__(self, rng: np.random.Generator, num_nodes: int) -> SARState:
        """Sample an initial state on ``num_nodes`` nodes from ``rng``."""
        return _initial_state(rng, int(num_nodes), self.params)


def _initial_state(rng: np.random.Generator, num_nodes: int, params: SARParams) -> SARState:
    n = num_nodes
    points, indptr, indices = delaunay_graph(rng, n)
    adjacency = np.zeros((n, n), dtype=np.int8)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    adjacency[rows, indices] = 1
    exit_node = int(rng.integers(n))
    others = np.delete(np.arange(n), exit_node)
    survivors = np.zeros(n, dtype=bool)
    count = num_survivors(n, params.survivor_fraction)
    survivors[rng.choice(others, size=count, replace=False)] = True
    stability = rng.uniform(params.stability_low, params.stability_high, size=n)
    stability[exit_node] = 1.0
    return SARState(
        adjacency=adjacency,
        positions=points,
        stability=stability,
        survivors=survivors,
        exit_node=exit_node,
        location=exit_node,
        escorting=False,
        num_initial_survivors=int(survivors.sum()),
        num_delivered=0,
        exit_reachable=np.ones(n, dtype=bool),  # a Delaunay triangulation is connected
        csr_indptr=indptr,
        csr_indices=indices,
        csr_reverse=reverse_index(indptr, indices),
        edge_alive=np.ones(len(indices), dtype=bool),
    )
