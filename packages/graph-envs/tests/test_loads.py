"""Tests of the CF load (betweenness normalised by the pairs of the whole graph)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from graphwm_envs.cf.loads import betweenness_load, pair_count, update_loads
from graphwm_envs.cf.shk import shk_graph


def _reference_load(adj: np.ndarray) -> np.ndarray:
    """networkx unnormalised betweenness (unordered pairs) divided by P = N(N-1)/2."""
    n = adj.shape[0]
    raw = nx.betweenness_centrality(nx.from_numpy_array(adj.astype(np.int8)), normalized=False)
    return np.array([raw[i] for i in range(n)]) / (n * (n - 1) / 2)


def _random_graph(rng: np.random.Generator, n: int, p: float, isolated: int) -> np.ndarray:
    adj = np.triu(rng.random((n, n)) < p, k=1)
    adj |= adj.T
    gone = rng.choice(n, size=isolated, replace=False)
    adj[gone, :] = False
    adj[:, gone] = False
    return adj


@pytest.mark.parametrize("seed", range(12))
def test_equals_networkx_reference_on_random_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 70))
    adj = _random_graph(rng, n, float(rng.uniform(0.03, 0.4)), isolated=int(rng.integers(0, 5)))
    np.testing.assert_allclose(betweenness_load(adj), _reference_load(adj), rtol=0, atol=1e-9)


def test_equals_networkx_reference_on_shk_graph_with_failed_nodes() -> None:
    adj = shk_graph(np.random.default_rng(3), 150).adjacency
    adj[[4, 40, 77], :] = False
    adj[:, [4, 40, 77]] = False
    load = betweenness_load(adj)
    np.testing.assert_allclose(load, _reference_load(adj), rtol=0, atol=1e-9)
    assert load[[4, 40, 77]].tolist() == [0.0, 0.0, 0.0]


def test_hand_computed_values() -> None:
    # path 0-1-2-3 with two isolated nodes: P = 6*5/2 = 15 (the isolated nodes count)
    adj = np.zeros((6, 6), dtype=bool)
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        adj[a, b] = adj[b, a] = True
    # node 1 lies on the shortest paths of the pairs {0,2}, {0,3}
    np.testing.assert_allclose(betweenness_load(adj), [0, 2 / 15, 2 / 15, 0, 0, 0], atol=1e-15)
    # a 4-cycle: each node lies on one of the two shortest paths of its opposite pair
    cyc = np.zeros((4, 4), dtype=bool)
    for a in range(4):
        cyc[a, (a + 1) % 4] = cyc[(a + 1) % 4, a] = True
    np.testing.assert_allclose(betweenness_load(cyc), [0.5 / 6] * 4, atol=1e-15)


@pytest.mark.parametrize("n", [5, 10, 100])
def test_star_centre_attains_the_maximum_load(n: int) -> None:
    adj = np.zeros((n, n), dtype=bool)
    adj[0, 1:] = adj[1:, 0] = True
    load = betweenness_load(adj)
    assert load[0] == pytest.approx((n - 2) / n, abs=1e-12)
    assert np.all(load[1:] == 0.0)
    assert pair_count(n) == n * (n - 1) // 2


@pytest.mark.parametrize("seed", range(6))
def test_update_equals_full_recomputation_along_a_cascade(seed: int) -> None:
    rng = np.random.default_rng(seed)
    adj = shk_graph(rng, 80).adjacency
    load = betweenness_load(adj)
    for _ in range(12):
        alive = np.flatnonzero(adj.any(axis=1))
        if alive.size == 0:
            break
        removed = rng.choice(alive, size=min(alive.size, int(rng.integers(1, 4))), replace=False)
        touched = np.union1d(removed, np.flatnonzero(adj[removed].any(axis=0)))
        adj[removed, :] = False
        adj[:, removed] = False
        load = update_loads(adj, load, touched)
        np.testing.assert_allclose(load, _reference_load(adj), rtol=0, atol=1e-9)
        assert ((load >= 0) & (load <= 1)).all()


def test_update_leaves_untouched_components_alone() -> None:
    adj = np.zeros((8, 8), dtype=bool)
    for a, b in [(0, 1), (1, 2), (4, 5), (5, 6), (6, 7)]:
        adj[a, b] = adj[b, a] = True
    stale = np.full(8, 0.123)
    out = update_loads(adj, stale, np.array([1]))
    # component {0,1,2} recomputed (node 1 on pair {0,2}: 1/28), the others keep stale values
    np.testing.assert_allclose(out[:3], [0, 1 / 28, 0], atol=1e-15)
    assert np.all(out[3:] == 0.123)
    assert np.all(stale == 0.123)  # input not modified


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="square"):
        betweenness_load(np.zeros((3, 4)))
    directed = np.zeros((4, 4), dtype=bool)
    directed[0, 1] = True  # a one-way edge is not an undirected graph
    with pytest.raises(ValueError, match="symmetric"):
        betweenness_load(directed)
    with pytest.raises(ValueError, match="diagonal"):
        betweenness_load(np.eye(4, dtype=np.int8))
    with pytest.raises(ValueError, match="0/1"):
        betweenness_load(np.full((4, 4), 2) - 2 * np.eye(4, dtype=int))
    with pytest.raises(ValueError, match="symmetric"):
        update_loads(directed, np.zeros(4), np.array([0]))
    with pytest.raises(ValueError, match="loads has shape"):
        update_loads(np.zeros((5, 5), dtype=bool), np.zeros(4), np.array([0]))


def test_degenerate_graphs() -> None:
    # no edges at all, a single edge, and the smallest graph with a path through a node
    assert betweenness_load(np.zeros((7, 7), dtype=bool)).tolist() == [0.0] * 7
    one = np.zeros((7, 7), dtype=np.int8)
    one[2, 5] = one[5, 2] = 1
    assert betweenness_load(one).tolist() == [0.0] * 7
    path3 = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=np.int8)
    np.testing.assert_allclose(betweenness_load(path3), [0, 1 / 3, 0], atol=1e-15)


def test_loads_are_bit_for_bit_deterministic() -> None:
    """Replays need identical loads: repeated passes and the incremental update agree exactly."""
    adj = shk_graph(np.random.default_rng(11), 300).adjacency
    first = betweenness_load(adj)
    assert all(np.array_equal(first, betweenness_load(adj.copy())) for _ in range(3))
    np.testing.assert_array_equal(first, update_loads(adj, np.zeros(300), np.arange(300)))
