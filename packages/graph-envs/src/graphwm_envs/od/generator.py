"""Initial states of the OD env: a connected Erdos-Renyi graph, uniform opinions and vibes."""

from __future__ import annotations

import numpy as np

from graphwm_envs.core.graph_ops import connected_erdos_renyi
from graphwm_envs.od.types import ODParams, ODState


class ODGenerator:
    """Samples an :class:`ODState` from ``params``: a connected Erdos-Renyi graph with
    ``p = mean_degree / (N - 1)`` (``method="join"`` of
    :func:`~graphwm_envs.core.graph_ops.connected_erdos_renyi`: a plain draw at N = 1000 is
    almost never connected), opinions uniform over ``0 .. num_opinions - 1``, vibes
    ``zeta ~ U[-1, 1]`` (drawn in that order). At N = 5, ``p = 1``: the complete graph.
    """

    def __init__(self, params: ODParams | None = None) -> None:
        self.params = params or ODParams()

    def __call__(self, rng: np.random.Generator, num_nodes: int) -> ODState:
        """Sample an initial state on ``num_nodes`` nodes from ``rng``."""
        n = int(num_nodes)
        p = min(1.0, self.params.mean_degree / (n - 1))
        adj = connected_erdos_renyi(rng, n, p, method="join")
        opinion = rng.integers(0, self.params.num_opinions, size=n).astype(np.int64)
        vibe = rng.uniform(-1.0, 1.0, size=n)
        return ODState(adjacency=adj, opinion=opinion, vibe=vibe)
