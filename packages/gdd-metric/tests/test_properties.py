"""Invariants of the GDD: identity, symmetry, decomposition, PSD Grams, hand values, sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gdd_metric import Bandwidths, gdd, gram_matrices

COMPONENTS = ("node", "graph", "edge", "joint")


@pytest.mark.parametrize("seed", range(8))
def test_identical_sets_give_exactly_zero(helpers, seed):
    rng = np.random.default_rng(seed)
    schema = helpers.schema(*rng.integers(0, 3, 4))
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, int(rng.integers(1, 12)), int(rng.integers(0, 15)), rng)
    y = {k: v.copy() for k, v in x.items()}
    res = gdd(x, y, schema, bw)
    assert res.gdd == 0.0 and res.mmd2 == 0.0
    assert all(getattr(res, c) == 0.0 for c in COMPONENTS)


@pytest.mark.parametrize("seed", range(5))
def test_symmetric(helpers, seed):
    rng = np.random.default_rng(seed)
    schema, bw, x, y = helpers.problem(rng, (2, 2, 2, 2), (7, 4), 6, shift=0.5)
    for est in ("biased", "unbiased"):
        a, b = gdd(x, y, schema, bw, estimator=est), gdd(y, x, schema, bw, estimator=est)
        for field in ("mmd2",) + COMPONENTS:
            assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-13)


@pytest.mark.parametrize("seed", range(5))
def test_component_identity(helpers, seed):
    """GDD^2 = w_n node + w_g graph + w_e edge + eps joint (mmd2 comes from the full K)."""
    rng = np.random.default_rng(seed)
    schema, bw, x, y = helpers.problem(rng, (1, 2, 1, 1), (9, 6), 5, shift=0.2)
    w = tuple(rng.uniform(0, 1, 3))
    eps = float(rng.uniform(0.1, 3))
    for est in ("biased", "unbiased"):
        r = gdd(x, y, schema, bw, weights=w, epsilon=eps, estimator=est)
        combo = w[0] * r.node + w[1] * r.graph + w[2] * r.edge + eps * r.joint
        assert r.mmd2 == pytest.approx(combo, abs=1e-12)
        assert r.gdd == pytest.approx(math.sqrt(max(r.mmd2, 0.0)), abs=1e-15)
        assert r.weights == pytest.approx(w) and r.epsilon == eps and r.estimator == est


@pytest.mark.parametrize("seed", range(6))
def test_gram_matrices_positive_semidefinite(helpers, seed):
    rng = np.random.default_rng(seed)
    schema = helpers.schema(2, 2, 1, 2)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 15, 6, rng, p_edge=rng.uniform(0.05, 0.5))
    y = helpers.samples(schema, 15, 6, rng, p_edge=rng.uniform(0.0, 0.2))  # some empty sets
    grams = gram_matrices(x, y, schema, bw)
    for comp in COMPONENTS:
        k = getattr(grams, comp)
        np.testing.assert_array_equal(k, k.T)
        np.testing.assert_array_equal(np.diag(k), 1.0)
        assert np.linalg.eigvalsh(k).min() > -1e-10, comp


def _topology_only(edge_sets, n=4):
    adj = np.zeros((len(edge_sets), n, n), dtype=np.int8)
    for s, edges in enumerate(edge_sets):
        for u, v in edges:
            adj[s, u, v] = adj[s, v, u] = 1
    return {"adjacency": adj}


def test_jaccard_hand_values():
    sets = [[(0, 1), (1, 2)], [(0, 1), (2, 3)], [], [], [(1, 0), (2, 1)], [(0, 1)]]
    data = _topology_only(sets)
    k = gram_matrices(data, data, {}, Bandwidths()).edge[:6, :6]
    assert k[0, 1] == pytest.approx(1 / 3)  # |{01}| / |{01, 12, 23}|
    assert k[2, 3] == 1.0  # K_J(empty, empty) = 1
    assert k[0, 2] == 0.0 and k[2, 5] == 0.0  # K_J(empty, E) = 0
    assert k[0, 4] == 1.0  # same undirected edges, each counted once
    assert k[0, 5] == pytest.approx(1 / 2) and k[1, 5] == pytest.approx(1 / 2)


def test_hand_computed_graph_continuous():
    """One sample each, graph feature 0 vs 1, sigma = 1, M = {1}, no nodes."""
    schema = {"graph_continuous": ["r"]}
    bw = Bandwidths(sigma={"r": 1.0})
    x = {"adjacency": np.zeros((1, 0, 0)), "graph_continuous": np.array([[0.0]])}
    y = {"adjacency": np.zeros((1, 0, 0)), "graph_continuous": np.array([[1.0]])}
    r = gdd(x, y, schema, bw, multipliers=(1.0,))
    expected = 2 - 2 * math.exp(-0.5)  # K(x,x) + K(y,y) - 2 K(x,y)
    assert r.graph == pytest.approx(expected, abs=1e-15)
    assert r.joint == pytest.approx(expected, abs=1e-15)
    assert r.node == 0.0 and r.edge == 0.0
    assert r.mmd2 == pytest.approx(expected / 3 + expected, abs=1e-15)


def test_hand_computed_node_categorical():
    """N = 2, categories (0, 0) vs (0, 1), lambda = ln 2 so exp(-lambda) = 1/2."""
    schema = {"node_categorical": {"c": 2}}
    bw = Bandwidths(lam={"c": math.log(2)})
    adj = np.zeros((1, 2, 2), dtype=np.int8)
    x = {"adjacency": adj, "node_categorical": np.array([[[0], [0]]])}
    y = {"adjacency": adj, "node_categorical": np.array([[[0], [1]]])}
    r = gdd(x, y, schema, bw)
    assert r.node == pytest.approx(2 - 2 * 0.75, abs=1e-15)  # K_add^n = (1 + 1/2) / 2
    assert r.joint == pytest.approx(2 - 2 * 2**-0.5, abs=1e-15)  # K_n^K = exp(-ln2 / 2)
    assert r.graph == 0.0 and r.edge == 0.0


def _base(helpers, seed):
    rng = np.random.default_rng(seed)
    schema = helpers.schema(2, 2, 2, 2)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 12, 8, rng)
    y = helpers.samples(schema, 12, 8, rng)
    return rng, schema, bw, x, y


def _changed(before, after, raised):
    for comp in COMPONENTS:
        if comp in raised:
            assert getattr(after, comp) > getattr(before, comp) + 1e-6, comp
        else:
            assert getattr(after, comp) == getattr(before, comp), comp


@pytest.mark.parametrize(
    ("key", "shift", "raised"),
    [
        ("node_continuous", [1.5, 0.0], {"node", "joint"}),
        ("graph_continuous", [0.0, 2.0], {"graph", "joint"}),
    ],
)
@pytest.mark.parametrize("seed", range(4))
def test_continuous_shift_raises_its_level_and_joint_only(helpers, seed, key, shift, raised):
    rng, schema, bw, x, y = _base(helpers, seed)
    before = gdd(x, y, schema, bw)
    y2 = dict(y, **{key: y[key] + np.array(shift)})
    _changed(before, gdd(x, y2, schema, bw), raised)


@pytest.mark.parametrize("seed", range(4))
def test_categorical_flip_rate_raises_matching_component(helpers, seed):
    rng, schema, bw, x, y = _base(helpers, seed)
    # identical categorical distributions first, then flip one feature's value often in y
    x = dict(x, node_categorical=np.zeros_like(x["node_categorical"]))
    y = dict(y, node_categorical=np.zeros_like(y["node_categorical"]))
    before = gdd(x, y, schema, bw)
    cat = y["node_categorical"].copy()
    cat[..., 1] = (rng.random(cat.shape[:2]) < 0.6).astype(np.int64)
    _changed(before, gdd(x, dict(y, node_categorical=cat), schema, bw), {"node", "joint"})
    x = dict(x, graph_categorical=np.zeros_like(x["graph_categorical"]))
    y = dict(y, graph_categorical=np.zeros_like(y["graph_categorical"]))
    before = gdd(x, y, schema, bw)
    gcat = y["graph_categorical"].copy()
    gcat[:, 0] = np.arange(len(gcat)) % 2  # flip rate 1/2
    _changed(before, gdd(x, dict(y, graph_categorical=gcat), schema, bw), {"graph", "joint"})


def _set_edge(adj, u, v, present):
    out = adj.copy()
    out[:, u, v] = out[:, v, u] = int(present)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_edge_frequency_raises_edge_and_joint_only(helpers, seed):
    rng, schema, bw, x, y = _base(helpers, seed)
    x = dict(x, adjacency=_set_edge(x["adjacency"], 2, 5, False))
    y = dict(y, adjacency=_set_edge(y["adjacency"], 2, 5, False))
    before = gdd(x, y, schema, bw)  # edge {2, 5} absent in both sets
    after = gdd(x, dict(y, adjacency=_set_edge(y["adjacency"], 2, 5, True)), schema, bw)
    _changed(before, after, {"edge", "joint"})  # ... now always present in y


def test_biased_gdd_shrinks_with_sample_size(helpers):
    schema = helpers.schema(1, 1, 1, 1)
    bw = helpers.bandwidths(schema, np.random.default_rng(0))
    means = []
    for s in (4, 16, 64):
        vals = []
        for seed in range(4):
            rng = np.random.default_rng(1000 * s + seed)
            x = helpers.samples(schema, s, 5, rng)
            y = helpers.samples(schema, s, 5, rng)
            vals.append(gdd(x, y, schema, bw).mmd2)
        means.append(np.mean(vals))
    assert means[0] > means[1] > means[2]
    assert means[2] < 0.25 * means[0]  # biased MMD^2 ~ 1/S under the null
