"""The GDD join: each dream agent's record gets its world model's single- and multi-step GDD,
and the Spearman rank correlation of real-env return with GDD over the models of an env."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from graphwm.downstream.record import DownstreamRecord


def gdd_maps(
    single: Iterable[Any], multi: Iterable[Any], num_nodes: int
) -> tuple[dict[tuple[str, str, int], float], dict[tuple[str, str, int], float]]:
    """``(single, multi)`` GDD lookups for :func:`attach_gdd` from evaluation records
    (objects or dicts with ``env``, ``model``, ``seed``, ``size`` and ``gdd``).

    Single-step: the GDD at ``size == num_nodes`` when evaluated, else the mean over the
    model's test sizes. Multi-step: the mean over the horizon (of the size closest to
    ``num_nodes``).
    """

    def get(r: Any, key: str) -> Any:
        return r[key] if isinstance(r, Mapping) else getattr(r, key)

    by_model: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in single:
        key = (get(r, "env"), get(r, "model"), int(get(r, "seed")))
        by_model.setdefault(key, {})[int(get(r, "size"))] = float(get(r, "gdd"))
    single_map = {
        k: sizes[num_nodes] if num_nodes in sizes else float(np.mean(list(sizes.values())))
        for k, sizes in by_model.items()
    }
    multi_sizes: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in multi:
        key = (get(r, "env"), get(r, "model"), int(get(r, "seed")))
        values = np.asarray(get(r, "gdd"), float).reshape(-1)
        multi_sizes.setdefault(key, {})[int(get(r, "size"))] = float(np.nanmean(values))
    multi_map = {
        k: sizes[min(sizes, key=lambda s: abs(s - num_nodes))] for k, sizes in multi_sizes.items()
    }
    return single_map, multi_map


def attach_gdd(
    records: Iterable[DownstreamRecord],
    single: Mapping[tuple[str, str, int], float],
    multi: Mapping[tuple[str, str, int], float] | None = None,
) -> list[DownstreamRecord]:
    """Records with ``gdd_single`` / ``gdd_multi`` looked up by ``(env, model, seed)``."""
    multi = multi or {}
    out = []
    for r in records:
        if r.model is None:
            out.append(r)
            continue
        key = (r.env, r.model, r.seed)
        out.append(replace(r, gdd_single=single.get(key), gdd_multi=multi.get(key)))
    return out


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (``nan`` with fewer than 3 points or a constant side)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def correlations(records: Iterable[DownstreamRecord]) -> dict[str, dict[str, float]]:
    """Per env: Spearman rank correlation of real-env return with single- and multi-step GDD
    over the dream agents (a negative value: lower GDD, higher return)."""
    by_env: dict[str, list[DownstreamRecord]] = {}
    for r in records:
        if r.model is not None:
            by_env.setdefault(r.env, []).append(r)
    out = {}
    for env, rs in sorted(by_env.items()):
        ret = [r.mean_return for r in rs]
        out[env] = {
            "single": spearman([nan_if_none(r.gdd_single) for r in rs], ret),
            "multi": spearman([nan_if_none(r.gdd_multi) for r in rs], ret),
            "n": len(rs),
        }
    return out


def nan_if_none(v: float | None) -> float:
    return math.nan if v is None else float(v)
