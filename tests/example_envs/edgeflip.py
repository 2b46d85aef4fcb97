"""``example/EdgeFlip-v0``: a plain ``gymnasium.Env`` written from docs/contract.md alone.

No ``graphwm_envs`` import and no subclass: the graph env protocol is implemented by hand
(``num_nodes``, ``schema``, ``action_to_nodes``, ``action_masks``, ``clone_state``,
``restore_state``). The
agent cuts every edge of one node per step; afterwards a random pair of nodes connects with
probability 1/2. Reward: minus the edge density. Terminated when no edge is left, truncated
after ``horizon`` steps. Only continuous features (the categorical keys are absent).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Schema:
    """The contract's schema: ``to_dict()`` gives the plain dict."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_continuous": ["degree"],
            "node_categorical": {},
            "graph_continuous": ["k", "density"],
            "graph_categorical": {},
            "ranges": {"degree": [0.0, 1.0], "k": [1.0, 1.0], "density": [0.0, 1.0]},
        }


class EdgeFlipEnv(gym.Env):
    """Cut all edges of one node per step; random edges reappear."""

    metadata = {"render_modes": []}

    def __init__(self, num_nodes: int = 8, horizon: int = 6) -> None:
        n = self.num_nodes = int(num_nodes)
        self.horizon = int(horizon)
        self.schema = Schema()
        self.observation_space = spaces.Dict(
            {
                "adjacency": spaces.Box(0, 1, (n, n), np.int8),
                "node_continuous": spaces.Box(0.0, 1.0, (n, 1), np.float32),
                "graph_continuous": spaces.Box(0.0, 1.0, (2,), np.float32),
                "action_mask": spaces.Box(0, 1, (n,), np.int8),
            }
        )
        self.action_space = spaces.Discrete(n)
        self.adjacency = np.zeros((n, n), np.int8)
        self.steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        n, adj = self.num_nodes, self.adjacency
        degree = adj.sum(axis=1)
        mask = (degree > 0).astype(np.int8)
        if not mask.any():  # the contract's mask is never all zero
            mask[:] = 1
        density = adj.sum() / (n * (n - 1))
        return {
            "adjacency": adj.copy(),
            "node_continuous": (degree / (n - 1)).astype(np.float32)[:, None],
            "graph_continuous": np.array([1.0, density], np.float32),
            "action_mask": mask,
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        n = self.num_nodes
        upper = np.triu(self.np_random.random((n, n)) < 0.4, 1)
        self.adjacency = (upper | upper.T).astype(np.int8)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        node = int(action)
        self.adjacency[node, :] = 0
        self.adjacency[:, node] = 0
        if self.np_random.random() < 0.5:
            i, j = self.np_random.choice(self.num_nodes, size=2, replace=False)
            self.adjacency[i, j] = self.adjacency[j, i] = 1
        self.steps += 1
        obs = self._obs()
        reward = -float(obs["graph_continuous"][1])
        terminated = not self.adjacency.any()
        truncated = not terminated and self.steps >= self.horizon
        return obs, reward, terminated, truncated, {}

    def action_to_nodes(self, action) -> np.ndarray:
        nodes = np.zeros(self.num_nodes, np.int8)
        nodes[int(action)] = 1
        return nodes

    def action_masks(self) -> np.ndarray:
        return self._obs()["action_mask"].astype(bool)

    def clone_state(self) -> dict[str, Any]:
        rng_state = copy.deepcopy(self.np_random.bit_generator.state)
        return {"adjacency": self.adjacency.copy(), "steps": self.steps, "rng": rng_state}

    def restore_state(self, snapshot: dict[str, Any], seed: int | None = None):
        self.adjacency = snapshot["adjacency"].copy()
        self.steps = snapshot["steps"]
        if seed is None:  # replay the future exactly
            self.np_random.bit_generator.state = copy.deepcopy(snapshot["rng"])
        else:  # independent futures per seed
            self.np_random = np.random.default_rng(seed)
        return self._obs()
