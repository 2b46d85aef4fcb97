"""Schema parsing, observation/episode validation, batching and feature scaling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import DataError, EpisodeDataset, EpochSampler, FeatureScaler, Schema, SchemaError
from gdm_models.data import OBS_KEYS, observation_to_tensors, validate_episode, validate_observation
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode


def test_schema_roundtrip_and_sizes():
    s = Schema.from_dict(SYNTHETIC_SCHEMA)
    assert s.num_node_continuous == 2 and s.num_node_categorical == 2
    assert s.node_cardinalities == (3, 2) and s.graph_cardinalities == (2,)
    assert s.num_node_features == 4 and s.num_graph_features == 2
    assert Schema.from_dict(s.to_dict()) == s
    empty = Schema.from_dict({})
    assert empty.num_node_features == 0 and empty.to_dict()["node_categorical"] == {}


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"node_continuous": "x"}, "list"),
        ({"node_categorical": {"a": 1}}, "cardinality"),
        ({"node_continuous": ["a", "a"]}, "duplicate"),
        ({"nodes": []}, "unknown"),
        ({"ranges": {"x": [1.0, 0.0]}}, "interval"),
    ],
)
def test_schema_errors(bad, match):
    with pytest.raises(SchemaError, match=match):
        Schema.from_dict(bad)


def _obs(ep, t=0):
    return {k: ep[k][t] for k in OBS_KEYS}


def _set(key, index, value):
    def corrupt(o):
        o[key] = o[key].copy()
        o[key][index] = value

    return corrupt


def _asymmetric(o):
    o["adjacency"] = o["adjacency"].copy()
    o["adjacency"][0, 1], o["adjacency"][1, 0] = 1, 0


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_asymmetric, "symmetric"),
        (_set("adjacency", (2, 2), 1), "diagonal"),
        (_set("node_continuous", (0, 0), np.nan), "NaN"),
        (_set("node_categorical", (0, 0), 3), "outside"),
        (lambda o: o.update(action_mask=np.ones(4, np.int8)), "action_mask"),
    ],
    ids=["asymmetric", "diagonal", "nan", "category", "action-mask-length"],
)
def test_observation_validation_errors(corrupt, message):
    s = Schema.from_dict(SYNTHETIC_SCHEMA)
    ep = random_episode(5, 2, np.random.default_rng(0))
    assert validate_observation(_obs(ep), s) == 5
    o = _obs(ep)
    corrupt(o)
    with pytest.raises(DataError, match=message):
        validate_observation(o, s)


def test_episode_validation_errors():
    s = Schema.from_dict(SYNTHETIC_SCHEMA)
    ep = random_episode(5, 2, np.random.default_rng(0))
    bad = dict(ep)
    bad["reward"] = ep["reward"][:-1]
    with pytest.raises(DataError, match="reward"):
        validate_episode(bad, s)


def test_tensor_conversion_dtypes():
    ep = random_episode(5, 2, np.random.default_rng(0))
    t = observation_to_tensors(_obs(ep))
    assert t["adjacency"].dtype == torch.float32 and t["node_categorical"].dtype == torch.int64
    seq = observation_to_tensors({k: ep[k] for k in OBS_KEYS})
    assert seq["adjacency"].shape == (3, 5, 5)


def test_batch_padding_and_masks(episodes):
    ds = EpisodeDataset(episodes, SYNTHETIC_SCHEMA, seq_len=5)
    short = len(episodes) - 1  # the 3-transition episode
    windows = [(0, 2), (short, 0)]
    b = ds.make_batch(windows)
    n0, ns = ds.node_counts[0], ds.node_counts[short]
    n_max = max(n0, ns)
    assert b.adjacency.shape == (2, 6, n_max, n_max)
    assert b.node_mask[0].sum() == n0 and b.node_mask[1].sum() == ns
    assert b.step_mask[0].all() and b.step_mask[1].tolist() == [True] * 3 + [False] * 2
    np.testing.assert_array_equal(
        b.adjacency[0, :, :n0, :n0].numpy(), episodes[0]["adjacency"][2:8]
    )
    np.testing.assert_array_equal(
        b.action_nodes[0, :, :n0].numpy(), episodes[0]["action_nodes"][2:7]
    )
    # padded nodes carry nothing; the terminated last step has continuation 0
    assert b.adjacency[1, :, ns:].sum() == 0 and b.action_mask[1, :, ns:].sum() == 0
    assert b.continuation[1, 2] == 0 and b.continuation[1, :2].tolist() == [1, 1]
    pm = b.pair_mask
    assert not pm[:, range(n_max), range(n_max)].any() and pm[1].sum() == ns * (ns - 1)


def test_dataset_rejects_bad_episode(episodes):
    bad = dict(episodes[0])
    bad["action_nodes"] = bad["action_nodes"][:, :-1]
    with pytest.raises(DataError, match="episode 1"):
        EpisodeDataset([episodes[1], bad], SYNTHETIC_SCHEMA)


def test_epoch_sampler_visits_every_episode_and_restores(dataset):
    s = EpochSampler(dataset, batch_size=3, seq_len=4, seed=1)
    seen = []
    for _ in range(s.batches_per_epoch):
        b = s.next_batch()
        seen.append(b.batch_size)
    assert sum(seen) == len(dataset)
    state = s.state_dict()
    a = [s.next_batch().adjacency for _ in range(2)]
    s.load_state_dict(state)
    b = [s.next_batch().adjacency for _ in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_scaler_fit_hand_computed():
    ep = random_episode(4, 3, np.random.default_rng(0))
    ep2 = random_episode(6, 2, np.random.default_rng(1))
    sc = FeatureScaler.fit([ep, ep2], SYNTHETIC_SCHEMA)
    x = np.concatenate(
        [ep["node_continuous"][..., 0].ravel(), ep2["node_continuous"][..., 0].ravel()]
    )
    assert sc.node_mean[0] == pytest.approx(x.mean()) and sc.node_std[0] == pytest.approx(x.std())
    # "y" is constant 5 -> sigma = 1
    assert sc.node_mean[1] == pytest.approx(5.0) and sc.node_std[1] == 1.0
    r = np.concatenate([ep["reward"], ep2["reward"]])
    assert sc.reward_mean == pytest.approx(r.mean()) and sc.reward_std == pytest.approx(r.std())
    k = np.concatenate([ep["graph_continuous"][:, 0], ep2["graph_continuous"][:, 0]])
    assert sc.graph_mean[0] == pytest.approx(k.mean())
    # round trips
    sc2 = FeatureScaler.from_dict(sc.to_dict())
    z = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(sc2.scale_node(sc2.unscale_node(z)), z)
    assert float(sc.scale_reward(torch.tensor(sc.reward_mean))) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="node"):
        sc.check_schema({"node_continuous": ["x"]})
