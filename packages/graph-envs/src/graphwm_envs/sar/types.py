"""State of the Search and Rescue env."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphwm_envs.core.params import check_int, check_real


@dataclass(frozen=True)
class SARParams:
    """Constants of the SAR env (paper appendix "Environment Descriptions", Search and Rescue).

    Args:
        survivor_fraction: survivors placed at reset, as a fraction of the N - 1 non-exit nodes
            (30%, rounded half up, at least one).
        stability_low: lower end of the initial stabilities ``U[low, high]`` (0.5).
        stability_high: upper end (1.0); the exit always starts at 1.
        stability_loss: stability a visited non-exit node loses (0.3) ...
        stability_loss_prob: ... with this probability (0.5).
        collapse_threshold: an edge (u, v) of the visited node u collapses when
            ``stability(u) + stability(v) < collapse_threshold`` (1).
        observation_hops: survivors are visible within this many hops of the agent (2).
        step_reward: every transition, noops included (-1).
        collect_reward: picking up a survivor (+1).
        deliver_reward: bringing the escorted survivor to the exit (+10).
        all_rescued_reward: when the last survivor is delivered (+5).
        stranded_penalty: when the agent's node no longer reaches the exit (-30) ...
        per_survivor_penalty: ... plus this per undelivered survivor (-5), which alone is the
            penalty when the remaining survivors are unreachable.
    """

    survivor_fraction: float = 0.3
    stability_low: float = 0.5
    stability_high: float = 1.0
    stability_loss: float = 0.3
    stability_loss_prob: float = 0.5
    collapse_threshold: float = 1.0
    observation_hops: int = 2
    step_reward: float = -1.0
    collect_reward: float = 1.0
    deliver_reward: float = 10.0
    all_rescued_reward: float = 5.0
    stranded_penalty: float = -30.0
    per_survivor_penalty: float = -5.0

    def __post_init__(self) -> None:
        for name in ("survivor_fraction", "stability_loss", "stability_loss_prob"):
            check_real(self, name, low=0.0, high=1.0)
        check_real(self, "stability_low", low=0.0, high=1.0)
        check_real(self, "stability_high", low=self.stability_low, high=1.0)
        # stabilities lie in [0, 1], so an edge's sum lies in [0, 2]
        check_real(self, "collapse_threshold", low=0.0, high=2.0)
        check_int(self, "observation_hops", low=0)
        for name in (
            "step_reward",
            "collect_reward",
            "deliver_reward",
            "all_rescued_reward",
            "stranded_penalty",
            "per_survivor_penalty",
        ):
            check_real(self, name)


@dataclass
class SARState:
    """Full (true) state of a SAR episode; the observation hides part of ``survivors``.

    Attributes:
        adjacency: (N, N) int8 current adjacency (edges only ever disappear).
        positions: (N, 2) float64 Delaunay points in the unit square (used for rendering).
        stability: (N,) float64 node stabilities in [0, 1].
        survivors: (N,) bool true survivor presence (a collected survivor is no longer on a
            node; it travels with the agent, see ``escorting``).
        exit_node: index of the exit node.
        location: index of the agent's current node.
        escorting: whether the agent carries a survivor (at most one).
        num_initial_survivors: survivors placed at reset.
        num_delivered: survivors delivered to the exit so far.
        exit_reachable: (N,) bool cache of the nodes connected to the exit in ``adjacency``.
        csr_indptr: (N + 1,) int32 CSR row pointers of the *initial* graph (both directions).
        csr_indices: (2E,) int32 CSR column indices of the initial graph.
        csr_reverse: (2E,) int64 index of the reverse direction of each directed entry.
        edge_alive: (2E,) bool whether each directed entry of the initial graph still exists.
    """

    adjacency: np.ndarray
    positions: np.ndarray
    stability: np.ndarray
    survivors: np.ndarray
    exit_node: int
    location: int
    escorting: bool
    num_initial_survivors: int
    num_delivered: int
    exit_reachable: np.ndarray
    csr_indptr: np.ndarray
    csr_indices: np.ndarray
    csr_reverse: np.ndarray
    edge_alive: np.ndarray

    @property
    def num_remaining(self) -> int:
        """Undelivered survivors (those still on the graph plus the escorted one)."""
        return self.num_initial_survivors - self.num_delivered

    def alive_neighbours(self, node: int) -> np.ndarray:
        """Current neighbours of ``node`` (from the CSR structure, O(initial degree))."""
        lo, hi = self.csr_indptr[node], self.csr_indptr[node + 1]
        return self.csr_indices[lo:hi][self.edge_alive[lo:hi]]
