"""Permutation two-sample test: valid under the null, powerful under a clear shift."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gdd_metric import gdd, permutation_test


def test_p_values_roughly_uniform_under_null(helpers):
    schema = helpers.schema(1, 1, 1, 1)
    bw = helpers.bandwidths(schema, np.random.default_rng(0))
    p_values = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        x = helpers.samples(schema, 8, 4, rng)
        y = helpers.samples(schema, 6, 4, rng)
        p_values.append(permutation_test(x, y, schema, bw, 99, rng)[1])
    p = np.array(p_values)
    counts = np.histogram(p, bins=5, range=(0, 1))[0]
    assert counts.min() >= 20 and counts.max() <= 60, counts  # 40 expected per bin
    assert abs(p.mean() - 0.5) < 0.07
    assert 0.02 <= np.mean(p <= 0.05) <= 0.10


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_small_p_value_under_shift(helpers, estimator):
    rng = np.random.default_rng(3)
    schema = helpers.schema(1, 1, 1, 1)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 15, 5, rng)
    y = helpers.samples(schema, 15, 5, rng, shift=1.5)
    stat, p = permutation_test(x, y, schema, bw, 199, rng, estimator=estimator)
    assert p == pytest.approx(1 / 200)
    assert stat == pytest.approx(gdd(x, y, schema, bw, estimator=estimator).gdd, abs=1e-12)


def test_matches_exhaustive_split_enumeration(helpers):
    """Monte Carlo p-value ~ the exact one over all C(7, 3) relabelings (each via gdd())."""
    rng = np.random.default_rng(5)
    schema = helpers.schema(1, 1, 1, 0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 3, 4, rng)
    y = helpers.samples(schema, 4, 4, rng, shift=0.4)
    pooled = {k: np.concatenate([x[k], y[k]]) for k in x}
    observed = gdd(x, y, schema, bw).mmd2
    exceed = total = 0
    for idx in itertools.combinations(range(7), 3):
        rest = [i for i in range(7) if i not in idx]
        px = {k: v[list(idx)] for k, v in pooled.items()}
        py = {k: v[rest] for k, v in pooled.items()}
        exceed += gdd(px, py, schema, bw).mmd2 >= observed - 1e-12
        total += 1
    exact = exceed / total
    _, p = permutation_test(x, y, schema, bw, 4000, np.random.default_rng(9))
    assert p == pytest.approx(exact, abs=0.03)


def test_deterministic_given_generator(helpers, rng):
    schema = helpers.schema(1, 0, 1, 0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 6, 3, rng)
    y = helpers.samples(schema, 6, 3, rng, shift=0.3)
    a = permutation_test(x, y, schema, bw, 50, np.random.default_rng(1))
    b = permutation_test(x, y, schema, bw, 50, np.random.default_rng(1))
    assert a == b


def test_identical_sets_give_p_one(helpers, rng):
    schema = helpers.schema(1, 1, 0, 0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 5, 3, rng)
    const = {k: np.repeat(v[:1], 5, axis=0) for k, v in x.items()}
    assert permutation_test(const, const, schema, bw, 20, rng) == (0.0, 1.0)


def test_argument_errors(helpers, rng):
    schema = helpers.schema(1, 0, 0, 0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 4, 3, rng)
    with pytest.raises(TypeError, match="Generator"):
        permutation_test(x, x, schema, bw, 10, 123)
    with pytest.raises(ValueError, match=">= 1"):
        permutation_test(x, x, schema, bw, 0, rng)


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_gdd_and_permutation_test_equal_the_two_calls(helpers, estimator):
    """One Gram computation for both: the GDD result and the p-value of the separate calls,
    bit for bit (the evaluation's hot path relies on it)."""
    from gdd_metric import gdd_and_permutation_test

    schema = helpers.schema(2, 1, 1, 1)
    rng = np.random.default_rng(5)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 7, 5, rng)
    y = helpers.samples(schema, 6, 5, rng)
    result, p = gdd_and_permutation_test(
        x, y, schema, bw, 50, np.random.default_rng(9), estimator=estimator
    )
    assert result == gdd(x, y, schema, bw, estimator=estimator)
    want = permutation_test(x, y, schema, bw, 50, np.random.default_rng(9), estimator=estimator)
    assert p == want[1]
    with pytest.raises(ValueError, match="num_permutations"):
        gdd_and_permutation_test(x, y, schema, bw, 0, np.random.default_rng(9))


@pytest.mark.parametrize("test_estimator", ["biased", "unbiased"])
def test_gdd_estimates_equal_the_separate_calls(helpers, test_estimator):
    """Both estimators and the test from one Gram computation: each result is ``gdd()``'s
    with that estimator and the p-value ``permutation_test()``'s, bit for bit."""
    from gdd_metric import gdd_estimates

    schema = helpers.schema(2, 1, 1, 1)
    rng = np.random.default_rng(6)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 7, 5, rng)
    y = helpers.samples(schema, 6, 5, rng, shift=0.3)
    results, p = gdd_estimates(
        x, y, schema, bw, num_permutations=40, rng=np.random.default_rng(2),
        test_estimator=test_estimator,
    )  # fmt: skip
    assert set(results) == {"biased", "unbiased"}
    for est, result in results.items():
        assert result == gdd(x, y, schema, bw, estimator=est)
    # the two estimators really differ on the same samples (the diagonal terms)
    assert results["unbiased"].mmd2 < results["biased"].mmd2
    rng2 = np.random.default_rng(2)
    assert p == permutation_test(x, y, schema, bw, 40, rng2, estimator=test_estimator)[1]
    only, none = gdd_estimates(x, y, schema, bw, estimators=("unbiased",))
    assert none is None and list(only) == ["unbiased"]


def test_gdd_estimates_rejects_bad_arguments(helpers):
    from gdd_metric import gdd_estimates

    schema = helpers.schema(1, 1, 1, 0)
    rng = np.random.default_rng(0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 4, 3, rng)
    with pytest.raises(ValueError, match="estimators"):
        gdd_estimates(x, x, schema, bw, estimators=("v-stat",))
    with pytest.raises(TypeError, match="rng"):
        gdd_estimates(x, x, schema, bw, num_permutations=10)
    one = {k: v[:1] for k, v in x.items()}
    with pytest.raises(ValueError, match="at least 2 samples"):
        gdd_estimates(one, x, schema, bw)
