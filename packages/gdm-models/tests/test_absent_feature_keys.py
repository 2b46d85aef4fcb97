"""Data contract: a feature type an env lacks is absent from the observation; gdm-models reads
an absent key as a zero-width array (and still refuses one the schema needs)."""

from __future__ import annotations

import numpy as np
import pytest
from gdm_models.data import (
    OBS_KEYS,
    DataError,
    EpisodeDataset,
    complete_observation,
    observation_to_tensors,
    stack_observations,
    validate_episode,
    validate_observation,
)
from gdm_models.schema import Schema

# RGC's schema: graph continuous features only
SCHEMA = Schema.from_dict({"graph_continuous": ["tau", "k"]})


def _obs(n: int, rng: np.random.Generator) -> dict:
    upper = np.triu(rng.random((n, n)) < 0.4, k=1)
    return {
        "adjacency": (upper | upper.T).astype(np.int8),
        "graph_continuous": rng.random(2).astype(np.float32),
        "action_mask": np.ones(n, dtype=np.int8),
    }


def test_complete_observation_adds_zero_width_arrays_with_the_leading_axes():
    rng = np.random.default_rng(0)
    single = complete_observation(_obs(5, rng))
    assert set(single) == set(OBS_KEYS)
    assert (
        single["node_continuous"].shape == (5, 0) and single["node_continuous"].dtype == np.float32
    )
    assert (
        single["node_categorical"].shape == (5, 0) and single["node_categorical"].dtype == np.int64
    )
    assert single["graph_categorical"].shape == (0,)
    stacked = complete_observation(stack_observations([_obs(5, rng) for _ in range(3)]))
    assert stacked["node_categorical"].shape == (3, 5, 0)
    assert stacked["graph_categorical"].shape == (3, 0)
    np.testing.assert_array_equal(stacked["graph_continuous"].shape, (3, 2))


def test_validation_and_tensors_accept_absent_zero_width_keys():
    rng = np.random.default_rng(1)
    obs = _obs(6, rng)
    assert validate_observation(obs, SCHEMA) == 6
    tensors = observation_to_tensors(obs)
    assert tuple(tensors["node_continuous"].shape) == (6, 0)
    assert tuple(tensors["graph_categorical"].shape) == (0,)


def test_an_absent_key_the_schema_needs_is_refused():
    obs = _obs(6, np.random.default_rng(2))
    schema = Schema.from_dict({"graph_continuous": ["tau", "k"], "node_continuous": ["x"]})
    with pytest.raises(DataError, match="node_continuous"):
        validate_observation(obs, schema)


def test_episodes_with_absent_keys_train_like_zero_width_ones():
    rng = np.random.default_rng(3)
    frames = [_obs(5, rng) for _ in range(4)]
    episode = {
        **stack_observations(frames),
        "action_nodes": np.eye(5, dtype=np.int8)[:3],
        "reward": np.zeros(3, np.float32),
        "terminated": np.array([False, False, True]),
        "truncated": np.zeros(3, bool),
    }
    sparse = {k: v for k, v in episode.items() if not (v.ndim >= 2 and v.shape[-1] == 0)}
    assert "node_continuous" not in sparse
    assert validate_episode(sparse, SCHEMA) == (3, 5)
    a = EpisodeDataset([sparse], SCHEMA, seq_len=3)
    b = EpisodeDataset([episode], SCHEMA, seq_len=3)
    for key in OBS_KEYS:
        np.testing.assert_array_equal(a.episodes[0][key], b.episodes[0][key])
