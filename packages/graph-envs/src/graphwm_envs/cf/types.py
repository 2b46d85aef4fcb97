"""State and parameters of the CF env."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphwm_envs.core.params import check_real


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
        check_real(self, "xi_low", low=0.0, low_open=True)
        if check_real(self, "xi_high") < self.xi_low:
            raise ValueError(
                f"CFParams needs xi_low <= xi_high, got xi_low={self.xi_low}, "
                f"xi_high={self.xi_high}"
            )
        check_real(self, "horizon_frac", low=0.0, low_open=True)

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
