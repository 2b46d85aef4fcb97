"""``graphenv/OD-v0``: Opinion Dynamics (paper appendix "Opinion Dynamics").

Stochastic and fully observable. See ``docs/envs/od.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from graphwm_envs.core.base import GraphEnv
from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.od.dynamics import agent_influence, environment_moves
from graphwm_envs.od.generator import ODGenerator
from graphwm_envs.od.types import ODParams, ODState


class ODEnv(GraphEnv):
    """``graphenv/OD-v0``: Opinion Dynamics.

    ## Description

    Stochastic and fully observable (paper appendix "Opinion Dynamics", after Holme and Newman
    2006). Opinions and topology co-evolve: each step the environment picks
    ``k_env = ceil(0.1 N)`` nodes, each of which rewires one edge towards a same-opinion node
    of similar "vibe" (probability 0.458) or copies a neighbour's opinion; the agent picks
    ``k = ceil(0.05 N)`` nodes, each of which adopts opinion 0 with probability 0.3. Full
    specification: ``docs/envs/od.md``.

    ## Action Space

    ``MultiDiscrete([N] * k)``: the selected nodes; repeats count once. Every node is always
    valid (the mask is all ones), so no in-space action is invalid. At k = 1 (N <= 20) a
    scalar node is accepted too (torchrl's ``Categorical(N)`` passes one).

    ## Observation Space

    ``adjacency`` (N, N) int8; ``node_continuous`` = [``vibe``] (N, 1) float32 in [-1, 1]
    (fixed per episode); ``node_categorical`` = [``opinion``] (N, 1) int64 in {0..4};
    ``graph_continuous`` = [``k_frac``, ``k_frac_env``] = [0.05, 0.1]; ``action_mask`` (N,)
    int8. No graph categorical features (the key is absent).

    ## Rewards

    The fraction of nodes holding opinion 0 after the step minus before it (the environment's
    own moves included, so it can be negative).

    ## Starting State

    A connected Erdos-Renyi graph of mean degree 4 (components of one G(N, 4/(N-1)) draw
    joined in a random order), opinions uniform over {0..4}, vibes U[-1, 1].

    ## Episode End

    Never terminated; truncated after 50 steps (``ODParams.horizon``). ``step`` then raises
    until ``reset``.

    ## Arguments

    * ``num_nodes``: N, 5 <= N <= 5000 (:attr:`max_nodes`: the dense adjacency of every
      observation and the dense N x N draw of the initial graph).
    * ``params``: :class:`ODParams` (the paper's constants by default).
    * ``invalid_action``: ``"noop"`` or ``"raise"`` (no in-space action is invalid here).
    * ``render_mode``: ``None`` or ``"rgb_array"``.

    ## Version History

    * v0: the paper's environment; no zero-width ``graph_categorical`` key, episode-end
      errors and size limit added in graphwm-envs 0.1.

    Example:
        >>> import gymnasium as gym
        >>> import graphwm_envs
        >>> env = gym.make("graphenv/OD-v0", num_nodes=40)
        >>> obs, info = env.reset(seed=0)
        >>> env.action_space, obs["node_categorical"].shape
        (MultiDiscrete([40 40]), (40, 1))
        >>> for t in range(50):
        ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        >>> terminated, truncated, info["step"]
        (False, True, 50)
    """

    max_nodes = 5000
    max_nodes_reason = (
        "every observation carries a dense (N, N) int8 adjacency (25 MB at N = 5000) and the "
        "initial graph is drawn from a dense N x N float64 array (200 MB at N = 5000)"
    )

    _state: ODState  # set by reset(); the hooks run only after it
    params_class = ODParams
    params: ODParams

    def _setup(self) -> None:
        self.k = self.params.k(self.num_nodes)
        self.k_env = self.params.k_env(self.num_nodes)
        self._generator = ODGenerator(self.params)

    # ------------------------------------------------------------------ hooks
    @classmethod
    def feature_schema(cls, params: ODParams | None = None) -> FeatureSchema:
        """The feature schema of an env with ``params`` (default ``ODParams()``): the number
        of opinions and the k fractions come from them; no env is built."""
        p = params or ODParams()
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
        action = self._coerce_action(action)  # -1 or N: refused, not wrapped around
        nodes = np.zeros(self.num_nodes, dtype=np.int8)
        nodes[np.asarray(action, dtype=np.int64)] = 1
        return nodes
