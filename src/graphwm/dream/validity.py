"""Turn a model's sampled prediction into an observation the real env could have produced.

The models already sample 0/1 symmetric adjacencies and in-range categories, but an agent must
never see anything outside the observation space, whatever the model does. The rules (applied
batched, on the model's device; docs/dream.md lists them):

* ``adjacency``: the upper triangle, mirrored (symmetric), zero diagonal, values clipped to 0/1;
* NaN anywhere in a prediction raises ``FloatingPointError`` (a NaN is never passed off as
  data: a model with NaN weights would otherwise look like reward 0 and a terminated episode);
* continuous features: clipped to the Box bounds of the real env's space
  (so e.g. SAR's stability stays in [0, 1] and OD's constant k stays constant);
* categorical features: clipped to ``[0, card - 1]``;
* ``action_mask``: 0/1; a sampled all-zero mask (which would leave MaskablePPO without an
  action) is replaced by the episode's previous mask (never all zero, by induction from the
  real start state; an all-zero start mask is replaced by all ones);
* reward: +-inf -> the largest finite float32.

Keys the real env's observation space lacks (an env without some feature type) are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces


class ObservationFixer:
    """Clips batched predictions to a single-env ``spaces.Dict`` observation space.

    Args:
        observation_space: the real env's (single) observation space.
        device: where the predictions live.
    """

    def __init__(self, observation_space: spaces.Space, device: torch.device) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"expected a spaces.Dict observation space, got {observation_space}")
        self.space = observation_space
        self.keys = tuple(observation_space.spaces)
        self._low: dict[str, torch.Tensor] = {}
        self._high: dict[str, torch.Tensor] = {}
        for key, sp in observation_space.spaces.items():
            if isinstance(sp, spaces.Box):
                low, high = sp.low, sp.high
            elif isinstance(sp, spaces.MultiDiscrete):
                low, high = np.zeros_like(sp.nvec), sp.nvec - 1
            elif isinstance(sp, spaces.MultiBinary):
                low, high = np.zeros(sp.shape), np.ones(sp.shape)
            else:
                raise TypeError(f"unsupported observation space {sp} for key {key!r}")
            dtype = torch.float32 if np.issubdtype(sp.dtype, np.floating) else torch.int64
            self._low[key] = torch.as_tensor(np.asarray(low), dtype=dtype, device=device)
            self._high[key] = torch.as_tensor(np.asarray(high), dtype=dtype, device=device)

    def observation(
        self, pred: Mapping[str, torch.Tensor], previous_mask: torch.Tensor | None
    ) -> tuple[dict[str, np.ndarray], torch.Tensor | None]:
        """Valid batched observation (numpy, leading B axis) and the new mask tensor (B, N)."""
        out: dict[str, np.ndarray] = {}
        mask = None
        for key in self.keys:
            x = pred[key]
            refuse_nan(x, key)
            if key == "adjacency":
                upper = torch.triu(x.round().clamp(0, 1), diagonal=1)
                x = upper + upper.transpose(-1, -2)
            elif key == "action_mask":
                x = x.round().clamp(0, 1).to(torch.int64)
                if previous_mask is not None:
                    empty = x.sum(-1) == 0
                    x = torch.where(empty[:, None], previous_mask, x)
                mask = x
            elif x.is_floating_point() and self._low[key].is_floating_point():
                x = torch.maximum(torch.minimum(x, self._high[key]), self._low[key])
            else:
                x = x.round() if x.is_floating_point() else x
                x = torch.maximum(torch.minimum(x.long(), self._high[key]), self._low[key])
            out[key] = x.cpu().numpy().astype(self.space[key].dtype, copy=False)
        return out, mask


def start_mask(action_mask: np.ndarray) -> np.ndarray:
    """A start state's mask as int64, all ones where it is all zero."""
    m = np.asarray(action_mask, dtype=np.int64).copy()
    m[m.sum(-1) == 0] = 1
    return m


def refuse_nan(x: torch.Tensor, key: str) -> None:
    """Raise ``FloatingPointError`` if the prediction ``x`` of ``key`` holds a NaN."""
    if x.is_floating_point() and bool(torch.isnan(x).any()):
        raise FloatingPointError(
            f"the world model predicted NaN in {key!r}; a NaN is never passed to an agent as "
            "data (are the model's weights finite? graphwm.dream checks them when the env is "
            "built)"
        )


def valid_reward(reward: torch.Tensor) -> np.ndarray:
    """Rewards as float32 with infinities -> the largest finite float32; NaN raises
    ``FloatingPointError``."""
    refuse_nan(reward, "reward")
    big = float(np.finfo(np.float32).max)
    return torch.nan_to_num(reward.float(), posinf=big, neginf=-big).cpu().numpy()


def check_reset_options(options: Any, known: tuple[str, ...]) -> dict[str, Any]:
    """``options`` as a dict after checking it is ``None`` or a mapping of known keys (a typo
    would otherwise be ignored). Raises ``TypeError`` / ``ValueError`` naming the problem."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"reset options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; this env reads {list(known)}")
    return dict(options)
