"""Unit tests of graphwm's env-independent pieces: metric graphs, protocol helpers, jobs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphwm.metric.factor_metrics import (
    adjacency_bce,
    factor_metrics,
    total_variation,
    wasserstein1,
)
from graphwm.metric.graph import (
    extend_schema,
    metric_graph,
    model_samples_to_metric,
    stack_graphs,
    terminal_view,
)
from graphwm.metric.protocol import reference_indices, sample_seeds
from graphwm.search import grid_points
from graphwm.store.results import ResultStore

SCHEMA = {
    "node_continuous": ["stability"],
    "node_categorical": {"exit_node": 2},
    "graph_continuous": ["k"],
    "graph_categorical": {"escorting": 2},
}


def _obs(n=4, seed=0):
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.integers(0, 2, (n, n)), 1)
    return {
        "adjacency": (upper + upper.T).astype(np.int8),
        "node_continuous": rng.random((n, 1)).astype(np.float32),
        "node_categorical": rng.integers(0, 2, (n, 1)),
        "graph_continuous": np.array([1.0], np.float32),
        "graph_categorical": np.array([1]),
        "action_mask": rng.integers(0, 2, n).astype(np.int8),
    }


def test_reference_indices_first_last_and_count():
    for length in (1, 2, 5, 19, 20, 21, 100, 537):
        idx = reference_indices(length, 20)
        assert idx[0] == 0 and idx[-1] == length - 1
        assert len(idx) == min(20, length)
        assert np.all(np.diff(idx) > 0)
    with pytest.raises(ValueError):
        reference_indices(0)


def test_sample_seeds_reproducible_and_distinct_streams():
    a = sample_seeds(7, 3, 0, 30)
    assert a == sample_seeds(7, 3, 0, 30)
    assert len(set(a)) == 30
    assert not set(a) & set(sample_seeds(7, 3, 1, 30))


def test_metric_graph_appends_reward_continuation_and_mask():
    obs = _obs()
    g = metric_graph(obs, reward=-1.5, terminated=True)
    assert g["graph_continuous"].tolist() == [1.0, -1.5]
    assert g["graph_categorical"].tolist() == [1, 0]
    np.testing.assert_array_equal(g["node_categorical"][:, -1], obs["action_mask"])
    ext = extend_schema(SCHEMA)
    assert ext["graph_continuous"] == ["k", "reward"]
    assert list(ext["graph_categorical"]) == ["escorting", "continuation"]
    assert list(ext["node_categorical"]) == ["exit_node", "action_mask"]
    assert SCHEMA["graph_continuous"] == ["k"]  # the input schema is not modified


def test_model_samples_match_env_metric_graphs():
    obs = [_obs(seed=s) for s in range(3)]
    env_set = stack_graphs([metric_graph(o, 0.5, False) for o in obs])
    samples = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    samples["reward"] = np.full(3, 0.5, np.float32)
    samples["continuation"] = np.ones(3, np.int64)
    model_set = model_samples_to_metric(samples)
    for key in env_set:
        np.testing.assert_array_equal(env_set[key], model_set[key])
    term = terminal_view(model_set)
    assert term["adjacency"].shape == (3, 0, 0)
    assert term["graph_continuous"].tolist() == [[0.5]] * 3


def test_factor_metrics_hand_values():
    x = np.array([[0.0], [1.0]])
    y = np.array([[1.0], [2.0]])
    assert wasserstein1(x, y).tolist() == [1.0]
    assert total_variation(np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1]), 2) == 0.25
    adj_env = np.zeros((2, 2, 2), np.int8)
    adj_model = np.zeros((2, 2, 2), np.int8)
    adj_model[0, 0, 1] = adj_model[0, 1, 0] = 1  # model edge prob 0.5, env 0
    assert adjacency_bce(adj_model, adj_env) == pytest.approx(-np.log(0.5))
    ext = extend_schema(SCHEMA)
    g = stack_graphs([metric_graph(_obs(), 0.0, False)] * 2)
    same = factor_metrics(g, g, ext, terminal=False)
    assert all(v == 0.0 for v in same["features"].values())
    # identical deterministic sets: every pair has q in {0, 1}, p clipped to 1e-3 / 1 - 1e-3
    assert same["adjacency_bce"] == pytest.approx(-np.log(1 - 1e-3), rel=1e-9)


def test_result_store_keys_by_content_and_round_trips_records(tmp_path):
    from graphwm.stages.collect import DataRef
    from graphwm.stages.evaluate import EvalJob
    from graphwm.stages.fit import FitJob
    from graphwm.store.files import CorruptFileError, content_key
    from graphwm.store.records import SelfGddRecord

    data = DataRef("SAR", "test", 8, 2, False)
    fit = FitJob("SAR", (DataRef("SAR", "train", 8, 2, True),), 8)
    a = EvalJob("self_gdd", "SAR", 8, 0, data, fit, 16, 5)
    b = EvalJob("self_gdd", "SAR", 8, 0, data, fit, 16, 6)
    assert a.key != b.key
    # a key holds the keys of the inputs: a different training file changes the fit's key,
    # and with it the evaluation's
    fit2 = FitJob("SAR", (DataRef("SAR", "train", 8, 3, True),), 8)
    assert EvalJob("self_gdd", "SAR", 8, 0, data, fit2, 16, 5).key != a.key
    # threads do not change results: not keyed
    assert EvalJob("self_gdd", "SAR", 8, 0, data, fit, 16, 5, threads=4).key == a.key
    assert content_key("x", {"a": 1, "b": 2}) == content_key("x", {"b": 2, "a": 1})
    store = ResultStore(tmp_path)
    record = SelfGddRecord("self_gdd", "SAR", 0, 8, 0.25, gdd_unbiased=-0.01)
    store.save(a, record)
    assert store.has(a) and not store.has(b)
    assert store.load(a) == record
    stored = json.loads(store.path(a).read_text())
    assert stored["key"] == a.key and stored["job"]["fit"] == fit.key
    # a record stored under another job's key is refused, naming the file
    store.path(a).rename(store.path(b))
    with pytest.raises(CorruptFileError, match=str(store.path(b).name)):
        store.load(b)


def test_grid_points_cartesian_with_tables():
    points = grid_points({"lr": [1, 2], "cap": [{"h": 64, "z": 32}, {"h": 128, "z": 16}]})
    assert len(points) == 4
    assert {"lr": 1, "h": 64, "z": 32} in points
