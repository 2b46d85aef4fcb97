"""graphwm reads env schemas and size limits from the env classes (issue 28): no env is built
for them, and a bad env name keeps its message."""

from __future__ import annotations

import gymnasium as gym
import pytest
from graphwm_envs import GraphEnv
from graphwm_envs.registration import graph_env_info

from graphwm.downstream.runs import has_greedy
from graphwm.envs import ENV_IDS, env_limits, env_schema


def test_schema_limits_and_greedy_need_no_env(monkeypatch):
    expected = {name: gym.make(ENV_IDS[name]).unwrapped.schema.to_dict() for name in ENV_IDS}
    maxima = {name: type(gym.make(ENV_IDS[name]).unwrapped).max_nodes for name in ENV_IDS}

    def refuse(self, *args, **kwargs):
        raise AssertionError("an env was built")

    monkeypatch.setattr(GraphEnv, "__init__", refuse)
    graph_env_info.cache_clear()
    try:
        for name in ENV_IDS:
            assert env_schema(name) == expected[name]
            assert env_limits(name) == (5, maxima[name])
            assert has_greedy(name)
    finally:
        graph_env_info.cache_clear()


def test_an_unknown_env_name_keeps_its_message():
    with pytest.raises(ValueError, match=r"unknown env 'XYZ'; choose from \['CF', 'OD'"):
        env_schema("XYZ")
    with pytest.raises(ValueError, match="unknown env 'XYZ'"):
        env_limits("XYZ")
