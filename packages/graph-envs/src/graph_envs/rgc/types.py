"""State of the Robust Graph Construction env."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
