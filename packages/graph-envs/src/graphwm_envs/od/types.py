"""State and parameters of the OD env."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphwm_envs.core.params import check_int, check_real


def fraction_count(num_nodes: int, frac: float) -> int:
    """``ceil(N * frac)`` robust to float error (``0.1 * 30`` is ``3.0000000000000004``)."""
    return max(1, math.ceil(round(num_nodes * frac, 9)))


@dataclass(frozen=True)
class ODParams:
    """Constants of the OD env (paper appendix "Opinion Dynamics").

    Args:
        num_opinions: opinions are ``0 .. num_opinions - 1``.
        target_opinion: the opinion the agent promotes (0).
        phi: probability that an env-selected node rewires instead of copying (0.458).
        temperature: ``T`` of the vibe-distance softmax (0.1).
        adopt_prob: probability that an agent-selected node adopts the target opinion (0.3).
        k_frac: agent selections as a fraction of N (``k = ceil(0.05 N)``).
        k_frac_env: env selections as a fraction of N (``k_env = ceil(0.1 N)``).
        horizon: episode length (50), reached by truncation.
        mean_degree: expected degree of the initial Erdos-Renyi graph (4).
    """

    num_opinions: int = 5
    target_opinion: int = 0
    phi: float = 0.458
    temperature: float = 0.1
    adopt_prob: float = 0.3
    k_frac: float = 0.05
    k_frac_env: float = 0.1
    horizon: int = 50
    mean_degree: float = 4.0

    def __post_init__(self) -> None:
        check_int(self, "num_opinions", low=2)
        check_int(self, "target_opinion", low=0, high=self.num_opinions - 1)
        for name in ("phi", "adopt_prob", "k_frac", "k_frac_env"):
            check_real(self, name, low=0.0, high=1.0)
        check_real(self, "temperature", low=0.0, low_open=True)
        check_int(self, "horizon", low=1)
        check_real(self, "mean_degree", low=0.0, low_open=True)

    def k(self, num_nodes: int) -> int:
        """Agent selections per step, ``ceil(k_frac N)``."""
        return fraction_count(num_nodes, self.k_frac)

    def k_env(self, num_nodes: int) -> int:
        """Env selections per step, ``ceil(k_frac_env N)``."""
        return fraction_count(num_nodes, self.k_frac_env)


@dataclass
class ODState:
    """Full state of an OD episode (fully observable).

    Attributes:
        adjacency: (N, N) bool, symmetric, no self-loops.
        opinion: (N,) int64 in ``0 .. num_opinions - 1``.
        vibe: (N,) float64 ``zeta(v)`` in [-1, 1], fixed for the episode.
    """

    adjacency: np.ndarray
    opinion: np.ndarray
    vibe: np.ndarray
