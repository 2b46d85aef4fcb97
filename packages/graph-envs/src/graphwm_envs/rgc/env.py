"""Robust Graph Construction env (paper appendix "Environment Descriptions", RGC).

Deterministic and fully observable: the agent adds edges to a connected Erdos-Renyi graph,
within a budget of 5% of the possible edges, to increase its robustness under targeted node
removal. See ``docs/envs/rgc.md`` for the full specification and the choices made where the
paper is silent.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from graphwm_envs.core.base import GraphEnv, InvalidActionMode
from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.rgc.generator import RGCGenerator
from graphwm_envs.rgc.robustness import _robustness, default_num_samples
from graphwm_envs.rgc.types import RGCParams, RGCState

BUDGET_FRACTION = RGCParams.budget_fraction  # tau_0: 5% of the N(N-1)/2 possible edges
ActionMode = Literal["nodes", "pair"]


def edge_budget(num_nodes: int, budget_fraction: float = BUDGET_FRACTION) -> int:
    """Edge additions per episode: ceil(5% of N(N-1)/2), so at least one for every N >= 5."""
    return math.ceil(budget_fraction * num_pairs(num_nodes) - 1e-9)


def tau_max(budget_fraction: float, max_nodes: int) -> float:
    """Largest initial tau = ceil(f M) / M over 5 <= N <= max_nodes (0.1 at f = 5%, N = 5)."""
    n = np.arange(5, max_nodes + 1, dtype=np.int64)
    pairs = n * (n - 1) // 2
    return float((np.ceil(budget_fraction * pairs - 1e-9) / pairs).max())


def num_pairs(num_nodes: int) -> int:
    """N(N-1)/2, the number of possible edges (also the horizon H)."""
    return num_nodes * (num_nodes - 1) // 2


class RGCEnv(GraphEnv):
    """``graphenv/RGC-v0``: Robust Graph Construction.

    ## Description

    Deterministic and fully observable (paper appendix "Environment Descriptions", after
    Darvariu et al. 2021). The agent adds edges to a connected random graph, within a budget
    of 5% of the M = N(N-1)/2 possible edges, to make it harder to disconnect by removing its
    highest-degree nodes. Full specification: ``docs/envs/rgc.md``.

    ## Action Space

    ``action_mode="nodes"`` (default, the paper's k = 2 node selection):
    ``MultiDiscrete([N, N])``, the endpoints (i, j) of the edge to add. The mask holds the
    nodes with a non-neighbour (degree < N - 1); an action is valid when both endpoints are
    masked. ``i == j`` or an existing edge is a valid no-op (reward 0, no budget spent), which
    node masks cannot rule out. ``action_mode="pair"``: ``Discrete(M)`` over unordered pairs
    ``i < j`` in row-major order of the upper triangle (:meth:`pair_index`,
    :meth:`endpoints`); :meth:`action_masks` is exactly the addable pairs, and an existing
    edge is invalid. In both modes ``action_to_nodes`` is the indicator of the two endpoints.

    ## Observation Space

    ``adjacency`` (N, N) int8, ``graph_continuous`` = [``tau``, ``k``] float32 (``tau``: the
    remaining budget as a fraction of M, in [0, 0.1]; ``k`` = 2) and ``action_mask`` (N,)
    int8. There are no node features and no graph categorical features: those keys are absent.

    ## Rewards

    Adding an edge earns R(G_{t+1}) - R(G_t), R the targeted-attack robustness (expected
    critical fraction under descending-degree node removal, :func:`targeted_robustness`,
    deterministic); every other step earns 0.

    ## Starting State

    G(N, p = 0.2) conditioned on connected and not complete (``RGCParams(initial_graph=
    "gnm")``: RNet-DQN's G(N, m = ceil(0.2 M))); budget B = ceil(0.05 M) additions.

    ## Episode End

    Terminated when the budget is spent (``tau`` = 0) or after H = M steps (no-ops count);
    never truncated. ``step`` then raises until ``reset``.

    ## Arguments

    * ``num_nodes``: N, 5 <= N <= 2000 (:attr:`max_nodes`: each addition recomputes R,
      about 60 ms at N = 2000).
    * ``action_mode``: ``"nodes"`` or ``"pair"`` (above).
    * ``params``: :class:`RGCParams` (edge probability, budget fraction, initial graph).
    * ``robustness_samples``: tie-breaking orders averaged by R (default
      :func:`~graphwm_envs.rgc.robustness.default_num_samples` of N).
    * ``invalid_action``: ``"noop"`` (default, flagged in ``info``) or ``"raise"``.
    * ``render_mode``: ``None`` or ``"rgb_array"``.

    ## Version History

    * v0: the paper's environment; absent zero-width observation keys, episode-end errors,
      size limit, pair mode and the G(N, m) option added in graphwm-envs 0.1.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import graphwm_envs
        >>> env = gym.make("graphenv/RGC-v0", num_nodes=10, action_mode="pair")
        >>> obs, info = env.reset(seed=0)
        >>> sorted(obs)
        ['action_mask', 'adjacency', 'graph_continuous']
        >>> env.action_space
        Discrete(45)
        >>> rgc = env.unwrapped
        >>> action = rgc.sample_valid_action(np.random.default_rng(0))
        >>> i, j = rgc.endpoints(action)
        >>> obs, reward, terminated, truncated, info = env.step(action)
        >>> bool(obs["adjacency"][i, j]), info["edge_added"], reward > 0
        (True, True, True)
    """

    _state: RGCState
    params_class = RGCParams
    params: RGCParams
    max_nodes = 2000
    max_nodes_reason = (
        "every edge addition recomputes the targeted-attack robustness, O(K E log E) with "
        "E ~ 0.1 N^2 edges (about 60 ms per step at N = 2000), and an episode adds 5% of the "
        "N(N-1)/2 pairs (about 100,000 steps at N = 2000)"
    )

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
        robustness_samples: int | None = None,
        action_mode: ActionMode = "nodes",
        params: RGCParams | None = None,
    ) -> None:
        if action_mode not in ("nodes", "pair"):
            raise ValueError(f"action_mode must be 'nodes' or 'pair', got {action_mode!r}")
        self.action_mode: ActionMode = action_mode
        super().__init__(
            num_nodes, params=params, invalid_action=invalid_action, render_mode=render_mode
        )
        self._generator = RGCGenerator(self.params)
        self._generator.check_size(self.num_nodes)
        # pair index -> (i, j), i < j, row-major over the upper triangle
        self._pair_rows, self._pair_cols = np.triu_indices(self.num_nodes, k=1)
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

    @classmethod
    def feature_schema(cls, params: RGCParams | None = None) -> FeatureSchema:
        """The feature schema of an env with ``params`` (default ``RGCParams()``): tau's
        range comes from the budget fraction and :attr:`max_nodes`; no env is built."""
        top = tau_max((params or RGCParams()).budget_fraction, cls.max_nodes)
        return FeatureSchema.build(
            graph_continuous=["tau", "k"],
            ranges={"tau": (0.0, top), "k": (2.0, 2.0)},
        )

    def _horizon(self) -> int:
        # H = N(N-1)/2 steps at most; the budget of ceil(5% M) additions usually ends it first
        return self.horizon

    def _make_action_space(self) -> spaces.Space:
        if self.action_mode == "pair":
            return spaces.Discrete(num_pairs(self.num_nodes))
        return spaces.MultiDiscrete([self.num_nodes, self.num_nodes], dtype=np.int64)

    def pair_index(self, i: int, j: int) -> int:
        """Pair-mode action of the unordered pair {i, j}, i != j (row-major upper triangle)."""
        i, j = (int(i), int(j)) if i < j else (int(j), int(i))
        if not 0 <= i < j < self.num_nodes:
            raise ValueError(f"({i}, {j}) is not a pair of distinct nodes in [0, {self.num_nodes})")
        n = self.num_nodes
        return i * (2 * n - i - 1) // 2 + (j - i - 1)

    def endpoints(self, action: Any) -> tuple[int, int]:
        """The two nodes ``(i, j)`` of an action of either mode (``i == j`` possible in
        ``"nodes"`` mode)."""
        action = self._coerce_action(action)  # -1 is refused, not wrapped around
        if self.action_mode == "pair":
            index = int(action)
            return int(self._pair_rows[index]), int(self._pair_cols[index])
        return int(action[0]), int(action[1])

    def robustness(self, adjacency: np.ndarray) -> float:
        """Targeted-attack robustness of ``adjacency`` with this env's number of samples."""
        return _robustness(np.asarray(adjacency), self.robustness_samples)

    def _initial_state(self, rng: np.random.Generator) -> RGCState:
        adjacency = self._generator(rng, self.num_nodes)
        return RGCState(
            adjacency=adjacency,
            degrees=adjacency.sum(axis=1, dtype=np.int64),
            budget=edge_budget(self.num_nodes, self.params.budget_fraction),
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
            i, j = self.endpoints(action)
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
        action = self._coerce_action(action)  # -1 or N: refused, not wrapped around
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[list(self.endpoints(action))] = 1
        return nodes

    def _is_valid(self, action: Any) -> bool:
        i, j = self.endpoints(action)
        if self.action_mode == "pair":
            return not self._state.adjacency[i, j]
        mask = self._mask()
        return bool(mask[i] and mask[j])

    def addable_pairs(self) -> np.ndarray:
        """(N(N-1)/2,) bool: the pairs ``i < j`` (pair-mode order) that are not yet edges."""
        self._require_reset("addable_pairs()")
        return self._state.adjacency[self._pair_rows, self._pair_cols] == 0

    def action_masks(self) -> np.ndarray:
        """MaskablePPO's mask: pair mode, the addable pairs (exact: every marked action adds an
        edge); node mode, the node mask once per endpoint (see :class:`GraphEnv`). Never
        all-zero: a complete graph (terminal) marks every action."""
        self._require_reset("action_masks()")
        if self.action_mode != "pair":
            return super().action_masks()
        mask = self.addable_pairs()
        return mask if mask.any() else np.ones_like(mask)

    def sample_valid_action(self, rng: np.random.Generator) -> Any:
        """A uniformly random valid action. Node mode: the paper's random policy (two distinct
        masked nodes, see :class:`GraphEnv`); pair mode: a uniform addable pair."""
        if self.action_mode != "pair":
            return super().sample_valid_action(rng)
        return int(rng.choice(np.flatnonzero(self.action_masks())))
