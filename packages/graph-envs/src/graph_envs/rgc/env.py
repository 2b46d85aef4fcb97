"""Robust Graph Construction env (paper appendix "Environment Descriptions", RGC).

Deterministic and fully observable: the agent adds edges to a connected Erdos-Renyi graph,
within a budget of 5% of the possible edges, to increase its robustness under targeted node
removal. See ``docs/envs/rgc.md`` for the full specification and the choices made where the
paper is silent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from graph_envs.core.base import GraphEnv, InvalidActionMode
from graph_envs.core.schema import FeatureSchema
from graph_envs.rgc.generator import connected_erdos_renyi
from graph_envs.rgc.robustness import _robustness, default_num_samples
from graph_envs.rgc.types import RGCState

BUDGET_FRACTION = 0.05  # tau_0: 5% of the N(N-1)/2 possible edges
TAU_MAX = 0.1  # largest initial tau over N >= 5 (N = 5: ceil(0.5) / 10)


def edge_budget(num_nodes: int) -> int:
    """Edge additions per episode: ceil(5% of N(N-1)/2), so at least one for every N >= 5."""
    return math.ceil(BUDGET_FRACTION * num_pairs(num_nodes) - 1e-9)


def num_pairs(num_nodes: int) -> int:
    """N(N-1)/2, the number of possible edges (also the horizon H)."""
    return num_nodes * (num_nodes - 1) // 2


class RGCEnv(GraphEnv):
    """``graphenv/RGC-v0``: add edges to make a graph robust to targeted attacks.

    Observation features (schema): no node features; graph continuous ``tau`` (remaining
    budget as a fraction of the N(N-1)/2 possible edges) and ``k`` (= 2).
    Action: ``MultiDiscrete([N, N])``, the two endpoints of the edge to add; the mask holds the
    nodes with at least one non-neighbour. An existing edge or ``i == j`` is a noop that costs no
    budget.

    Args:
        num_nodes: number of nodes N (>= 5).
        invalid_action: ``"noop"`` (default) or ``"raise"``; see :class:`GraphEnv`.
        render_mode: ``None`` or ``"rgb_array"``.
        robustness_samples: tie-breaking orders averaged by the robustness (default
            :func:`~graph_envs.rgc.robustness.default_num_samples` of N).
    """

    _state: RGCState

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
        robustness_samples: int | None = None,
    ) -> None:
        super().__init__(num_nodes, invalid_action=invalid_action, render_mode=render_mode)
        if robustness_samples is None:
            robustness_samples = default_num_samples(self.num_nodes)
        if (
            isinstance(robustness_samples, bool)
            or not isinstance(robustness_samples, int)
            or robustness_samples < 1
        ):
            raise ValueError(f"robustness_samples must be a positive int, got {robustness_samples}")
        self.robustness_samples = robustness_samples
        self.horizon = num_pairs(self.num_nodes)  # H = N(N-1)/2

    def _make_schema(self) -> FeatureSchema:
        return FeatureSchema.build(
            graph_continuous=["tau", "k"],
            ranges={"tau": (0.0, TAU_MAX), "k": (2.0, 2.0)},
        )

    def _make_action_space(self) -> spaces.Space:
        return spaces.MultiDiscrete([self.num_nodes, self.num_nodes], dtype=np.int64)

    def robustness(self, adjacency: np.ndarray) -> float:
        """Targeted-attack robustness of ``adjacency`` with this env's number of samples."""
        return _robustness(np.asarray(adjacency), self.robustness_samples)

    def _initial_state(self, rng: np.random.Generator) -> RGCState:
        adjacency = connected_erdos_renyi(rng, self.num_nodes)
        return RGCState(
            adjacency=adjacency,
            degrees=adjacency.sum(axis=1, dtype=np.int64),
            budget=edge_budget(self.num_nodes),
            edges_added=0,
            robustness=self.robustness(adjacency),
        )

    @property
    def tau(self) -> float:
        """Remaining budget as a fraction of the N(N-1)/2 possible edges."""
        s = self._state
        return (s.budget - s.edges_added) / num_pairs(self.num_nodes)

    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        s = self._state
        reward = 0.0
        added = False
        if action is not None:
            i, j = int(action[0]), int(action[1])
            if i != j and not s.adjacency[i, j]:
                s.adjacency[i, j] = s.adjacency[j, i] = 1
                s.degrees[i] += 1
                s.degrees[j] += 1
                s.edges_added += 1  # tau decreases by 2 / (N(N-1))
                before = s.robustness
                s.robustness = self.robustness(s.adjacency)
                # Reward: increase in robustness under targeted removal (paper appendix, RGC).
                reward = s.robustness - before
                added = True
        # Termination at tau = 0 or after H = N(N-1)/2 steps (this one included).
        terminated = s.edges_added >= s.budget or self._steps + 1 >= self.horizon
        info = {"edge_added": added, "robustness": s.robustness}
        return reward, terminated, info

    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.num_nodes
        return np.zeros((n, 0), dtype=np.float32), np.zeros((n, 0), dtype=np.int64)

    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([self.tau, 2.0], dtype=np.float32), np.zeros(0, dtype=np.int64)

    def _mask(self) -> np.ndarray:
        # Paper: A(s) = {v | exists u, (u, v) not in E}: nodes with a non-neighbour other than
        # themselves, i.e. degree < N - 1.
        return self._state.degrees < self.num_nodes - 1

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """(N,) int8 indicator of the two endpoints (a single node when ``i == j``)."""
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[np.asarray(action, dtype=np.int64)] = 1
        return nodes

    def _is_valid(self, action: Any) -> bool:
        mask = self._mask()
        return bool(mask[int(action[0])] and mask[int(action[1])])

    def _rgb_node_values(self) -> tuple[np.ndarray, str]:
        return self._state.degrees.astype(np.float32), "degree"
