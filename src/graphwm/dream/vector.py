"""``DreamVectorEnv``: many imagined episodes stepped in one batched forward pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from graphwm.dream.core import DreamCore, StartState, real_start
from graphwm.envs import graph_env


class DreamVectorEnv(VectorEnv):
    """B imagined episodes of one world model as a Gymnasium ``VectorEnv``.

    Every ``step`` runs one batched forward pass of the model for all B episodes (on the
    model's device, CPU or GPU). Autoreset follows Gymnasium's default ``NEXT_STEP`` mode: the
    step after an episode ended returns a fresh start state for it (reward 0, not done) and
    ignores its action. Start states come from resets of the real env (seeded ``seed + i`` for
    episode i on ``reset(seed=seed)``, later from the vector env's ``np_random``) or from a
    stored list.

    Args:
        model: a trained ``gdm_models.WorldModel``.
        env: the real env it imitates.
        num_envs: B.
        start_states: optional stored start states instead of real resets.
        seed: seeds the model's generator before the first seeded reset.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        model,
        env: gym.Env,
        num_envs: int,
        *,
        start_states: Sequence[StartState] | None = None,
        seed: int | None = None,
    ) -> None:
        self.core = DreamCore(model, env, num_envs, seed=seed)
        self.real_env = graph_env(env)
        self.num_envs = self.core.num_episodes
        self.single_observation_space = self.core.observation_space
        self.single_action_space = self.core.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.start_states = list(start_states) if start_states is not None else None
        self._autoreset = np.zeros(self.num_envs, bool)
        self._started = False
        self._one_hot = self._indicator_is_one_hot()

    def _indicator_is_one_hot(self) -> bool:
        """Whether ``action_to_nodes`` is the plain indicator of the action's components
        (true for every graph env; checked here so the batched fast path stays exact)."""
        space = self.single_action_space
        if not isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
            return False
        rng = np.random.default_rng(0)
        for _ in range(8):
            a = _sample(space, rng)
            if not np.array_equal(self.real_env.action_to_nodes(a), self._fast_nodes(a[None])[0]):
                return False
        return True

    def _fast_nodes(self, actions: np.ndarray) -> np.ndarray:
        b, n = len(actions), self.core.num_nodes
        nodes = np.zeros((b, n), np.int8)
        idx = np.asarray(actions, dtype=np.int64).reshape(b, -1)
        nodes[np.arange(b)[:, None], idx] = 1
        return nodes

    def action_nodes(self, actions: Any) -> np.ndarray:
        """(B, N) node indicators of a batch of actions (``ValueError`` outside the space)."""
        actions = np.asarray(actions)
        if not self.action_space.contains(actions.astype(self.action_space.dtype)):
            raise ValueError(f"actions of shape {actions.shape} are outside {self.action_space}")
        if self._one_hot:
            return self._fast_nodes(actions)
        return np.stack([self.real_env.action_to_nodes(a) for a in actions]).astype(np.int8)

    def action_masks(self) -> np.ndarray:
        """(B, mask size) bool masks in MaskablePPO's form."""
        return self.core.action_masks(self.core.mask_array())

    def _draw_starts(self, count: int, seeds: Sequence[int] | None = None) -> list[StartState]:
        if self.start_states is not None:
            idx = self.np_random.integers(len(self.start_states), size=count)
            return [self.start_states[int(i)] for i in idx]
        if seeds is None:
            seeds = [int(s) for s in self.np_random.integers(2**31 - 1, size=count)]
        return [real_start(self.real_env, int(s)) for s in seeds]

    def _stack(self, starts: Sequence[StartState]) -> dict[str, np.ndarray]:
        return {
            k: np.stack([np.asarray(s.observation[k]) for s in starts]).astype(sp.dtype)
            for k, sp in self.core.observation_space.spaces.items()
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start all B episodes; ``seed`` seeds the generator and the real resets."""
        super().reset(seed=seed)
        seeds = None
        if seed is not None:
            self.core.seed(seed)
            seeds = [seed + i for i in range(self.num_envs)]
        starts = self._draw_starts(self.num_envs, seeds)
        self.core.start(np.arange(self.num_envs), starts)
        self._autoreset[:] = False
        self._started = True
        return self._stack(starts), {}

    def step(
        self, actions: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One imagined step of every episode (autoreset of those that ended last step)."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        nodes = self.action_nodes(actions)
        obs, reward, terminated, truncated = self.core.step(nodes)
        rows = np.flatnonzero(self._autoreset)
        if rows.size:
            starts = self._draw_starts(rows.size)
            self.core.start(rows, starts)
            fresh = self._stack(starts)
            for key in obs:
                obs[key][rows] = fresh[key]
            reward[rows] = 0.0
            terminated[rows] = False
            truncated[rows] = False
        self._autoreset = terminated | truncated
        return obs, reward, terminated, truncated, {}


def _sample(space: spaces.Discrete | spaces.MultiDiscrete, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return np.asarray(int(rng.integers(space.n)))
    return np.asarray(rng.integers(space.nvec)).astype(np.int64)
