"""``graphenv/CF-v0``: Cascading Failures (paper appendix "Cascading Failures").

Stochastic and partially observable: the safety factor ``xi`` is hidden (kept in the state and
in :meth:`clone_state` snapshots, never in observations or infos). See ``docs/envs/cf.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graphwm_envs.cf.dynamics import cascade_step
from graphwm_envs.cf.generator import CFGenerator
from graphwm_envs.cf.shk import SHKParams
from graphwm_envs.cf.types import CFParams, CFState
from graphwm_envs.core.base import GraphEnv, InvalidActionMode
from graphwm_envs.core.graph_ops import largest_component_size
from graphwm_envs.core.schema import FeatureSchema


class CFEnv(GraphEnv):
    """``graphenv/CF-v0``: Cascading Failures.

    ## Description

    Stochastic and partially observable (paper appendix "Cascading Failures", load model of
    Motter and Lai 2002). On a Schultz-Heitzig-Kurths power grid, a node's load is its
    betweenness; a node whose previous load exceeds ``xi`` times its capacity fails with
    probability ``min(1, (load - xi c) / (xi c))``. Each step the agent disconnects one node
    to contain the cascade. The safety factor ``xi ~ U[1.1, 1.4]`` is hidden (in the state
    and in snapshots, never observed). Full specification: ``docs/envs/cf.md``.

    ## Action Space

    ``Discrete(N)``: the node to disconnect. The mask holds the nodes with at least one edge;
    a masked-out node is an invalid action (the agent's part is a flagged no-op; failures
    still happen).

    ## Observation Space

    ``adjacency`` (N, N) int8; ``node_continuous`` = [``load``, ``capacity``] in [0, 1];
    ``graph_continuous`` = [``k``] = 1; ``action_mask`` (N,) int8. No categorical features
    (those keys are absent).

    ## Rewards

    -1/H per step, H = ceil(N / 2); at the H-th step, if edges remain, minus the size of the
    largest connected component over N.

    ## Starting State

    An SHK grid (n0 = ceil(N/2), p = q = 0.5, r = 1/3, s = 0.1); capacities = the initial
    loads; a hidden ``xi``.

    ## Episode End

    Terminated when no edge is left or after H steps; never truncated. ``step`` then raises
    until ``reset``. With no edge left the mask rule marks nothing: the published mask then
    marks every node.

    ## Arguments

    * ``num_nodes``: N, 5 <= N <= 2000 (:attr:`max_nodes`: the SHK generator and the loads
      grow super-linearly).
    * ``params``: :class:`CFParams` (xi range, horizon fraction).
    * ``shk``: :class:`SHKParams` of the grid generator.
    * ``invalid_action``: ``"noop"`` (default) or ``"raise"``.
    * ``render_mode``: ``None`` or ``"rgb_array"``.

    ## Version History

    * v0: the paper's environment; absent zero-width observation keys, episode-end errors,
      never-empty terminal masks and size limit added in graphwm-envs 0.1.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import graphwm_envs
        >>> env = gym.make("graphenv/CF-v0", num_nodes=12)
        >>> obs, info = env.reset(seed=0)
        >>> sorted(obs)
        ['action_mask', 'adjacency', 'graph_continuous', 'node_continuous']
        >>> hub = int(np.argmax(obs["node_continuous"][:, 0]))  # the most loaded node
        >>> obs, reward, terminated, truncated, info = env.step(hub)
        >>> int(obs["adjacency"][hub].sum()), reward
        (0, -0.16666666666666666)
    """

    max_nodes = 2000
    max_nodes_reason = (
        "the SHK grid generator and the betweenness loads scale super-linearly (on a 2-core "
        "machine: reset 1.5 s and 130 ms per step at N = 2000, 4.7 s and 400 ms at N = 3000)"
    )

    _state: CFState  # set by reset(); the hooks run only after it
    params_class = CFParams
    params: CFParams

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        params: CFParams | None = None,
        shk: SHKParams | None = None,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            num_nodes, params=params, invalid_action=invalid_action, render_mode=render_mode
        )
        self.horizon = self.params.horizon(self.num_nodes)
        self._generator = CFGenerator(self.params, shk)

    # ------------------------------------------------------------------ hooks
    @classmethod
    def feature_schema(cls, params: CFParams | None = None) -> FeatureSchema:
        """The feature schema (the same for every ``params``; no env is built)."""
        return FeatureSchema.build(
            node_continuous=["load", "capacity"],
            graph_continuous=["k"],
            ranges={"load": (0.0, 1.0), "capacity": (0.0, 1.0), "k": (1.0, 1.0)},
        )

    def _horizon(self) -> int:
        return self.horizon  # terminated at H = ceil(N / 2) steps at the latest

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
        return np.asarray(self._state.adjacency.any(axis=1))

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """One-hot (N,) int8 of the node the agent disconnects."""
        action = self._coerce_action(action)  # -1 or N: refused, not wrapped around
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[int(action)] = 1
        return nodes

    def _node_positions(self) -> np.ndarray | None:
        return self._state.positions.copy()
