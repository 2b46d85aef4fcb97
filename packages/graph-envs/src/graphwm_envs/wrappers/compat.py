"""Adapters for RL libraries whose conventions the plain envs cannot serve (docs/envs.md,
"Other RL libraries").

The plain envs already work with torchrl, skrl and SB3 (every observation key is a ``Box`` or a
``MultiDiscrete``, ``obs["action_mask"]`` is the node mask). Four things need a wrapper:

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

* :class:`SkrlObservation`: skrl sizes a model by ``Model.num_observations``, which counts a
  ``MultiDiscrete([c])`` key as c one-hot columns while its flattened observation holds one
  column per entry; the wrapper presents every ``MultiDiscrete`` key as the integer ``Box`` of
  the same values, so the two counts agree.
* :class:`NumpyInfo`: torchrl's info readers (``default_info_dict_reader``,
  ``auto_register_info_dict``) read ``value.dtype``; the envs report Python ``bool``, ``int``,
  ``float`` and ``str`` values, which the wrapper turns into 0-d numpy arrays.

No wrapper changes the env's dynamics or the values it reports; the mask wrappers read the
mask after every ``reset``/``step``.
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


class SkrlObservation(gym.ObservationWrapper):
    """The observation with every ``MultiDiscrete`` key presented as an integer ``Box`` (same
    shape, dtype and values; bounds ``0`` and ``nvec - 1``), so that skrl's
    ``Model.num_observations`` equals the width of the flattened observation skrl hands a model.

    skrl counts a ``MultiDiscrete([c])`` as c columns (its one-hot size) but flattens the value
    to one column, so a network sized by ``self.num_observations`` fails on the first batch
    wherever the observation has a ``MultiDiscrete`` key (SAR's ``graph_categorical``, any env
    with graph-level categorical features). ``node_categorical`` is already a ``Box``. The
    values are unchanged: the model reads the category indices as the other libraries do.

    Example:
        >>> import gymnasium as gym
        >>> import graphwm_envs
        >>> from graphwm_envs.wrappers import SkrlObservation
        >>> env = SkrlObservation(gym.make("graphenv/SAR-v0", num_nodes=6))
        >>> env.observation_space["graph_categorical"]
        Box(0, 1, (1,), int64)
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = _dict_space(env)
        self.observation_space = spaces.Dict(
            {key: _as_box(sub) for key, sub in space.spaces.items()}
        )

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The observation as it is (only the space changes)."""
        return observation


def _as_box(space: spaces.Space) -> spaces.Space:
    """A ``MultiDiscrete`` (start 0) as the integer ``Box`` of the same values; else unchanged."""
    if not isinstance(space, spaces.MultiDiscrete):
        return space
    if np.any(space.start != 0):
        raise ValueError(f"SkrlObservation expects MultiDiscrete keys starting at 0, got {space}")
    return spaces.Box(0, space.nvec - 1, space.shape, space.dtype)


class NumpyInfo(gym.Wrapper):
    """Every ``info`` value of ``reset`` and ``step`` as a 0-d numpy array of its own type
    (``bool`` -> ``bool_``, ``int`` -> ``int64``, ``float`` -> ``float64``, ``str`` -> a
    unicode array); numpy values pass as they are.

    torchrl's info readers (``default_info_dict_reader([...])``, ``auto_register_info_dict()``)
    read each value's ``dtype`` and fail on the Python scalars the envs report
    (``AttributeError: 'bool' object has no attribute 'dtype'``). Gymnasium's vector envs
    already stack infos into numpy arrays; this is the single-env counterpart.

    Example:
        >>> import gymnasium as gym
        >>> import graphwm_envs
        >>> from graphwm_envs.wrappers import NumpyInfo
        >>> env = NumpyInfo(gym.make("graphenv/CF-v0", num_nodes=6))
        >>> obs, info = env.reset(seed=0)
        >>> obs, *_, info = env.step(int(obs["action_mask"].argmax()))
        >>> info["invalid_action"].dtype, info["num_failed"].dtype
        (dtype('bool'), dtype('int64'))
    """

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env; the info values as numpy arrays."""
        observation, info = self.env.reset(**kwargs)
        return observation, _numpy_info(info)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env; the info values as numpy arrays."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, _numpy_info(info)


#: the numpy dtype of each Python scalar type an info value may have (bool before int:
#: ``bool`` is an ``int`` subclass)
_INFO_DTYPES: tuple[tuple[type, type], ...] = (
    (bool, np.bool_),
    (int, np.int64),
    (float, np.float64),
    (str, np.str_),
)


def _numpy_info(info: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in info.items():
        for kind, dtype in _INFO_DTYPES:
            if isinstance(value, kind) and not isinstance(value, np.generic):
                value = np.asarray(value, dtype=dtype)
                break
        else:
            if isinstance(value, np.generic):
                value = np.asarray(value)
        out[key] = value
    return out
