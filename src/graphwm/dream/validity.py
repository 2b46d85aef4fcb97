"""Turn a model's sampled prediction into an observation the real env could have produced.

The models already sample 0/1 symmetric adjacencies and in-range categories, but an agent must
never see anything outside the observation space, whatever the model does. The rules (applied
batched, on the model's device; docs/dream.md lists them):

* ``adjacency``: the upper triangle, mirrored (symmetric), zero diagonal, values clipped to 0/1;
* continuous features: NaN -> 0, then clipped to the Box bounds of the real env's space
  (so e.g. SAR's stability stays in [0, 1] and OD's constant k stays constant);
* categorical features: clipped to ``[0, card - 1]``;
* ``action_mask``: 0/1; a sampled all-zero mask (which would leave MaskablePPO without an
  action) is replaced by the episode's previous mask (never all zero, by induction from the
  real start state; an all-zero start mask is replaced by all ones);
* reward: NaN -> 0, +-inf -> the largest finite float32.

Keys the real env's observation space lacks (an env without some feature type) are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

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
                x = torch.maximum(
                    torch.minimum(torch.nan_to_num(x, nan=0.0), self._high[key]), self._low[key]
                )
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


def valid_reward(reward: torch.Tensor) -> np.ndarray:
    """Rewards as float32 with NaN -> 0 and infinities -> the largest finite float32."""
    big = float(np.finfo(np.float32).max)
    return torch.nan_to_num(reward.float(), nan=0.0, posinf=big, neginf=-big).cpu().numpy()
