"""State of the Robust Graph Construction env."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from graphwm_envs.core.params import check_choice, check_real

InitialGraph = Literal["gnp", "gnm"]


@dataclass(frozen=True)
class RGCParams:
    """Constants of the RGC env (paper appendix "Environment Descriptions", RGC).

    Args:
        edge_probability: p of the initial Erdos-Renyi graph (0.2).
        budget_fraction: edge additions per episode as a fraction of the N(N-1)/2 possible
            edges (5%, rounded up: at least one).
        initial_graph: ``"gnp"`` (the paper's G(N, p) conditioned on connected) or ``"gnm"``
            (RNet-DQN's G(N, m = ceil(p N(N-1)/2)), conditioned the same way; N >= 9).
    """

    edge_probability: float = 0.2
    budget_fraction: float = 0.05
    initial_graph: InitialGraph = "gnp"

    def __post_init__(self) -> None:
        check_real(self, "edge_probability", low=0.0, high=1.0, low_open=True, high_open=True)
        check_real(self, "budget_fraction", low=0.0, high=1.0, low_open=True)
        check_choice(self, "initial_graph", ("gnp", "gnm"))


@dataclass
class RGCState:
    """Full state of an RGC episode (the env is fully observable).

    Attributes:
        adjacency: (N, N) int8 current adjacency (edges are only ever added).
        degrees: (N,) int64 node degrees (kept in step with ``adjacency``).
        budget: total number of edge additions of the episode, ceil(5% of N(N-1)/2).
        edges_added: edge additions so far (noops excluded).
        robustness: targeted-attack robustness of the current graph (cached).
    """

    adjacency: np.ndarray
    degrees: np.ndarray
    budget: int
    edges_added: int
    robustness: float
