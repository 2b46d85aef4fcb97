"""Wrappers for RL libraries with conventions of their own (docs/envs.md, "Other RL
libraries"): :class:`ActionMasksObservation` (the action mask as an observation key, e.g.
RGC's pair mask for value-based agents) and :class:`TianshouMask` (tianshou's
``{"obs", "mask"}`` observation), :class:`SkrlObservation` (``MultiDiscrete`` keys as integer
``Box`` es, so skrl's ``num_observations`` matches its flattened input) and :class:`NumpyInfo`
(info values as numpy arrays, for torchrl's info readers)."""

from graphwm_envs.wrappers.compat import (
    ACTION_MASKS_KEY,
    ActionMasksObservation,
    NumpyInfo,
    SkrlObservation,
    TianshouMask,
)

__all__ = [
    "ACTION_MASKS_KEY",
    "ActionMasksObservation",
    "NumpyInfo",
    "SkrlObservation",
    "TianshouMask",
]
