"""Initial RGC graph: connected Erdos-Renyi G(N, p = 0.2) (paper appendix, RGC)."""

from __future__ import annotations

import numpy as np

from graph_envs.core.graph_ops import is_connected

EDGE_PROBABILITY = 0.2
MAX_ATTEMPTS = 100_000


def erdos_renyi(rng: np.random.Generator, num_nodes: int, p: float) -> np.ndarray:
    """(N, N) int8 adjacency of G(N, p): each of the N(N-1)/2 pairs is an edge w.p. ``p``."""
    upper = np.triu(rng.random((num_nodes, num_nodes)) < p, k=1)
    return (upper | upper.T).astype(np.int8)


def connected_erdos_renyi(
    rng: np.random.Generator, num_nodes: int, p: float = EDGE_PROBABILITY
) -> np.ndarray:
    """G(N, p) conditioned on being connected and not complete, by rejection sampling.

    A complete graph leaves no edge to add (empty action mask), so it is rejected too; the
    conditional distribution is otherwise exactly G(N, p) given connectivity. At p = 0.2 the
    acceptance rate is lowest for N = 5 (about 8%), so ``MAX_ATTEMPTS`` is never reached in
    practice; if it is, ``RuntimeError`` is raised.
    """
    full = num_nodes * (num_nodes - 1)
    for _ in range(MAX_ATTEMPTS):
        adj = erdos_renyi(rng, num_nodes, p)
        if int(adj.sum()) < full and is_connected(adj):
            return adj
    raise RuntimeError(f"no connected G({num_nodes}, {p}) in {MAX_ATTEMPTS} draws")
