"""State of the Search and Rescue env."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
