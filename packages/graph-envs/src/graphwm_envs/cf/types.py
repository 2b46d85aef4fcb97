"""State and parameters of the CF env."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CFParams:
    """Constants of the CF env (paper appendix "Cascading Failures").

    Args:
        xi_low: lower end of the hidden safety factor's uniform range.
        xi_high: upper end of the hidden safety factor's uniform range.
        horizon_frac: horizon as a fraction of N (``H = ceil(horizon_frac * N)``).
    """

    xi_low: float = 1.1
    xi_high: float = 1.4
    horizon_frac: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 < self.xi_low <= self.xi_high:
            raise ValueError(f"need 0 < xi_low <= xi_high, got ({self.xi_low}, {self.xi_high})")
        if not self.horizon_frac > 0.0:
            raise ValueError(f"horizon_frac must be > 0, got {self.horizon_frac}")

    def horizon(self, num_nodes: int) -> int:
        """``H = ceil(N / 2)`` (odd N rounds up), at least 1."""
        return max(1, math.ceil(round(self.horizon_frac * num_nodes, 9)))


@dataclass
class CFState:
    """Full state of a CF episode.

    Attributes:
        adjacency: (N, N) bool, symmetric, no self-loops. Failed nodes keep their index and
            have no edges.
        load: (N,) float64, ``load_t(v)``: betweenness normalised by ``P = N(N-1)/2``.
        capacity: (N,) float64, rated capacity ``c_0(v)`` (the initial load).
        xi: hidden safety factor, fixed for the episode (never observed).
        positions: (N, 2) float64 SHK coordinates (used for rendering only).
    """

    adjacency: np.ndarray
    load: np.ndarray
    capacity: np.ndarray
    xi: float
    positions: np.ndarray
