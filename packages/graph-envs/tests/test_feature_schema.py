"""Class-level env information: ``feature_schema(params)``, ``max_nodes`` and ``env_class``
read without building an env, and equal to what an env built with the same params has."""

from __future__ import annotations

import graphwm_envs
import gymnasium as gym
import pytest
from graphwm_envs import ENV_IDS, GraphEnv, env_class
from graphwm_envs.od.types import ODParams
from graphwm_envs.rgc.types import RGCParams


def test_env_class_of_every_id_is_the_class_gym_make_builds():
    for env_id in ENV_IDS:
        cls = env_class(env_id)
        assert issubclass(cls, GraphEnv)
        assert type(gym.make(env_id, num_nodes=6).unwrapped) is cls
    with pytest.raises(ValueError, match="unknown env id"):
        env_class("graphenv/XYZ-v0")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_class_schema_is_the_instance_schema(env_id):
    cls = env_class(env_id)
    assert cls.feature_schema() == gym.make(env_id, num_nodes=7).unwrapped.schema


@pytest.mark.parametrize(
    ("env_id", "params", "key", "check"),
    [
        ("graphenv/OD-v0", ODParams(num_opinions=3), "node_categorical", {"opinion": 3}),
        ("graphenv/RGC-v0", RGCParams(budget_fraction=0.2), "ranges", None),
    ],
)
def test_class_schema_follows_the_params(env_id, params, key, check):
    cls = env_class(env_id)
    schema = cls.feature_schema(params)
    assert schema == gym.make(env_id, num_nodes=9, params=params).unwrapped.schema
    assert schema != cls.feature_schema()  # the params do change it
    if check is not None:
        assert dict(getattr(schema, key)) == check


def test_no_env_is_built_for_class_information(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("an env was built")

    monkeypatch.setattr(GraphEnv, "__init__", refuse)
    for env_id in ENV_IDS:
        cls = graphwm_envs.env_class(env_id)
        assert cls.feature_schema().all_names()
        assert cls.max_nodes >= 1000
