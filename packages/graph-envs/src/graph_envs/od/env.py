"""``graphenv/OD-v0``: Opinion Dynamics (paper appendix "Opinion Dynamics").

Stochastic and fully observable. See ``docs/envs/od.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graph_envs.core.base import GraphEnv, InvalidActionMode
from graph_envs.core.schema import FeatureSchema
from graph_envs.od.dynamics import agent_influence, environment_moves
from graph_envs.od.generator import ODGenerator
from graph_envs.od.types import ODParams, ODState


class ODEnv(GraphEnv):
    """Influence a co-evolving opinion network towards opinion 0.

    Observation: ``node_continuous = [vibe]`` in [-1, 1], ``node_categorical = [opinion]``
    (5 values), ``graph_continuous = [k_frac, k_frac_env] = [0.05, 0.1]``. Action
    ``MultiDiscrete([N] * k)`` with ``k = ceil(0.05 N)``; repeated nodes count once; every node
    is always valid. Reward: fraction of nodes holding opinion 0 after the step minus before
    (the env's own moves included). Episodes never terminate; they are truncated after 50 steps.

    Args:
        num_nodes: N (5 <= N <= 5000).
        params: OD constants.
        invalid_action: ``"noop"`` or ``"raise"`` (no in-space action is invalid here).
        render_mode: ``None`` or ``"rgb_array"``.
    """

    max_nodes = 5000
    max_nodes_reason = (
        "every observation carries a dense (N, N) int8 adjacency (25 MB at N = 5000) and the "
        "initial graph is drawn from a dense N x N float64 array (200 MB at N = 5000)"
    )

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        params: ODParams | None = None,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
    ) -> None:
        self.params = params or ODParams()
        super().__init__(num_nodes, invalid_action=invalid_action, render_mode=render_mode)
        self.k = self.params.k(self.num_nodes)
        self.k_env = self.params.k_env(self.num_nodes)
        self._generator = ODGenerator(self.params)
        self._state: ODState | None = None

    # ------------------------------------------------------------------ hooks
    def _make_schema(self) -> FeatureSchema:
        p = self.params
        return FeatureSchema.build(
            node_continuous=["vibe"],
            node_categorical={"opinion": p.num_opinions},
            graph_continuous=["k_frac", "k_frac_env"],
            ranges={
                "vibe": (-1.0, 1.0),
                "k_frac": (p.k_frac, p.k_frac),
                "k_frac_env": (p.k_frac_env, p.k_frac_env),
            },
        )

    def _make_action_space(self) -> spaces.Space:
        return spaces.MultiDiscrete(np.full(self.params.k(self.num_nodes), self.num_nodes))

    def _initial_state(self, rng: np.random.Generator) -> ODState:
        return self._generator(rng, self.num_nodes)

    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        state = self._state
        target = self.params.target_opinion
        before = float(np.mean(state.opinion == target))
        rewired = environment_moves(state, self.params, rng)
        adopted = (
            agent_influence(state, action, self.params, rng)
            if action is not None
            else np.zeros(0, dtype=np.int64)
        )
        after = float(np.mean(state.opinion == target))
        return after - before, False, {"num_rewired": rewired, "num_adopted": int(adopted.size)}

    def _max_steps(self) -> int | None:
        return self.params.horizon

    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        state = self._state
        return state.vibe.astype(np.float32)[:, None], state.opinion[:, None].copy()

    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        return np.array([p.k_frac, p.k_frac_env], dtype=np.float32), np.zeros(0, dtype=np.int64)

    def _mask(self) -> np.ndarray:
        return np.ones(self.num_nodes, dtype=bool)

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """(N,) int8 indicator of the selected nodes (repeats count once)."""
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[np.asarray(action, dtype=np.int64)] = 1
        return nodes
