"""``graphenv/CF-v0``: Cascading Failures (paper appendix "Cascading Failures").

Stochastic and partially observable: the safety factor ``xi`` is hidden (kept in the state and
in :meth:`clone_state` snapshots, never in observations or infos). See ``docs/envs/cf.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graph_envs.cf.dynamics import cascade_step
from graph_envs.cf.generator import CFGenerator
from graph_envs.cf.shk import SHKParams
from graph_envs.cf.types import CFParams, CFState
from graph_envs.core.base import GraphEnv, InvalidActionMode
from graph_envs.core.graph_ops import largest_component_size
from graph_envs.core.schema import FeatureSchema


class CFEnv(GraphEnv):
    """Cascading failures on an SHK power grid.

    Observation: ``node_continuous = [load, capacity]`` (both in [0, 1]),
    ``graph_continuous = [k]`` (k = 1), no categorical features. Action ``Discrete(N)``: the
    node to disconnect; the mask holds the nodes with at least one edge.

    Each step: failures are drawn on the previous loads, the agent's node and the failed nodes
    lose all edges, loads are recomputed. Reward ``-1/H`` per step, and ``-|lcc|/N`` more at
    the horizon ``H = ceil(N/2)`` if edges remain. The episode *terminates* (not truncates)
    when no edge is left or after ``H`` steps. An invalid action (a node without edges) is a
    noop for the agent part only: failures still happen and the step still costs ``-1/H``.

    Args:
        num_nodes: N (5 <= N <= 2000).
        params: CF constants (xi range, horizon fraction).
        shk: SHK generator parameters.
        invalid_action: ``"noop"`` or ``"raise"``.
        render_mode: ``None`` or ``"rgb_array"``.
    """

    max_nodes = 2000
    max_nodes_reason = (
        "the SHK grid generator and the betweenness loads scale super-linearly (on a 2-core "
        "machine: reset 1.5 s and 130 ms per step at N = 2000, 4.7 s and 400 ms at N = 3000)"
    )

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        params: CFParams | None = None,
        shk: SHKParams | None = None,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
    ) -> None:
        self.params = params or CFParams()
        super().__init__(num_nodes, invalid_action=invalid_action, render_mode=render_mode)
        self.horizon = self.params.horizon(self.num_nodes)
        self._generator = CFGenerator(self.params, shk)
        self._state: CFState | None = None

    # ------------------------------------------------------------------ hooks
    def _make_schema(self) -> FeatureSchema:
        return FeatureSchema.build(
            node_continuous=["load", "capacity"],
            graph_continuous=["k"],
            ranges={"load": (0.0, 1.0), "capacity": (0.0, 1.0), "k": (1.0, 1.0)},
        )

    def _make_action_space(self) -> spaces.Space:
        return spaces.Discrete(self.num_nodes)

    def _initial_state(self, rng: np.random.Generator) -> CFState:
        return self._generator(rng, self.num_nodes)

    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        state = self._state
        failed = cascade_step(state, None if action is None else int(action), rng)
        has_edges = bool(state.adjacency.any())
        at_horizon = self._steps + 1 >= self.horizon
        # paper: -1/H per step; penalty |lcc(G_t)|/N if the horizon is reached with edges left
        reward = -1.0 / self.horizon
        if at_horizon and has_edges:
            reward -= largest_component_size(state.adjacency) / self.num_nodes
        terminated = (not has_edges) or at_horizon
        return reward, terminated, {"num_failed": int(failed.sum())}

    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        state = self._state
        cont = np.stack([state.load, state.capacity], axis=1).astype(np.float32)
        return cont, np.zeros((self.num_nodes, 0), dtype=np.int64)

    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(1, dtype=np.float32), np.zeros(0, dtype=np.int64)

    def _mask(self) -> np.ndarray:
        return self._state.adjacency.any(axis=1)

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """One-hot (N,) int8 of the node the agent disconnects."""
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[int(action)] = 1
        return nodes

    def _node_positions(self) -> np.ndarray | None:
        return self._state.positions.copy()
