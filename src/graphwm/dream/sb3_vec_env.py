"""``DreamSB3VecEnv``: a :class:`~graphwm.dream.vector.DreamVectorEnv` as a Stable-Baselines3
``VecEnv``, so SB3 / sb3-contrib agents train on B imagined episodes with one batched world
model forward pass per step (instead of B ``DreamEnv`` copies in a ``DummyVecEnv``).

SB3 restarts a finished episode in the same step (its ``VecEnv`` contract), which is
Gymnasium's ``SAME_STEP`` autoreset, so the SB3 env is a thin translation of a ``SAME_STEP``
``DreamVectorEnv`` through its public API: ``dones[i]`` is ``terminated or truncated``,
``infos[i]["terminal_observation"]`` is Gymnasium's ``info["final_obs"][i]`` (the last imagined
observation), ``infos[i]["TimeLimit.truncated"]`` whether the episode was truncated and not
terminated, and the returned observation is the next episode's start state. Observations,
rewards, episode ends and restarts are therefore those of the ``DreamVectorEnv`` step for step,
over whole multi-episode rollouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from graphwm.dream.vector import DreamVectorEnv


class DreamSB3VecEnv(VecEnv):
    """B imagined episodes of ``dream`` behind SB3's ``VecEnv`` API.

    Args:
        dream: the batched dream env (its ``num_envs`` is B), built with
            ``autoreset_mode=AutoresetMode.SAME_STEP``. A ``NEXT_STEP`` env is refused with a
            ``ValueError`` rather than converted: it returns each restart one step late, after
            an ignored action, which SB3's contract has no place for.

    ``env_method("action_masks")`` and ``get_attr("action_masks")`` give each episode's own
    mask (sb3-contrib's MaskablePPO calls the first); ``seed(s)`` seeds the next ``reset``
    (episode i starts from the real env's ``reset(seed=s + i)``, as
    ``DreamVectorEnv.reset(seed=s)``); ``reset_infos[i]["horizon"]`` is episode i's truncation
    length (``None``: none).
    """

    def __init__(self, dream: DreamVectorEnv) -> None:
        if not isinstance(dream, DreamVectorEnv):
            raise TypeError(f"expected a DreamVectorEnv, got {type(dream).__name__}")
        if dream.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                "DreamSB3VecEnv needs DreamVectorEnv(..., autoreset_mode=AutoresetMode.SAME_STEP) "
                f"(SB3 restarts finished episodes in the same step); got {dream.autoreset_mode}"
            )
        self.dream = dream
        self._actions: np.ndarray | None = None
        self.render_mode = None
        super().__init__(dream.num_envs, dream.single_observation_space, dream.single_action_space)

    def reset(self) -> dict[str, np.ndarray]:
        """Start all B episodes (seeded by the last :meth:`seed`, if any)."""
        obs, _ = self.dream.reset(seed=self._seeds[0])
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
        obs, reward, terminated, truncated, info = self.dream.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
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
        if attr_name == "action_masks":  # each episode's own mask, as a per-env method gives
            return [self._mask_of(i) for i in self._get_indices(indices)]
        value = getattr(self.dream, attr_name)
        return [value for _ in self._get_indices(indices)]

    def _mask_of(self, i: int):
        return lambda: self.dream.action_masks()[i]

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
