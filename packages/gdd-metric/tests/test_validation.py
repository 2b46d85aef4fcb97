"""Bad input raises a clear exception naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths, gdd, normalise_schema, validate_samples


@pytest.fixture
def case(helpers, rng):
    return helpers.problem(rng, (1, 1, 1, 1), (4, 3), 5, shift=0.0)


def test_mismatched_node_counts(helpers, case, rng):
    schema, bw, x, _ = case
    y = helpers.samples(schema, 3, 6, rng)
    with pytest.raises(ValueError, match="mismatched node counts"):
        gdd(x, y, schema, bw)


@pytest.mark.parametrize(
    "key, shape",
    [
        ("node_continuous", (4, 5, 2)),
        ("node_categorical", (4, 5, 0)),
        ("graph_continuous", (4, 3)),
        ("graph_categorical", (3, 1)),
        ("node_continuous", (4, 6, 1)),
    ],
)
def test_wrong_feature_shape(case, key, shape):
    schema, bw, x, y = case
    bad = dict(x, **{key: np.zeros(shape, dtype=x[key].dtype)})
    with pytest.raises(ValueError, match=key):
        gdd(bad, y, schema, bw)


@pytest.mark.parametrize("key", ["node_continuous", "graph_continuous"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf(case, key, value):
    schema, bw, x, y = case
    arr = x[key].copy()
    arr.flat[0] = value
    with pytest.raises(ValueError, match="NaN or inf"):
        gdd(dict(x, **{key: arr}), y, schema, bw)


@pytest.mark.parametrize("key, value", [("node_categorical", 2), ("graph_categorical", -1)])
def test_category_outside_cardinality(case, key, value):
    schema, bw, x, y = case
    arr = y[key].copy()
    arr.flat[-1] = value
    with pytest.raises(ValueError, match="outside its cardinality"):
        gdd(x, dict(y, **{key: arr}), schema, bw)


def test_float_categories_must_be_integral(case):
    schema, bw, x, y = case
    with pytest.raises(ValueError, match="integer category codes"):
        gdd(dict(x, node_categorical=x["node_categorical"] + 0.5), y, schema, bw)


def test_empty_sample_set(helpers, case, rng):
    schema, bw, x, _ = case
    empty = helpers.samples(schema, 0, 5, rng)
    with pytest.raises(ValueError, match="empty sample set"):
        gdd(x, empty, schema, bw)


def test_adjacency_problems(case):
    schema, bw, x, y = case
    adj = x["adjacency"].copy()
    adj[1, 0, 3], adj[1, 3, 0] = 1, 0
    with pytest.raises(ValueError, match="not symmetric"):
        gdd(dict(x, adjacency=adj), y, schema, bw)
    adj = x["adjacency"].copy()
    adj[0, 2, 2] = 1
    with pytest.raises(ValueError, match="self-loop"):
        gdd(dict(x, adjacency=adj), y, schema, bw)
    adj = x["adjacency"].astype(float)
    adj[0, 1, 2] = adj[0, 2, 1] = 0.5
    with pytest.raises(ValueError, match="only 0 and 1"):
        gdd(dict(x, adjacency=adj), y, schema, bw)
    with pytest.raises(ValueError, match=r"\(S, N, N\)"):
        gdd(dict(x, adjacency=x["adjacency"][:, :, :4]), y, schema, bw)
    with pytest.raises(KeyError, match="adjacency"):
        gdd({k: v for k, v in x.items() if k != "adjacency"}, y, schema, bw)


def test_bool_adjacency_accepted(case):
    schema, bw, x, y = case
    a = gdd(x, y, schema, bw)
    b = gdd(dict(x, adjacency=x["adjacency"].astype(bool)), y, schema, bw)
    assert a == b


def test_missing_feature_key(case):
    schema, bw, x, y = case
    with pytest.raises(KeyError, match="node_continuous"):
        gdd({k: v for k, v in x.items() if k != "node_continuous"}, y, schema, bw)


@pytest.mark.parametrize("value", [0.0, -1.0, np.nan, np.inf])
def test_non_positive_bandwidths(value):
    with pytest.raises(ValueError, match="sigma"):
        Bandwidths(sigma={"a": value})
    with pytest.raises(ValueError, match="lambda"):
        Bandwidths(lam={"a": value})


def test_missing_bandwidth(case):
    schema, bw, x, y = case
    with pytest.raises(KeyError, match="nc0"):
        gdd(x, y, schema, Bandwidths(sigma={}, lam=bw.lam))
    with pytest.raises(KeyError, match="gk0"):
        gdd(x, y, schema, Bandwidths(sigma=bw.sigma, lam={"nk0": 1.0}))


def test_bad_options(case):
    schema, bw, x, y = case
    with pytest.raises(ValueError, match="weights"):
        gdd(x, y, schema, bw, weights=(1, -1, 1))
    with pytest.raises(ValueError, match="weights"):
        gdd(x, y, schema, bw, weights=(1, 1))
    with pytest.raises(ValueError, match="epsilon"):
        gdd(x, y, schema, bw, epsilon=-0.1)
    with pytest.raises(ValueError, match="multipliers"):
        gdd(x, y, schema, bw, multipliers=(1.0, 0.0))
    with pytest.raises(ValueError, match="estimator"):
        gdd(x, y, schema, bw, estimator="linear")
    # the keyword options are one set (GDDOptions): a misspelt one is refused by name
    with pytest.raises(TypeError, match="estimater"):
        gdd(x, y, schema, bw, estimater="unbiased")  # type: ignore[call-arg]
    one = {k: v[:1] for k, v in x.items()}
    with pytest.raises(ValueError, match="at least 2 samples"):
        gdd(one, y, schema, bw, estimator="unbiased")


def test_schema_errors():
    with pytest.raises(ValueError, match="twice"):
        normalise_schema({"node_continuous": ["a"], "graph_categorical": {"a": 2}})
    with pytest.raises(ValueError, match="cardinality"):
        normalise_schema({"node_categorical": {"a": 0}})
    with pytest.raises(TypeError, match="list of feature names"):
        normalise_schema({"node_continuous": "abc"})
    with pytest.raises(TypeError, match="dict"):
        normalise_schema(["node_continuous"])
    s = normalise_schema({"node_continuous": ["a"], "ranges": {"a": [0, 1]}})
    assert s.to_dict()["node_continuous"] == ["a"]


def test_validate_samples_returns_normalised_arrays(case):
    schema, _, x, _ = case
    v = validate_samples(x, schema)
    assert v.node_continuous.dtype == np.float64 and v.node_categorical.dtype == np.int64
    assert v.num_samples == 4 and v.num_nodes == 5
    np.testing.assert_array_equal(v.support, x["adjacency"].any(0))


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.bool_, np.float32])
def test_adjacency_check_accepts_and_names_alike_for_every_dtype(dtype):
    """Integer and bool sets take whole-array reductions, floats the support's gathers: the
    same support for a valid set, the same named problem for an invalid one (a negative
    entry, an asymmetric pair)."""
    from gdd_metric.schema import _check_adjacency

    rng = np.random.default_rng(0)
    upper = np.triu(rng.random((6, 9, 9)) < 0.3, 1)
    adj = (upper | upper.transpose(0, 2, 1)).astype(dtype)
    _, support = _check_adjacency(adj, "x")
    assert np.array_equal(support, (upper | upper.transpose(0, 2, 1)).any(0))
    asym = adj.copy()
    asym[2, 0, 5], asym[2, 5, 0] = 1, 0
    with pytest.raises(ValueError, match=r"not symmetric \(sample 2\)"):
        _check_adjacency(asym, "x")
    if dtype != np.bool_:
        neg = adj.copy()
        neg[1, 3, 4] = neg[1, 4, 3] = -1
        with pytest.raises(ValueError, match="only 0 and 1, found -1"):
            _check_adjacency(neg, "x")
