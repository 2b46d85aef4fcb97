"""Search and Rescue env (paper appendix "Environment Descriptions", Search and Rescue).

Stochastic and partially observable: the agent walks a fragile Delaunay graph, collects
survivors and escorts them, one at a time, to the exit. See ``docs/envs/sar.md`` for the full
specification, including every choice made where the paper is silent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graphwm_envs.core.base import GraphEnv
from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.sar.dynamics import collapse_edges, visible_nodes
from graphwm_envs.sar.generator import SARGenerator
from graphwm_envs.sar.types import SARParams, SARState

#: ``info["outcome"]`` of a step that does not terminate: info values are never ``None``
#: (tianshou's buffer reads ``None`` as NaN, torchrl's vector info reader fails on it)
NO_OUTCOME = "none"


class SAREnv(GraphEnv):
    """``graphenv/SAR-v0``: Search and Rescue.

    ## Description

    Stochastic and partially observable (paper appendix "Environment Descriptions", Search
    and Rescue). The agent walks a fragile Delaunay graph, collects survivors one at a time
    and escorts them to the exit. A visited non-exit node loses 0.3 stability with
    probability 0.5, and its edges (u, v) with ``stability(u) + stability(v) < 1`` collapse,
    which can strand the agent or cut survivors off. Full specification:
    ``docs/envs/sar.md``.

    ## Action Space

    ``Discrete(N)``: the node to move to. The mask is the agent's current neighbours; a
    masked-out node is an invalid action (a flagged no-op that still costs -1).

    ## Observation Space

    ``adjacency`` (N, N) int8; ``node_continuous`` = [``stability``] in [0, 1];
    ``node_categorical`` = [``survivor_present`` (shown only within two hops of the agent),
    ``exit_node``, ``current_location``], each in {0, 1}; ``graph_continuous`` = [``k``] = 1;
    ``graph_categorical`` = [``escorting``] in {0, 1}; ``action_mask`` (N,) int8. Hidden:
    the survivors beyond two hops.

    ## Rewards

    -1 per step; +1 for a collect; +10 for a delivery; +5 when the last survivor is
    delivered; -30 - 5 per undelivered survivor when stranded; -5 per undelivered survivor
    when the remaining survivors are unreachable (:class:`SARParams`).

    ## Starting State

    The Delaunay triangulation of N uniform points in the unit square; a uniform exit, where
    the agent starts; survivors on 30% of the other nodes; stabilities U[0.5, 1], the exit's 1.

    ## Episode End

    Terminated when every survivor is delivered, when the agent's node no longer reaches the
    exit (stranded), or when no remaining survivor does (not escorting); truncated after
    N x (initial survivors) steps. ``step`` then raises until ``reset``. A stranded agent on
    an isolated node has no move: the published mask then marks every node.

    ## Arguments

    * ``num_nodes``: N, 5 <= N <= 5000 (:attr:`max_nodes`: the dense adjacency of every
      observation).
    * ``params``: :class:`SARParams` (the paper's constants by default).
    * ``invalid_action``: ``"noop"`` (default) or ``"raise"``.
    * ``render_mode``: ``None`` or ``"rgb_array"``.

    ## Version History

    * v0: the paper's environment; episode-end errors, never-empty terminal masks and size
      limit added in graphwm-envs 0.1.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import graphwm_envs
        >>> env = gym.make("graphenv/SAR-v0", num_nodes=10)
        >>> obs, info = env.reset(seed=0)
        >>> exit_node, location = obs["node_categorical"][:, 1:].argmax(axis=0)
        >>> bool(exit_node == location)  # the agent starts at the exit
        True
        >>> neighbours = np.flatnonzero(obs["action_mask"])
        >>> obs, reward, terminated, truncated, info = env.step(int(neighbours[0]))
        >>> reward <= 0.0 or info["collected"], info["invalid_action"]
        (True, False)
    """

    _state: SARState
    node_index_fields = ("exit_node", "location")
    max_nodes = 5000
    max_nodes_reason = (
        "every observation carries a dense (N, N) int8 adjacency (25 MB at N = 5000), so "
        "rollout buffers and recorded episodes grow as N^2"
    )

    params_class = SARParams
    params: SARParams

    def _setup(self) -> None:
        self._generator = SARGenerator(self.params)

    @classmethod
    def feature_schema(cls, params: SARParams | None = None) -> FeatureSchema:
        """The feature schema (the same for every ``params``; no env is built)."""
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

    def _termination(self) -> tuple[float, bool, str]:
        """Terminal bonus/penalty, in the order: all rescued, stranded, nothing reachable."""
        s, p = self._state, self.params
        remaining = s.num_remaining
        if remaining == 0:
            return p.all_rescued_reward, True, "all_rescued"
        if not s.exit_reachable[s.location]:
            return p.stranded_penalty + p.per_survivor_penalty * remaining, True, "stranded"
        if not s.escorting and not np.any(s.survivors & s.exit_reachable):
            return p.per_survivor_penalty * remaining, True, "survivors_unreachable"
        return 0.0, False, NO_OUTCOME

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
        action = self._coerce_action(action)  # -1 or N: refused, not wrapped around
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[int(action)] = 1
        return nodes

    def _node_positions(self) -> np.ndarray:
        return self._state.positions
