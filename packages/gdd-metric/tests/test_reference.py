"""The vectorised GDD agrees with the per-pair reference to 1e-9 on every feature mix."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gdd_metric import gdd, gdd_many, gram_matrices
from gdd_metric.reference import reference_gdd, reference_grams

FIELDS = ("gdd", "mmd2", "node", "graph", "edge", "joint")

# every subset of the four feature types (counts 0 or 2/1), i.e. 16 mixes
MIXES = list(itertools.product((0, 2), (0, 2), (0, 1), (0, 2)))


def assert_same(a, b, tol=1e-9):
    for field in FIELDS:
        assert getattr(a, field) == pytest.approx(getattr(b, field), abs=tol, rel=0), field


@pytest.mark.parametrize("mix", MIXES, ids=lambda m: "nc{}-nk{}-gc{}-gk{}".format(*m))
@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_matches_reference_every_feature_mix(helpers, mix, estimator):
    rng = np.random.default_rng(sum(mix) * 7 + len(estimator))
    schema, bw, pred, true = helpers.problem(rng, mix, (6, 4), 5, shift=0.3)
    fast = gdd(pred, true, schema, bw, estimator=estimator)
    ref = reference_gdd(pred, true, schema, bw, estimator=estimator)
    assert_same(fast, ref)


@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_random_options(helpers, seed):
    """Random sizes, edge densities (incl. empty graphs), weights, eps and multipliers."""
    rng = np.random.default_rng(100 + seed)
    schema = helpers.schema(*rng.integers(0, 3, 4))
    bw = helpers.bandwidths(schema, rng)
    n = int(rng.integers(1, 9))
    pred = helpers.samples(schema, int(rng.integers(2, 8)), n, rng, p_edge=rng.uniform(0, 0.3))
    true = helpers.samples(schema, int(rng.integers(2, 8)), n, rng, p_edge=rng.uniform(0, 0.6))
    opts = dict(
        weights=tuple(rng.uniform(0, 1, 3)),
        epsilon=float(rng.uniform(0.1, 2)),
        multipliers=tuple(rng.uniform(0.05, 5, int(rng.integers(1, 6)))),
    )
    assert_same(gdd(pred, true, schema, bw, **opts), reference_gdd(pred, true, schema, bw, **opts))


def test_gram_matrices_match_reference(helpers, rng):
    schema = helpers.schema(2, 2, 1, 1)
    bw = helpers.bandwidths(schema, rng)
    pred = helpers.samples(schema, 5, 6, rng)
    true = helpers.samples(schema, 3, 6, rng, p_edge=0.0)  # empty edge sets, too
    fast = gram_matrices(pred, true, schema, bw)
    ref, _ = reference_grams(pred, true, schema, bw)
    for comp in ("node", "graph", "edge", "joint"):
        np.testing.assert_allclose(getattr(fast, comp), ref[comp], atol=1e-12, rtol=0)


def test_gdd_many_equals_single_calls(helpers, rng):
    schema = helpers.schema(1, 1, 1, 1)
    bw = helpers.bandwidths(schema, rng)
    pairs = []
    for k in range(9):  # mixed sample counts and node counts -> several batches
        n = (3, 5, 0)[k % 3]
        pairs.append(
            (
                helpers.samples(schema, 4 + k % 2, n, rng),
                helpers.samples(schema, 3, n, rng, shift=0.2 * k),
            )
        )
    many = gdd_many(pairs, schema, bw)
    assert len(many) == len(pairs)
    for (p, t), res in zip(pairs, many, strict=True):
        assert_same(res, gdd(p, t, schema, bw), tol=1e-12)
        assert_same(res, reference_gdd(p, t, schema, bw))


def test_larger_graph_matches_reference(helpers):
    """One larger case (N = 40, sparse) so chunking paths see several nodes per pair."""
    rng = np.random.default_rng(7)
    schema = helpers.schema(2, 1, 2, 1)
    bw = helpers.bandwidths(schema, rng)
    pred = helpers.samples(schema, 8, 40, rng, p_edge=0.05)
    true = helpers.samples(schema, 7, 40, rng, p_edge=0.08)
    assert_same(gdd(pred, true, schema, bw), reference_gdd(pred, true, schema, bw))
