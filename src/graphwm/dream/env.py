"""``DreamEnv``: a Gymnasium env whose transitions are imagined by a trained world model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from graphwm.dream.core import DreamCore, StartState, real_start
from graphwm.dream.validity import check_reset_options
from graphwm.envs import graph_env


def coerce_action(space: spaces.Space, action: Any) -> Any:
    """``action`` as the graph envs take it; ``ValueError`` if it is outside ``space``."""
    arr = np.asarray(action)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action {action!r} must be integer for {space}")
    if isinstance(space, spaces.Discrete):
        if arr.shape != () or not space.contains(arr.astype(np.int64)):
            raise ValueError(f"action {action!r} is outside the action space {space}")
        return int(arr)
    if isinstance(space, spaces.MultiDiscrete):
        if arr.shape != space.shape or not space.contains(arr.astype(space.dtype)):
            raise ValueError(f"action {action!r} is outside the action space {space}")
        return arr.astype(np.int64)
    raise NotImplementedError(f"unsupported action space {space}")


#: the reset options a dream env reads (docs/dream.md)
RESET_OPTIONS = ("start_index",)


class DreamEnv(gym.Env):
    """A trained world model as a Gymnasium env imitating a real graph env.

    Observation space, action space, ``action_masks()`` and ``action_to_nodes`` are the real
    env's, so an agent moves between the two unchanged. ``reset(seed=s)`` resets the real env
    with ``s`` (or draws a stored start state), runs the model's posterior on that observation
    and returns it; ``step`` imagines one transition (observation sampled from the model,
    reward from its reward head, termination sampled from its continuation head, truncation at
    the real episode's horizon, the next mask from its action-mask head). Stepping a finished
    episode raises ``RuntimeError``, like the real envs.

    Args:
        model: a trained ``gdm_models.WorldModel`` (any family; on CPU or GPU).
        env: the real env (an instance; it is reset to draw start states).
        start_states: optional stored :class:`StartState` list to start from instead of real
            resets (``reset(options={"start_index": i})`` picks one, else uniformly at random).
        seed: seeds the model's generator before the first seeded reset.

    Randomness: ``reset(seed=s)`` seeds the torch generator with ``s`` and the real env with
    ``s``, so the whole episode is a function of ``s`` and the actions.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        model,
        env: gym.Env,
        *,
        start_states: Sequence[StartState] | None = None,
        seed: int | None = None,
    ) -> None:
        self.core = DreamCore(model, env, 1, seed=seed)
        self.real_env = graph_env(env)
        self.observation_space = self.core.observation_space
        self.action_space = self.core.action_space
        self.start_states = list(start_states) if start_states is not None else None
        if self.start_states is not None and not self.start_states:
            raise ValueError("start_states is empty")
        self._done = True
        self._started = False

    @property
    def model(self):
        """The world model."""
        return self.core.model

    def action_to_nodes(self, action: Any) -> np.ndarray:
        """The (N,) int8 node indicator of ``action`` (the real env's)."""
        return self.real_env.action_to_nodes(action)

    def action_masks(self) -> np.ndarray:
        """The current mask in MaskablePPO's form (as the real env's ``action_masks()``)."""
        return self.core.action_masks(self.core.mask_array())[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an imagined episode (see the class docstring)."""
        options = check_reset_options(options, RESET_OPTIONS)  # before anything changes
        super().reset(seed=seed)
        if seed is not None:
            self.core.seed(seed)
        start = self._draw_start(seed, options)
        self.core.start(np.zeros(1, np.int64), [start])
        self._done, self._started = False, True
        obs = {
            k: np.asarray(start.observation[k]).copy() for k in self.core.observation_space.spaces
        }
        return obs, {"horizon": start.horizon}

    def _draw_start(self, seed: int | None, options: dict[str, Any]) -> StartState:
        if self.start_states is None:
            return real_start(self.real_env, seed)
        if "start_index" in options:
            i = options["start_index"]
            if isinstance(i, bool) or not isinstance(i, int | np.integer):
                raise ValueError(f"reset option 'start_index' must be an integer, got {i!r}")
            if not 0 <= i < len(self.start_states):
                raise ValueError(f"start_index {i} outside [0, {len(self.start_states)})")
        else:
            i = int(self.np_random.integers(len(self.start_states)))
        return self.start_states[i]

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Imagine one transition under ``action``."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        action = coerce_action(self.action_space, action)
        nodes = np.asarray(self.action_to_nodes(action), dtype=np.int8)
        invalid = bool(np.any(nodes.astype(bool) & ~self.core.mask_array()[0]))
        if invalid and getattr(self.real_env, "invalid_action", "noop") == "raise":
            raise ValueError(f"action {action!r} is not allowed by the current action mask")
        obs, reward, terminated, truncated = self.core.step(nodes[None])
        self._done = bool(terminated[0] or truncated[0])
        info = {"invalid_action": invalid, "step": int(self.core.steps[0])}
        return (
            {k: v[0] for k, v in obs.items()},
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            info,
        )
