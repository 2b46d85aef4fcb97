"""Permutation two-sample test with the GDD as statistic (Gretton et al., 2012)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Unpack

import numpy as np

from .bandwidths import Bandwidths
from .mmd import (
    ESTIMATORS,
    GDDOptions,
    GDDResult,
    KernelOptions,
    Options,
    _results,
    pooled_grams,
    resolve_options,
    validate_pair,
)
from .schema import Schema

__all__ = ["permutation_test", "gdd_and_permutation_test", "gdd_estimates"]


def _permuted_mmd2(gram: np.ndarray, in_x: np.ndarray, estimator: str) -> np.ndarray:
    """Squared MMD for many relabelings at once.

    Args:
        gram: (T, T) pooled Gram matrix of the full kernel K.
        in_x: (P, T) bool, True where a pooled sample is assigned to X.
    """
    a = in_x.astype(np.float64)
    b = 1.0 - a
    n = a[0].sum()
    m = b[0].sum()
    ga = a @ gram  # (P, T)
    kxx = np.einsum("pt,pt->p", ga, a)
    kxy = np.einsum("pt,pt->p", ga, b)
    kyy = np.einsum("pt,pt->p", b @ gram, b)
    if estimator == "biased":
        return kxx / n**2 + kyy / m**2 - 2.0 * kxy / (n * m)
    diag = np.diag(gram)
    kxx = kxx - a @ diag
    kyy = kyy - b @ diag
    return kxx / (n * (n - 1)) + kyy / (m * (m - 1)) - 2.0 * kxy / (n * m)


def permutation_test(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    num_permutations: int,
    rng: np.random.Generator,
    **options: Unpack[GDDOptions],
) -> tuple[float, float]:
    """Permutation test of H0: pred and true come from the same distribution.

    The pooled Gram matrix of K is computed once; each permutation relabels the pooled
    samples (uniformly at random, keeping the set sizes) and recomputes the squared-MMD
    estimate from it.

    Args:
        pred, true, schema, bandwidths, options: as in :func:`gdd_metric.gdd`
            (:class:`~gdd_metric.mmd.GDDOptions`).
        num_permutations: number of random relabelings (>= 1).
        rng: the caller's ``numpy.random.Generator``; the only source of randomness.

    Returns:
        ``(statistic, p_value)``: the observed GDD (sqrt of the clamped MMD^2) and
        p = (1 + #{permuted MMD^2 >= observed MMD^2}) / (1 + num_permutations), which is a
        valid p-value (never 0). Ties within float round-off count as ">=".

    Example (one graph feature, no nodes; 0 vs 1 is as far apart as 8 samples can be):
        >>> import numpy as np
        >>> from gdd_metric import Bandwidths
        >>> zeros = {"adjacency": np.zeros((4, 0, 0)), "graph_continuous": np.zeros((4, 1))}
        >>> ones = {"adjacency": np.zeros((4, 0, 0)), "graph_continuous": np.ones((4, 1))}
        >>> bw, schema = Bandwidths(sigma={"r": 1.0}), {"graph_continuous": ["r"]}
        >>> stat, p = permutation_test(zeros, ones, schema, bw, 999, np.random.default_rng(0))
        >>> p < 0.05  # only the 2 of the 70 splits that separate the sets score as high
        True
        >>> permutation_test(zeros, zeros, schema, bw, 99, np.random.default_rng(0))
        (0.0, 1.0)
    """
    _check_test_args(rng, num_permutations)
    params = resolve_options(schema, bandwidths, **options)
    p, t = validate_pair(pred, true, params.schema, params.estimator)
    grams = pooled_grams([(p, t)], params)
    return _test_on_grams(
        grams.total(params.weights, params.epsilon)[0],
        p.num_samples,
        num_permutations,
        rng,
        params.estimator,
    )


def _check_test_args(rng: object, num_permutations: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(num_permutations, bool) or not isinstance(num_permutations, int | np.integer):
        raise TypeError(f"num_permutations must be an int, got {num_permutations!r}")
    if num_permutations < 1:
        raise ValueError(f"num_permutations must be >= 1, got {num_permutations}")


def _test_on_grams(
    gram: np.ndarray, n: int, num_permutations: int, rng: np.random.Generator, estimator: str
) -> tuple[float, float]:
    """The permutation test on the pooled (T, T) Gram matrix of K, the first ``n`` samples
    being pred: ``(statistic, p_value)`` as :func:`permutation_test` returns them."""
    total = gram.shape[-1]
    observed_mask = np.zeros((1, total), dtype=bool)
    observed_mask[0, :n] = True
    observed = float(_permuted_mmd2(gram, observed_mask, estimator)[0])
    tol = 1e-12 * max(1.0, float(np.abs(gram).max()))
    exceed = 0
    batch = 1024
    for start in range(0, int(num_permutations), batch):
        count = min(batch, int(num_permutations) - start)
        order = rng.permuted(np.tile(np.arange(total), (count, 1)), axis=1)
        mask = order < n  # the samples landing in the first n slots form X
        stats = _permuted_mmd2(gram, mask, estimator)
        exceed += int(np.count_nonzero(stats >= observed - tol))
    p_value = (1 + exceed) / (1 + int(num_permutations))
    return math.sqrt(max(observed, 0.0)), p_value


def gdd_and_permutation_test(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    num_permutations: int,
    rng: np.random.Generator,
    **options: Unpack[GDDOptions],
) -> tuple[GDDResult, float]:
    """``(gdd(pred, true, ...), permutation_test(pred, true, ...)[1])`` from one validation of
    the two sets and one computation of their Gram matrices (the expensive part of both):
    the same numbers as the two calls, about half their cost. Arguments as in
    :func:`permutation_test`."""
    _check_test_args(rng, num_permutations)
    params: Options = resolve_options(schema, bandwidths, **options)
    p, t = validate_pair(pred, true, params.schema, params.estimator)
    n, m = p.num_samples, t.num_samples
    grams = pooled_grams([(p, t)], params)
    result = _results(grams, n, m, params)[0]
    gram = grams.total(params.weights, params.epsilon)[0]
    return result, _test_on_grams(gram, n, num_permutations, rng, params.estimator)[1]


def gdd_estimates(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    *,
    estimators: Sequence[str] = ESTIMATORS,
    num_permutations: int = 0,
    rng: np.random.Generator | None = None,
    test_estimator: str = "biased",
    **options: Unpack[KernelOptions],
) -> tuple[dict[str, GDDResult], float | None]:
    """The GDD under each of ``estimators`` and, with ``num_permutations`` > 0, the
    permutation test's p-value (``test_estimator``'s statistic), all from one validation of
    the two sets and one computation of their Gram matrices: per estimator the same numbers as
    ``gdd(pred, true, ..., estimator=e)``, and the p-value of ``permutation_test`` with the
    same ``rng``. Other arguments as in :func:`permutation_test`.

    Returns:
        ``({estimator: GDDResult}, p_value or None)``.
    """
    chosen = tuple(estimators)
    if not chosen or any(e not in ESTIMATORS for e in chosen):
        raise ValueError(f"estimators must be a non-empty subset of {ESTIMATORS}, got {chosen!r}")
    if num_permutations:
        _check_test_args(rng, num_permutations)
    params: Options = resolve_options(schema, bandwidths, **options, estimator=test_estimator)
    # the strictest estimator decides the sample counts (unbiased: >= 2 per set)
    strictest = "unbiased" if "unbiased" in (*chosen, test_estimator) else "biased"
    p, t = validate_pair(pred, true, params.schema, strictest)
    n, m = p.num_samples, t.num_samples
    grams = pooled_grams([(p, t)], params)
    results = {e: _results(grams, n, m, replace(params, estimator=e))[0] for e in chosen}
    if not num_permutations:
        return results, None
    assert rng is not None  # checked by _check_test_args
    gram = grams.total(params.weights, params.epsilon)[0]
    return results, _test_on_grams(gram, n, num_permutations, rng, test_estimator)[1]
