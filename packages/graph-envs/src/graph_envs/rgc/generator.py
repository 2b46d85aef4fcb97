"""Initial RGC graph: connected Erdos-Renyi G(N, p = 0.2) (paper appendix, RGC), or G(N, m).

The paper draws G(N, p = 0.2) conditioned on being connected (the default, ``"gnp"``); the
original RNet-DQN code of Darvariu et al. draws G(N, m) with ``m = ceil(0.2 N(N-1)/2)`` edges
instead (``"gnm"``). Both are conditioned on connected and not complete by rejection.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from graph_envs.core.graph_ops import is_connected

EDGE_PROBABILITY = 0.2
MAX_ATTEMPTS = 100_000
InitialGraph = Literal["gnp", "gnm"]


def erdos_renyi(rng: np.random.Generator, num_nodes: int, p: float) -> np.ndarray:
    """(N, N) int8 adjacency of G(N, p): each of the N(N-1)/2 pairs is an edge w.p. ``p``."""
    upper = np.triu(rng.random((num_nodes, num_nodes)) < p, k=1)
    return (upper | upper.T).astype(np.int8)


def gnm_edge_count(num_nodes: int, p: float = EDGE_PROBABILITY) -> int:
    """RNet-DQN's edge count for G(N, m): ``m = ceil(p N(N-1)/2)`` (robust to float error)."""
    return math.ceil(round(p * num_nodes * (num_nodes - 1) / 2, 9))


def erdos_renyi_gnm(rng: np.random.Generator, num_nodes: int, num_edges: int) -> np.ndarray:
    """(N, N) int8 adjacency of G(N, m): ``num_edges`` distinct pairs drawn uniformly."""
    rows, cols = np.triu_indices(num_nodes, k=1)
    chosen = rng.choice(len(rows), size=num_edges, replace=False)
    adj = np.zeros((num_nodes, num_nodes), dtype=np.int8)
    adj[rows[chosen], cols[chosen]] = 1
    adj[cols[chosen], rows[chosen]] = 1
    return adj


def initial_graph(
    rng: np.random.Generator, num_nodes: int, kind: InitialGraph = "gnp"
) -> np.ndarray:
    """RGC's initial graph: connected, not complete G(N, p = 0.2) (``"gnp"``, the paper's) or
    G(N, m = ceil(0.2 N(N-1)/2)) (``"gnm"``, RNet-DQN's), by rejection sampling."""
    if kind == "gnp":
        return connected_erdos_renyi(rng, num_nodes)
    if kind == "gnm":
        m = gnm_edge_count(num_nodes)
        return _reject_until_connected(lambda: erdos_renyi_gnm(rng, num_nodes, m), num_nodes)
    raise ValueError(f"initial_graph must be 'gnp' or 'gnm', got {kind!r}")


def _reject_until_connected(draw, num_nodes: int) -> np.ndarray:
    full = num_nodes * (num_nodes - 1)
    for _ in range(MAX_ATTEMPTS):
        adj = draw()
        if int(adj.sum()) < full and is_connected(adj):
            return adj
    raise RuntimeError(f"no connected, incomplete initial graph on {num_nodes} nodes")


def connected_erdos_renyi(
    rng: np.random.Generator, num_nodes: int, p: float = EDGE_PROBABILITY
) -> np.ndarray:
    """G(N, p) conditioned on being connected and not complete, by rejection sampling.

    A complete graph leaves no edge to add (empty action mask), so it is rejected too; the
    conditional distribution is otherwise exactly G(N, p) given connectivity. At p = 0.2 the
    acceptance rate is lowest for N = 5 (about 8%), so ``MAX_ATTEMPTS`` is never reached in
    practice; if it is, ``RuntimeError`` is raised.
    """
    return _reject_until_connected(lambda: erdos_renyi(rng, num_nodes, p), num_nodes)
