"""Initial states of the CF env: an SHK grid, its loads as capacities, a hidden xi."""

from __future__ import annotations

import numpy as np

from graphwm_envs.cf.loads import betweenness_load
from graphwm_envs.cf.shk import SHKParams, shk_graph
from graphwm_envs.cf.types import CFParams, CFState


class CFGenerator:
    """Samples a :class:`CFState`.

    The graph is an SHK graph (:func:`graphwm_envs.cf.shk.shk_graph`, the paper's parameters by
    default); ``capacity = load = c_0`` (paper: "the rated capacity of each node is fixed to
    c_0(v)"); then ``xi ~ U[xi_low, xi_high]``. All draws come from the given generator, in
    that order.
    """

    def __init__(self, params: CFParams | None = None, shk: SHKParams | None = None) -> None:
        self.params = params or CFParams()
        self.shk = shk or SHKParams()

    def __call__(self, rng: np.random.Generator, num_nodes: int) -> CFState:
        """Sample an initial state on ``num_nodes`` nodes from ``rng``."""
        graph = shk_graph(rng, int(num_nodes), self.shk)
        load = betweenness_load(graph.adjacency)
        xi = float(rng.uniform(self.params.xi_low, self.params.xi_high))
        return CFState(
            adjacency=graph.adjacency,
            load=load,
            capacity=load.copy(),
            xi=xi,
            positions=graph.positions,
        )
