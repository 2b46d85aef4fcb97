"""``DreamSB3VecEnv``: a :class:`~graphwm.dream.vector.DreamVectorEnv` as a Stable-Baselines3
``VecEnv``, so SB3 / sb3-contrib agents train on B imagined episodes with one batched world
model forward pass per step (instead of B ``DreamEnv`` copies in a ``DummyVecEnv``).

SB3 resets a finished episode in the same step (its ``VecEnv`` contract): ``dones[i]`` is
``terminated or truncated``, ``infos[i]["terminal_observation"]`` the last imagined
observation, ``infos[i]["TimeLimit.truncated"]`` whether it was a truncation, and the returned
observation is the next episode's start state. Gymnasium's ``DreamVectorEnv`` instead returns
that start on the *next* step (``NEXT_STEP`` autoreset), after one more model forward pass.
Start states are drawn from the same ``np_random`` in the same order, so both give the same
observations, rewards and episode ends up to the first episode end, and the same start states
after it; later imagined steps differ only because the model's generator is then drawn in
another order (the restart's posterior before, not after, the next step).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from graphwm.dream.vector import DreamVectorEnv


class DreamSB3VecEnv(VecEnv):
    """B imagined episodes of ``dream`` behind SB3's ``VecEnv`` API.

    Args:
        dream: the batched dream env (its ``num_envs`` is B).

    ``env_method("action_masks")`` gives each episode's mask (sb3-contrib's MaskablePPO calls
    it); ``seed(s)`` seeds the next ``reset`` (episode i starts from the real env's
    ``reset(seed=s + i)``, as ``DreamVectorEnv.reset(seed=s)``).
    """

    def __init__(self, dream: DreamVectorEnv) -> None:
        if not isinstance(dream, DreamVectorEnv):
            raise TypeError(f"expected a DreamVectorEnv, got {type(dream).__name__}")
        self.dream = dream
        self._actions: np.ndarray | None = None
        self.render_mode = None
        super().__init__(dream.num_envs, dream.single_observation_space, dream.single_action_space)

    def reset(self) -> dict[str, np.ndarray]:
        """Start all B episodes (seeded by the last :meth:`seed`, if any)."""
        seed = self._seeds[0]
        obs, _ = self.dream.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        horizons = self.dream.core.horizons
        self.reset_infos = [{"horizon": None if h < 0 else int(h)} for h in horizons.tolist()]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Store the B actions for :meth:`step_wait`."""
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict]]:
        """One imagined step of every episode; finished ones restart at once (SB3 style)."""
        if self._actions is None:
            raise RuntimeError("call step_async() before step_wait()")
        dream = self.dream
        obs, reward, terminated, truncated, _ = dream.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        rows = np.flatnonzero(dones)
        if rows.size:
            for i in rows:
                infos[i]["terminal_observation"] = {k: v[i].copy() for k, v in obs.items()}
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            # restart now, drawing the start states DreamVectorEnv would draw on the next step
            starts = dream._draw_starts(rows.size)
            dream.core.start(rows, starts)
            fresh = dream._stack(starts)
            for key in obs:
                obs[key][rows] = fresh[key]
            dream._autoreset[rows] = False
        return obs, reward.astype(np.float32), dones, infos

    def close(self) -> None:
        """Nothing to release (the model stays the caller's)."""

    def action_masks(self) -> np.ndarray:
        """(B, mask size) bool masks in MaskablePPO's form."""
        return self.dream.action_masks()

    # ---- SB3's attribute plumbing: every episode shares the one dream env ----
    def has_attr(self, attr_name: str) -> bool:
        return attr_name == "action_masks" or hasattr(self.dream, attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name == "render_mode":
            return [None for _ in self._get_indices(indices)]
        value = getattr(self.dream, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"DreamSB3VecEnv episodes share one dream env; cannot set {attr_name}")

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        idx = list(self._get_indices(indices))
        if method_name == "action_masks":
            masks = self.dream.action_masks()
            return [masks[i] for i in idx]
        raise AttributeError(
            f"DreamSB3VecEnv supports env_method('action_masks') only, not {method_name!r}"
        )

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
