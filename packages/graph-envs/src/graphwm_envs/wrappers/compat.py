"""Adapters for RL libraries whose conventions the plain envs cannot serve (docs/envs.md,
"Other RL libraries").

The plain envs already work with torchrl, skrl and SB3 (every observation key is a ``Box`` or a
``MultiDiscrete``, ``obs["action_mask"]`` is the node mask). Two things need a wrapper:

* :class:`ActionMasksObservation`: the *action* mask ``env.action_masks()`` as an observation
  key. It differs from the node mask ``obs["action_mask"]`` where an action is not one node:
  RGC's pair mode (``Discrete(N (N - 1) / 2)``, one entry per pair) and ``MultiDiscrete``
  selections (the node mask once per component). A value-based agent masks its Q-values with
  it (e.g. torchrl's ``ActionMask`` transform, ``action_key``-shaped masks).
* :class:`TianshouMask`: tianshou's convention, an observation ``{"obs": ..., "mask": ...}``
  whose ``mask`` its Q-learning policies (DQN, IQN, FQF, BDQN: masked Q-values and masked
  epsilon-greedy draws) and its random policy read (an actor-critic's actor gets
  ``batch.obs`` and masks its logits itself); a one-node ``MultiDiscrete([N])`` action space
  is presented as ``Discrete(N)``, which tianshou's discrete policies require.

Neither wrapper changes the env's dynamics; both read the mask after every ``reset``/``step``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: key of :class:`ActionMasksObservation`'s extra entry
ACTION_MASKS_KEY = "action_masks"


def _action_masks(env: gym.Env) -> np.ndarray:
    """``env.action_masks()`` of the innermost env that has it, as int8."""
    getter = getattr(env.unwrapped, "action_masks", None)
    if getter is None:
        raise TypeError(
            f"{type(env.unwrapped).__name__} has no action_masks() method (the graph envs' "
            "MaskablePPO mask); these wrappers need one"
        )
    return np.asarray(getter(), dtype=np.int8)


def _mask_length(action_space: spaces.Space, num_nodes: int) -> int:
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    raise TypeError(f"unsupported action space {action_space} (Discrete or MultiDiscrete)")


def _dict_space(env: gym.Env) -> spaces.Dict:
    space = env.observation_space
    if not isinstance(space, spaces.Dict):
        raise TypeError(f"expected a graph env with a spaces.Dict observation, got {space}")
    return space


class ActionMasksObservation(gym.ObservationWrapper):
    """Add ``env.action_masks()`` to every observation, as ``obs["action_masks"]`` (int8,
    ``Box(0, 1, (L,))``, L the action mask's length).

    For ``Discrete(N)`` node actions (SAR, CF) it equals ``obs["action_mask"]``; for RGC's
    pair mode it is the exact pair mask (the addable pairs, L = N (N - 1) / 2), for
    ``MultiDiscrete([N] * k)`` the node mask once per component (L = k N). Consumers of the
    data contract (the world models, the metric) do not read the extra key: wrap only the env
    an RL library trains on.

    Example:
        >>> import gymnasium as gym
        >>> import graphwm_envs
        >>> from graphwm_envs.wrappers import ActionMasksObservation
        >>> rgc = gym.make("graphenv/RGC-v0", num_nodes=6, action_mode="pair")
        >>> env = ActionMasksObservation(rgc)
        >>> obs, info = env.reset(seed=0)
        >>> pairs_left = 15 - int(obs["adjacency"].sum()) // 2
        >>> obs["action_masks"].shape, int(obs["action_masks"].sum()) == pairs_left
        ((15,), True)
    """

    def __init__(self, env: gym.Env, key: str = ACTION_MASKS_KEY) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string (an observation key), got {key!r}")
        super().__init__(env)
        space = _dict_space(env)
        if key in space.spaces:
            raise ValueError(f"the observation already has a key {key!r}")
        self.key = key
        n = _num_nodes(space)
        length = _mask_length(env.action_space, n)
        self.observation_space = spaces.Dict(
            {**space.spaces, key: spaces.Box(0, 1, (length,), np.int8)}
        )

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The observation with the action mask added under :attr:`key`."""
        return {**observation, self.key: _action_masks(self.env)}


class TianshouMask(gym.Wrapper):
    """Tianshou's masked observation: ``{"obs": <the graph observation>, "mask": <int8 action
    mask>}``, the layout its discrete policies read (``batch.obs.mask``; the network gets
    ``batch.obs.obs``).

    ``mask`` is ``env.action_masks()``: the node mask for ``Discrete(N)`` (SAR, CF), the pair
    mask in RGC's pair mode. A one-node ``MultiDiscrete([N])`` action space (OD at N <= 20)
    becomes ``Discrete(N)``; a selection of k >= 2 nodes has no tianshou discrete policy and
    is refused (RGC: use ``action_mode="pair"``).

    Example:
        >>> import gymnasium as gym
        >>> import graphwm_envs
        >>> from graphwm_envs.wrappers import TianshouMask
        >>> env = TianshouMask(gym.make("graphenv/OD-v0", num_nodes=10))
        >>> obs, info = env.reset(seed=0)
        >>> sorted(obs), env.action_space, obs["mask"].shape
        (['mask', 'obs'], Discrete(10), (10,))
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = _dict_space(env)
        action_space = env.action_space
        if isinstance(action_space, spaces.MultiDiscrete):
            if action_space.shape != (1,):
                raise ValueError(
                    f"tianshou's discrete policies need a Discrete action space; {action_space} "
                    "selects several nodes (RGC: gym.make(..., action_mode='pair'))"
                )
            action_space = spaces.Discrete(int(action_space.nvec[0]))
        n = _num_nodes(space)
        length = _mask_length(action_space, n)
        self.action_space = action_space
        self.observation_space = spaces.Dict(
            {"obs": space, "mask": spaces.Box(0, 1, (length,), np.int8)}
        )

    def _wrap(self, observation: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"obs": observation, "mask": _action_masks(self.env)}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the env; the observation in tianshou's layout."""
        observation, info = self.env.reset(**kwargs)
        return self._wrap(observation), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Step the env with a tianshou action (an int for a one-node selection)."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._wrap(observation), float(reward), terminated, truncated, info


def _num_nodes(space: spaces.Dict) -> int:
    """N from the observation space's (N, N) adjacency."""
    shape = space["adjacency"].shape
    if not shape:
        raise TypeError(f"the observation space's adjacency has no shape: {space['adjacency']}")
    return int(shape[0])
