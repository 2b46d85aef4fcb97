"""Initial states of the OD env: a connected Erdos-Renyi graph, uniform opinions and vibes."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

from graph_envs.od.types import ODParams, ODState


def connected_erdos_renyi(
    num_nodes: int, mean_degree: float, rng: np.random.Generator
) -> np.ndarray:
    """A connected graph close to Erdos-Renyi ``G(N, p)`` with ``p = mean_degree / (N - 1)``.

    At N = 1000 and mean degree 4 a plain draw is almost never connected (about 2% of the
    nodes are isolated), so resampling cannot work. Instead: draw ``G(N, p)``, put its
    connected components in a uniformly random order and join consecutive components by one
    edge between a uniformly chosen node of each. This keeps N nodes, adds exactly
    ``#components - 1`` edges (expected mean degree ``4 + 2 (E[#components] - 1) / N``, about
    4.04 at N = 1000) and yields a connected graph at every N. For N = 5, ``p = 1``: the
    complete graph.

    Returns:
        (N, N) bool adjacency, symmetric, no self-loops.
    """
    n = int(num_nodes)
    if n < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    p = min(1.0, mean_degree / (n - 1))
    adj = np.triu(rng.random((n, n)) < p, k=1)
    adj |= adj.T
    n_comp, labels = connected_components(csr_array(adj), directed=False)
    if n_comp > 1:
        order = rng.permutation(n_comp)
        members = [np.flatnonzero(labels == c) for c in order]
        picks = [int(m[rng.integers(len(m))]) for m in members]
        for a, b in zip(picks[:-1], picks[1:], strict=True):
            adj[a, b] = adj[b, a] = True
    return adj


class ODGenerator:
    """Samples an :class:`ODState`: connected ER graph, opinions uniform over
    ``0 .. num_opinions - 1``, vibes ``zeta ~ U[-1, 1]`` (drawn in that order)."""

    def __init__(self, num_nodes: int, params: ODParams | None = None) -> None:
        self.num_nodes = int(num_nodes)
        self.params = params or ODParams()

    def __call__(self, rng: np.random.Generator) -> ODState:
        """Sample an initial state from ``rng``."""
        n = self.num_nodes
        adj = connected_erdos_renyi(n, self.params.mean_degree, rng)
        opinion = rng.integers(0, self.params.num_opinions, size=n).astype(np.int64)
        vibe = rng.uniform(-1.0, 1.0, size=n)
        return ODState(adjacency=adj, opinion=opinion, vibe=vibe)
