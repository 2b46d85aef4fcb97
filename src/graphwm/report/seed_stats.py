"""Aggregation of a result over seeds: mean and Student-t confidence interval."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["SeedStats", "aggregate", "mean_ci", "t_critical"]


@dataclass(frozen=True)
class SeedStats:
    """Mean and 95% confidence half-width of one quantity over ``n`` seeds."""

    mean: float
    ci: float
    n: int


def t_critical(n: int, confidence: float = 0.95) -> float:
    """Two-sided Student-t critical value ``t_{(1+confidence)/2, n-1}`` for ``n >= 2`` seeds."""
    if n < 2:
        raise ValueError(f"t_critical needs n >= 2 samples, got n={n}")
    return float(stats.t.ppf(0.5 + confidence / 2.0, df=n - 1))


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> SeedStats:
    """Mean and Student-t confidence half-width over seeds.

    ``ci = t_{0.975, n-1} * std(ddof=1) / sqrt(n)``; ``ci = 0`` when ``n == 1`` or all values
    are equal (e.g. a seed-independent quantity such as the self-GDD); mean and ci are
    NaN when ``n == 0``. NaN or inf values propagate (the cell then reads ``nan``/``inf``), so a
    broken seed is visible in the table instead of silently dropped.
    """
    x = np.asarray(list(values), dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return SeedStats(math.nan, math.nan, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = float(np.mean(x))
        if n == 1:
            return SeedStats(mean, 0.0 if math.isfinite(mean) else math.nan, 1)
        if math.isfinite(mean) and np.all(x == x[0]):
            # equal values have no spread; np.std would return rounding noise (~1e-17)
            return SeedStats(mean, 0.0, n)
        half = t_critical(n, confidence) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return SeedStats(mean, half, n)


def aggregate(
    records: Iterable[dict],
    key: Callable[[dict], tuple],
    value: Callable[[dict], float],
) -> dict[tuple, SeedStats]:
    """Group ``records`` by ``key(record)`` and aggregate ``value(record)`` over the group.

    Each group holds one record per seed (duplicates are rejected by ``load_results``).
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(value(record))
    return {k: mean_ci(v) for k, v in groups.items()}
