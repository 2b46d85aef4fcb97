"""fit_bandwidths (median heuristic) on hand-made transitions, and the JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gdd_metric import MIN_BANDWIDTH, Bandwidths, fit_bandwidths

SCHEMA = {
    "node_continuous": ["x"],
    "node_categorical": {"c": 3},
    "graph_continuous": ["g", "z"],
    "graph_categorical": {"e": 2, "still": 2},
}


def obs(x, c, g, z, e, still=0):
    n = len(x)
    return {
        "adjacency": np.zeros((n, n), dtype=np.int8),
        "node_continuous": np.array(x, dtype=np.float32).reshape(n, 1),
        "node_categorical": np.array(c, dtype=np.int64).reshape(n, 1),
        "graph_continuous": np.array([g, z], dtype=np.float32),
        "graph_categorical": np.array([e, still], dtype=np.int64),
        "action_mask": np.ones(n, dtype=np.int8),
    }


T1 = (obs([0.0, 1.0, 2.0], [0, 1, 2], 5.0, 0.0, 0), obs([0.0, 1.5, 2.0], [0, 1, 0], 5.0, 0.0, 1))
T2 = (obs([1.0, 1.0], [1, 1], 3.0, 0.0, 1), obs([2.0, 0.0], [2, 2], 3.0, 0.0, 1))


def test_hand_computed_values():
    bw = fit_bandwidths([T1, T2], SCHEMA)
    assert bw.sigma["x"] == pytest.approx(1.0)  # median of non-zero changes {0.5, 1, 1}
    assert bw.sigma["g"] == pytest.approx(4.0)  # never changes: median |value| of {5,5,3,3}
    assert bw.sigma["z"] == MIN_BANDWIDTH  # identically zero
    assert bw.lam["c"] == pytest.approx(1.5)  # rho = 1/3 and 1 -> 1 / (2/3)
    assert bw.lam["e"] == pytest.approx(2.0)  # rho = 1 and 0 -> 1 / (1/2)
    assert bw.lam["still"] == 1.0  # no changes


def _stack(*graphs):
    return {k: np.stack([g[k] for g in graphs]) for k in graphs[0]}


def test_stacked_form_equals_pairs():
    pairs = [T2, T2, T2]
    stacked = [(_stack(*(t[0] for t in pairs)), _stack(*(t[1] for t in pairs)))]
    assert fit_bandwidths(stacked + [T1], SCHEMA) == fit_bandwidths(pairs + [T1], SCHEMA)


def test_terminal_side_skips_node_features():
    empty = obs([], [], 5.0, 0.0, 0)
    with_terminal = fit_bandwidths([T1, T2, (T2[0], empty)], SCHEMA)
    plain = fit_bandwidths([T1, T2], SCHEMA)
    assert with_terminal.sigma["x"] == plain.sigma["x"]
    assert with_terminal.lam["c"] == plain.lam["c"]
    # graph features still count the terminal transition: e changes 1 -> 0 there
    assert with_terminal.lam["e"] == pytest.approx(1 / (2 / 3))


def test_mismatched_nodes_within_transition():
    with pytest.raises(ValueError, match="mismatched node counts"):
        fit_bandwidths([(T1[0], T2[1])], SCHEMA)


def test_errors():
    with pytest.raises(ValueError, match="at least one transition"):
        fit_bandwidths([], SCHEMA)
    bad = dict(T1[1], node_categorical=np.array([[0], [1], [3]]))
    with pytest.raises(ValueError, match="cardinality"):
        fit_bandwidths([(T1[0], bad)], SCHEMA)
    bad = dict(T1[1], node_continuous=np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        fit_bandwidths([(T1[0], bad)], SCHEMA)
    with pytest.raises(ValueError, match="shape"):
        fit_bandwidths([(T1[0], dict(T1[1], graph_continuous=np.zeros(3)))], SCHEMA)


def test_extended_schema_on_random_transitions(helpers, rng):
    """Any schema works; the fitted values are positive and follow the data's scale."""
    schema = helpers.schema(2, 2, 2, 2)
    transitions = []
    for _ in range(20):
        n = int(rng.integers(2, 9))
        a = helpers.samples(schema, 1, n, rng)
        b = {k: v.copy() for k, v in a.items()}
        b["node_continuous"] += rng.normal(0, 0.01, b["node_continuous"].shape)
        transitions.append(({k: v[0] for k, v in a.items()}, {k: v[0] for k, v in b.items()}))
    bw = fit_bandwidths(transitions, schema)
    assert 0.001 < bw.sigma["nc0"] < 0.05  # scale of the one-step noise
    assert bw.lam["nk0"] == 1.0 and bw.lam["gk0"] == 1.0
    assert set(bw.sigma) == {"nc0", "nc1", "gc0", "gc1"}


def test_json_round_trip(tmp_path):
    bw = Bandwidths(sigma={"x": 0.25, "reward": 1e-8}, lam={"c": 1.5})
    text = bw.to_json()
    assert json.loads(text)["lambda"] == {"c": 1.5}
    assert Bandwidths.from_json(text) == bw
    path = tmp_path / "bw.json"
    bw.to_json(path)
    assert Bandwidths.from_json(path) == bw
    assert Bandwidths.from_dict(bw.to_dict()) == bw
    with pytest.raises(ValueError, match="unknown keys"):
        Bandwidths.from_dict({"sigma": {}, "lamda": {}})
    with pytest.raises(ValueError, match="must be finite and > 0"):
        Bandwidths.from_json('{"sigma": {"x": -1}}')
