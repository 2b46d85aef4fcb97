"""Search and Rescue env (paper appendix "Environment Descriptions", Search and Rescue).

Stochastic and partially observable: the agent walks a fragile Delaunay graph, collects
survivors and escorts them, one at a time, to the exit. See ``docs/envs/sar.md`` for the full
specification, including every choice made where the paper is silent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graph_envs.core.base import GraphEnv, InvalidActionMode
from graph_envs.core.schema import FeatureSchema
from graph_envs.sar.dynamics import collapse_edges, visible_nodes
from graph_envs.sar.generator import SARGenerator
from graph_envs.sar.types import SARParams, SARState


class SAREnv(GraphEnv):
    """``graphenv/SAR-v0``: navigate a collapsing graph to rescue survivors.

    Observation features (schema): node continuous ``stability``; node categorical
    ``survivor_present`` (only within two hops of the agent), ``exit_node``,
    ``current_location``; graph continuous ``k`` (= 1); graph categorical ``escorting``.
    Action: ``Discrete(N)``, the node to move to; the mask is the agent's current neighbours.

    Args:
        num_nodes: number of nodes N (5 <= N <= 5000).
        invalid_action: ``"noop"`` (default) or ``"raise"``; see :class:`GraphEnv`.
        render_mode: ``None`` or ``"rgb_array"``.
        params: :class:`SARParams` (the paper's constants by default).
    """

    _state: SARState
    max_nodes = 5000
    max_nodes_reason = (
        "every observation carries a dense (N, N) int8 adjacency (25 MB at N = 5000), so "
        "rollout buffers and recorded episodes grow as N^2"
    )

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        params: SARParams | None = None,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
    ) -> None:
        if params is not None and not isinstance(params, SARParams):
            raise TypeError(f"params must be a SARParams, got {type(params).__name__}")
        self.params = params or SARParams()
        super().__init__(num_nodes, invalid_action=invalid_action, render_mode=render_mode)
        self._generator = SARGenerator(self.params)

    def _make_schema(self) -> FeatureSchema:
        return FeatureSchema.build(
            node_continuous=["stability"],
            node_categorical={"survivor_present": 2, "exit_node": 2, "current_location": 2},
            graph_continuous=["k"],
            graph_categorical={"escorting": 2},
            ranges={"stability": (0.0, 1.0), "k": (1.0, 1.0)},
        )

    def _make_action_space(self) -> spaces.Space:
        return spaces.Discrete(self.num_nodes)

    def _initial_state(self, rng: np.random.Generator) -> SARState:
        return self._generator(rng, self.num_nodes)

    def _max_steps(self) -> int:
        # Truncation after N x (initial number of survivors) transitions.
        return self.num_nodes * self._state.num_initial_survivors

    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        s = self._state
        p = self.params
        reward = p.step_reward  # -1 per transition, noops included
        info: dict[str, Any] = {
            "collected": False,
            "delivered": False,
            "stability_loss": False,
            "edges_removed": 0,
        }
        if action is not None:
            u = int(action)
            s.location = u
            # Deliver: escorting and arriving at the exit.
            if s.escorting and u == s.exit_node:
                s.escorting = False
                s.num_delivered += 1
                reward += p.deliver_reward
                info["delivered"] = True
            # Collect: not escorting and the node holds a survivor (an escorting agent leaves
            # the survivor where it is; the exit never holds one, so the order is immaterial).
            elif not s.escorting and s.survivors[u]:
                s.survivors[u] = False
                s.escorting = True
                reward += p.collect_reward
                info["collected"] = True
            # Stability loss 0.3 w.p. 0.5 at the visited node, never at the exit.
            if u != s.exit_node and rng.random() < p.stability_loss_prob:
                s.stability[u] = max(0.0, s.stability[u] - p.stability_loss)
                info["stability_loss"] = True
            info["edges_removed"] = collapse_edges(s, u, p.collapse_threshold)
        extra, terminated, outcome = self._termination()
        info["outcome"] = outcome
        return reward + extra, terminated, info

    def _termination(self) -> tuple[float, bool, str | None]:
        """Terminal bonus/penalty, in the order: all rescued, stranded, nothing reachable."""
        s, p = self._state, self.params
        remaining = s.num_remaining
        if remaining == 0:
            return p.all_rescued_reward, True, "all_rescued"
        if not s.exit_reachable[s.location]:
            return p.stranded_penalty + p.per_survivor_penalty * remaining, True, "stranded"
        if not s.escorting and not np.any(s.survivors & s.exit_reachable):
            return p.per_survivor_penalty * remaining, True, "survivors_unreachable"
        return 0.0, False, None

    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        s = self._state
        n = self.num_nodes
        node_cont = s.stability.astype(np.float32).reshape(n, 1)
        node_cat = np.zeros((n, 3), dtype=np.int64)
        # Partial observability: survivors shown only within two hops of the agent.
        node_cat[:, 0] = s.survivors & visible_nodes(s, self.params.observation_hops)
        node_cat[s.exit_node, 1] = 1
        node_cat[s.location, 2] = 1
        return node_cont, node_cat

    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.array([1.0], dtype=np.float32),
            np.array([int(self._state.escorting)], dtype=np.int64),
        )

    def _mask(self) -> np.ndarray:
        # Paper: A(s) = {v | (u, v) in E} for the current location u.
        return self._state.adjacency[self._state.location].astype(bool)

    def _is_valid(self, action: Any) -> bool:
        return bool(self._state.adjacency[self._state.location, int(action)])

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """One-hot (N,) int8 of the target node."""
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[int(action)] = 1
        return nodes

    def _node_positions(self) -> np.ndarray:
        return self._state.positions
