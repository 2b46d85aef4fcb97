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
from graphwm.dream.validity import check_reset_options
from graphwm.envs import graph_env


class DreamVectorEnv(VectorEnv):
    """B imagined episodes of one world model as a Gymnasium ``VectorEnv``.

    Every ``step`` runs one batched forward pass of the model for all B episodes (on the
    model's device, CPU or GPU). Start states come from resets of the real env (seeded
    ``seed + i`` for episode i on ``reset(seed=seed)``, later from the vector env's
    ``np_random``) or from a stored list.

    Autoreset follows one of Gymnasium 1.x's two modes, with ``SyncVectorEnv``'s semantics
    (https://farama.org/Vector-Autoreset-Mode):

    * ``NEXT_STEP`` (default): the step after an episode ended returns a fresh start state for
      it (reward 0, not terminated or truncated) and ignores its action.
    * ``SAME_STEP``: the step in which an episode ends returns that episode's reward and
      ``terminated`` / ``truncated`` flags with the fresh start state as its observation; the
      last imagined observation is in ``info["final_obs"][i]`` (an object array with ``None``
      for the others, mask ``info["_final_obs"]``) and ``info["final_info"]`` / ``_final_info``
      hold the episode's last step info (empty: the steps carry none).

    Both modes draw the restarts' start states from ``np_random`` the same way, in the order the
    episodes ended (by step, then by episode index), so the k-th restart of a ``SAME_STEP`` env
    starts where the k-th restart of a ``NEXT_STEP`` env with the same seed starts. The model's
    torch generator is shared by all episodes, so the imagined steps of the two modes agree up
    to the first episode end of the batch and differ after it (a ``SAME_STEP`` restart runs the
    model's posterior before the next batched step, a ``NEXT_STEP`` one after it).

    Args:
        model: a trained ``gdm_models.WorldModel``.
        env: the real env it imitates.
        num_envs: B.
        start_states: optional stored start states instead of real resets.
        seed: seeds the model's generator before the first seeded reset.
        autoreset_mode: ``AutoresetMode.NEXT_STEP`` or ``AutoresetMode.SAME_STEP`` (or their
            string values ``"NextStep"`` / ``"SameStep"``); also in ``metadata["autoreset_mode"]``.
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
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        self.autoreset_mode = autoreset_mode_of(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
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
        """Start all B episodes; ``seed`` seeds the generator and the real resets. It reads no
        options (a non-empty ``options`` is refused rather than ignored)."""
        check_reset_options(options, ())
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
        """One imagined step of every episode, with autoreset in the instance's mode."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        nodes = self.action_nodes(actions)
        obs, reward, terminated, truncated = self.core.step(nodes)
        infos: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            rows = np.flatnonzero(terminated | truncated)
            for i in rows:  # the layout SyncVectorEnv's SAME_STEP mode writes
                final = {k: v[i].copy() for k, v in obs.items()}
                infos = self._add_info(infos, {"final_obs": final, "final_info": {}}, int(i))
            self._restart(rows, obs)
        else:
            rows = np.flatnonzero(self._autoreset)
            self._restart(rows, obs)
            reward[rows] = 0.0
            terminated[rows] = False
            truncated[rows] = False
            self._autoreset = terminated | truncated
        return obs, reward, terminated, truncated, infos

    def _restart(self, rows: np.ndarray, obs: dict[str, np.ndarray]) -> None:
        """Start episodes ``rows`` afresh (one ``np_random`` draw each, in row order) and put
        their start states into ``obs``."""
        if not rows.size:
            return
        starts = self._draw_starts(rows.size)
        self.core.start(rows, starts)
        fresh = self._stack(starts)
        for key in obs:
            obs[key][rows] = fresh[key]


def autoreset_mode_of(mode: AutoresetMode | str) -> AutoresetMode:
    """``mode`` as an ``AutoresetMode`` the dream vector env supports (``ValueError`` else)."""
    supported = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
    for option in supported:
        if mode is option or (isinstance(mode, str) and mode == option.value):
            return option
    names = ", ".join(f"AutoresetMode.{m.name} ({m.value!r})" for m in supported)
    raise ValueError(f"autoreset_mode must be one of {names}; got {mode!r}")


def _sample(space: spaces.Discrete | spaces.MultiDiscrete, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return np.asarray(int(rng.integers(space.n)))
    return np.asarray(rng.integers(space.nvec)).astype(np.int64)
