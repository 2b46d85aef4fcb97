"""graphwm reads the envs' absent feature keys as zero-width arrays (data contract)."""

from __future__ import annotations

import numpy as np

from graphwm.envs import make_env
from graphwm.metric.graph import OBS_KEYS, metric_graph
from graphwm.stages.collect import record_episode


def test_recorded_rgc_episode_has_every_key_with_zero_width_arrays():
    episode = record_episode("RGC", 6, seed=3)
    t1 = len(episode["reward"]) + 1
    assert set(OBS_KEYS) <= set(episode)
    assert episode["node_continuous"].shape == (t1, 6, 0)
    assert episode["node_categorical"].shape == (t1, 6, 0)
    assert episode["graph_categorical"].shape == (t1, 0)
    assert episode["graph_continuous"].shape == (t1, 2)


def test_metric_graph_of_an_observation_with_absent_keys():
    env = make_env("RGC", 6)
    obs, _ = env.reset(seed=0)
    assert "node_categorical" not in obs
    graph = metric_graph(obs, reward=0.5, terminated=False)
    np.testing.assert_array_equal(graph["node_categorical"][:, 0], obs["action_mask"])
    assert graph["node_continuous"].shape == (6, 0)
    np.testing.assert_array_equal(graph["graph_continuous"], [*obs["graph_continuous"], 0.5])
    np.testing.assert_array_equal(graph["graph_categorical"], [1])
