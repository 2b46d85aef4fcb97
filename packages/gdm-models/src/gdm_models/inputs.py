"""The model's input checks, one owner for every public entry point (issue 38): arrays are
checked as the model will compute with them (dtype, finiteness as float32, exactly 0/1), seeds,
``observe_at`` steps, ``step`` actions and latents of other sizes. Every failure is a
:class:`DataError` (a ``ValueError``) or a ``TypeError`` naming the key, the problem and the
value. :mod:`gdm_models.data` builds the contract's observation and episode checks from these;
docs/models.md ("What each entry point checks") lists which entry point checks what.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "DataError",
    "check_binary",
    "check_categorical",
    "check_finite",
    "check_latent_widths",
    "check_numeric",
    "check_seed",
    "check_step_actions",
    "check_steps",
    "state_shape",
]


class DataError(ValueError):
    """Raised when an observation, episode or action does not follow the data contract."""


#: dtype kinds a numeric input may have: bool, signed and unsigned integers, floats (never
#: complex, object or string arrays, which a cast would silently change)
_NUMERIC_KINDS = "biuf"


def _index(where: np.ndarray) -> tuple[int, ...]:
    """The first index where a boolean array is true, as plain ints (for messages)."""
    return tuple(int(i) for i in np.argwhere(where)[0])


def check_numeric(name: str, a: np.ndarray) -> None:
    """Refuse a dtype a cast to the model's float32/int64 would silently change (complex
    loses its imaginary part; object and string arrays are not numbers)."""
    if a.dtype.kind not in _NUMERIC_KINDS:
        raise DataError(f"{name} must be a real numeric array, got dtype {a.dtype}")


def check_finite(name: str, a: np.ndarray) -> None:
    """Every value finite, and still finite as float32, the dtype the models compute in (a
    float64 1e39 would become inf)."""
    check_numeric(name, a)
    if a.dtype.kind != "f" or not a.size:
        return
    nan = np.isnan(a)
    if nan.any():
        raise DataError(f"{name} contains NaN (at index {_index(nan)})")
    with np.errstate(over="ignore"):  # the overflow is what is being looked for
        as32 = np.isfinite(a.astype(np.float32))
    if not as32.all():
        at = _index(~as32)
        value = a[at].item()
        what = "inf" if math.isinf(value) else f"{value!r}, beyond float32's range (3.4e38)"
        raise DataError(f"{name} contains {what} at index {at}; values must be finite")


def check_binary(name: str, a: np.ndarray) -> None:
    """Exactly 0 or 1 everywhere (0.5 is not an edge, nor half an action)."""
    check_finite(name, a)
    if not a.size:
        return
    bad = (a != 0) & (a != 1)
    if bad.any():
        at = _index(bad)
        raise DataError(
            f"{name} must contain only 0/1 values, found {a[at].item()!r} at index {at}"
        )


def check_categorical(name: str, a: np.ndarray, cards: tuple[int, ...]) -> None:
    if not a.size:
        return
    if a.dtype.kind not in "iub":
        raise DataError(f"{name} must be an integer array, got dtype {a.dtype}")
    for col, k in enumerate(cards):
        v = a[..., col]
        if v.min() < 0 or v.max() >= k:
            raise DataError(
                f"{name} column {col} has values outside [0, {k - 1}] "
                f"(found range [{v.min()}, {v.max()}])"
            )


def check_seed(seed: Any) -> int:
    """An integer seed in [0, 2**64 - 1] (what ``torch.Generator.manual_seed`` takes) as an
    int; a float, a string, a bool or a numpy ``Generator`` is a ``TypeError``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(
            "generator must be a torch.Generator, an integer seed or None, got "
            f"{seed!r} ({type(seed).__name__})"
        )
    if not 0 <= seed < 2**64:
        raise ValueError(f"generator seed must be in [0, 2**64 - 1], got {seed}")
    return int(seed)


def check_steps(steps: Sequence[int], num_observations: int) -> list[int]:
    """``observe_at`` step indices: integers (1.5 is not step 1) inside the trajectory."""
    flat = np.asarray(steps).reshape(-1)
    if flat.size and flat.dtype.kind not in "iu":
        raise DataError(f"observe_at steps must be integers, got {list(flat)!r}")
    idx = [int(t) for t in flat]
    bad = [t for t in idx if not 0 <= t < num_observations]
    if bad:
        raise DataError(
            f"observe_at steps {bad} outside [0, {num_observations - 1}] "
            f"for a trajectory of {num_observations} observations"
        )
    return idx


def state_shape(state: Mapping[str, torch.Tensor]) -> tuple[int, int]:
    """(B, N) of a stepping state: its rows, and its nodes from ``adjacency`` (B, N, N) or
    else the first per-node tensor (B, N, ...)."""
    if "adjacency" in state:
        adj = state["adjacency"]
        return int(adj.shape[0]), int(adj.shape[-1])
    per_node = [v for v in state.values() if v.dim() >= 3]
    if not per_node:
        raise TypeError("a stepping state needs a per-node tensor (B, N, ...)")
    return int(per_node[0].shape[0]), int(per_node[0].shape[1])


def check_step_actions(state: Mapping[str, torch.Tensor], actions: Any) -> None:
    """The actions of ``WorldModel.step``: a (B, N) tensor of 0/1 node indicators for the B
    rows and N nodes of ``state`` (one device-to-host read; a step is never captured)."""
    if not isinstance(actions, torch.Tensor):
        raise TypeError(
            "step takes the actions as a torch.Tensor of (B, N) 0/1 node indicators, got "
            f"{type(actions).__name__} (convert with torch.as_tensor(..., device=model.device))"
        )
    rows, nodes = state_shape(state)
    if tuple(actions.shape) != (rows, nodes):
        raise DataError(
            f"step actions have shape {tuple(actions.shape)}, expected (B, N) = "
            f"({rows}, {nodes}) for the state's rows and nodes"
        )
    if actions.is_complex() or actions.dtype == torch.bool:
        return  # (bool: 0/1 by type; complex: refused by the model's cast)
    bad = (actions != 0) & (actions != 1)
    if bool(bad.any()):
        raise DataError(f"step actions must be exactly 0 or 1, found {actions[bad][0].item()!r}")


def check_latent_widths(got: Mapping[str, int], want: Mapping[str, int]) -> None:
    """A latent's widths against this model's (a latent of the same model class at other
    sizes; torch would only say "inconsistent hidden_size")."""
    differ = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    if differ:
        detail = ", ".join(f"{k} {g} (this model: {w})" for k, (g, w) in differ.items())
        raise DataError(f"the latent comes from a model of other sizes: {detail}")
