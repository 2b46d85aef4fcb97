"""Initial RGC graph: connected Erdos-Renyi G(N, p = 0.2) (paper appendix, RGC), or G(N, m).

The paper draws G(N, p = 0.2) conditioned on being connected (the default, ``"gnp"``); the
original RNet-DQN code of Darvariu et al. draws G(N, m) with ``m = ceil(0.2 N(N-1)/2)`` edges
instead (``"gnm"``). Both are conditioned on connected and not complete by rejection.
"""

from __future__ import annotations

import math

import numpy as np

from graphwm_envs.core.graph_ops import MAX_ATTEMPTS, connected_erdos_renyi, is_connected
from graphwm_envs.rgc.types import RGCParams


def gnm_edge_count(num_nodes: int, p: float) -> int:
    """RNet-DQN's edge count for G(N, m): ``m = ceil(p N(N-1)/2)`` (robust to float error)."""
    return math.ceil(round(p * num_nodes * (num_nodes - 1) / 2, 9))


def erdos_renyi_gnm(rng: np.random.Generator, num_nodes: int, num_edges: int) -> np.ndarray:
    """(N, N) bool adjacency of G(N, m): ``num_edges`` distinct pairs drawn uniformly."""
    rows, cols = np.triu_indices(num_nodes, k=1)
    chosen = rng.choice(len(rows), size=num_edges, replace=False)
    adj = np.zeros((num_nodes, num_nodes), dtype=bool)
    adj[rows[chosen], cols[chosen]] = True
    adj[cols[chosen], rows[chosen]] = True
    return adj


class RGCGenerator:
    """Samples RGC's initial graph, an (N, N) int8 adjacency, from ``params``.

    ``"gnp"``: :func:`~graphwm_envs.core.graph_ops.connected_erdos_renyi` with rejection (exactly
    G(N, p) given connected and not complete; acceptance is lowest at N = 5, about 8%).
    ``"gnm"``: G(N, m) drawn until connected and not complete (needs m >= N - 1, i.e.
    N >= 9 at p = 0.2; :meth:`check_size` says so).
    """

    def __init__(self, params: RGCParams | None = None) -> None:
        self.params = params or RGCParams()

    def check_size(self, num_nodes: int) -> None:
        """Raise ``ValueError`` if ``num_nodes`` cannot hold a connected initial graph."""
        p = self.params
        if p.initial_graph == "gnm":
            m = gnm_edge_count(num_nodes, p.edge_probability)
            if m < num_nodes - 1:
                raise ValueError(
                    f"initial_graph='gnm' needs num_nodes >= 9: G(N, m = ceil(0.2 N(N-1)/2)) has "
                    f"{m} edges at N = {num_nodes}, fewer than the N - 1 a connected graph needs"
                )

    def __call__(self, rng: np.random.Generator, num_nodes: int) -> np.ndarray:
        """Sample an initial adjacency on ``num_nodes`` nodes from ``rng``."""
        p = self.params
        if p.initial_graph == "gnp":
            adj = connected_erdos_renyi(rng, num_nodes, p.edge_probability, method="reject")
            return adj.astype(np.int8)
        self.check_size(num_nodes)
        m = gnm_edge_count(num_nodes, p.edge_probability)
        full = num_nodes * (num_nodes - 1)
        for _ in range(MAX_ATTEMPTS):
            adj = erdos_renyi_gnm(rng, num_nodes, m)
            if int(adj.sum()) < full and is_connected(adj):
                return adj.astype(np.int8)
        raise RuntimeError(f"no connected G({num_nodes}, m={m}) in {MAX_ATTEMPTS} draws")
