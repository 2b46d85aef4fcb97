"""Zero-node (terminal) sample sets and scoring a sub-schema."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import gdd, gdd_many, select_features
from gdd_metric.reference import reference_gdd

FULL = {
    "node_continuous": ["stability"],
    "node_categorical": {"survivor": 2, "action_mask": 2},
    "graph_continuous": ["k", "reward"],
    "graph_categorical": {"escorting": 2, "continuation": 2},
}


def _sets(helpers, rng, n=6):
    bw = helpers.bandwidths(FULL, rng)
    x = helpers.samples(FULL, 5, n, rng)
    y = helpers.samples(FULL, 7, n, rng, shift=0.8)
    return bw, x, y


@pytest.mark.parametrize("seed", range(3))
def test_zero_nodes_full_schema(helpers, seed):
    """Node arrays (S, 0, F) and adjacency (S, 0, 0): node and edge terms are exactly 0."""
    rng = np.random.default_rng(seed)
    bw, x, y = _sets(helpers, rng, n=0)
    assert x["adjacency"].shape == (5, 0, 0) and x["node_continuous"].shape == (5, 0, 1)
    r = gdd(x, y, FULL, bw)
    assert r.node == 0.0 and r.edge == 0.0
    assert r.graph > 0 and r.joint > 0
    ref = reference_gdd(x, y, FULL, bw)
    assert r.mmd2 == pytest.approx(ref.mmd2, abs=1e-12)
    assert r.joint == pytest.approx(ref.joint, abs=1e-12)


def test_select_reward_and_continuation(helpers, rng):
    bw, x, y = _sets(helpers, rng)
    keep = ["reward", "continuation"]
    xs, sub = select_features(x, FULL, keep, keep_nodes=False)
    ys, _ = select_features(y, FULL, keep, keep_nodes=False)
    assert sub == {
        "node_continuous": [],
        "node_categorical": {},
        "graph_continuous": ["reward"],
        "graph_categorical": {"continuation": 2},
    }
    np.testing.assert_array_equal(xs["graph_continuous"][:, 0], x["graph_continuous"][:, 1])
    assert xs["adjacency"].shape == (5, 0, 0)
    r = gdd(xs, ys, sub, bw)  # full-schema bandwidths serve the sub-schema
    assert r.node == 0.0 and r.edge == 0.0 and r.graph > 0
    ref = reference_gdd(xs, ys, sub, bw)
    assert r.mmd2 == pytest.approx(ref.mmd2, abs=1e-12)
    many = gdd_many([(xs, ys), (xs, xs)], sub, bw)
    assert many[0] == r and many[1].gdd == 0.0


def test_select_keeps_nodes_and_topology(helpers, rng):
    bw, x, y = _sets(helpers, rng)
    xs, sub = select_features(x, FULL, ["stability", "continuation"])
    ys, _ = select_features(y, FULL, ["stability", "continuation"])
    assert xs["node_categorical"].shape == (5, 6, 0)
    r = gdd(xs, ys, sub, bw)
    assert r.edge > 0 and r.node > 0
    ref = reference_gdd(xs, ys, sub, bw)
    assert r.mmd2 == pytest.approx(ref.mmd2, abs=1e-12)


def test_select_errors(helpers, rng):
    _, x, _ = _sets(helpers, rng)
    with pytest.raises(KeyError, match="not in the schema"):
        select_features(x, FULL, ["nope"])
    with pytest.raises(ValueError, match="keep_nodes=False"):
        select_features(x, FULL, ["stability"], keep_nodes=False)


def test_only_topology(helpers, rng):
    """An empty schema scores topology alone: everything but edge/joint is constant."""
    _, x, y = _sets(helpers, rng)
    r = gdd({"adjacency": x["adjacency"]}, {"adjacency": y["adjacency"]}, {}, {})
    assert r.node == 0.0 and r.graph == 0.0
    assert r.edge == pytest.approx(r.joint, abs=1e-15) and r.edge > 0
