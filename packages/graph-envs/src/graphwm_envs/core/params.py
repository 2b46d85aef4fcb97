"""Checks for the fields of the envs' frozen ``XParams`` dataclasses.

Every error names the dataclass and the field (``SARParams.step_reward must be finite, got
nan``): a NaN constant would otherwise turn every reward NaN, a float horizon would be
accepted and a string would fail later with an error that names no parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

__all__ = ["check_choice", "check_int", "check_real"]


def _name(owner: object, field: str) -> str:
    return f"{type(owner).__name__}.{field}"


def check_real(
    owner: object,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check that ``owner.field`` is a finite real number in the given interval; return it.

    Ints count as reals (``stability_high=1``); bools and strings do not.

    Raises:
        TypeError: not a real number. ValueError: NaN, infinite or outside the interval.
    """
    value = getattr(owner, field)
    name = _name(owner, field)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value}")
    below = number <= low if (low is not None and low_open) else low is not None and number < low
    above = (
        number >= high if (high is not None and high_open) else high is not None and number > high
    )
    if below or above:
        raise ValueError(
            f"{name} must lie in {_interval(low, high, low_open, high_open)}, got {value}"
        )
    return number


def check_int(owner: object, field: str, *, low: int | None = None, high: int | None = None) -> int:
    """Check that ``owner.field`` is an integer (not a bool or a float) in ``[low, high]``.

    Raises:
        TypeError: not an integer. ValueError: outside the range.
    """
    value = getattr(owner, field)
    name = _name(owner, field)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {value}")
    return number


def check_choice(owner: object, field: str, choices: Iterable[Any]) -> None:
    """Check that ``owner.field`` is one of ``choices``.

    Raises:
        ValueError: naming the field and the allowed values.
    """
    value = getattr(owner, field)
    allowed = tuple(choices)
    if value not in allowed:
        raise ValueError(f"{_name(owner, field)} must be one of {allowed}, got {value!r}")


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(-inf" if low is None else ("(" if low_open else "[") + f"{low:g}"
    right = "inf)" if high is None else f"{high:g}" + (")" if high_open else "]")
    return f"{left}, {right}"
