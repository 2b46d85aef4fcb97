"""Issue 38, class 6: reset options are read or refused, never silently ignored: the graph envs
read none, a dream env reads ``start_index`` (an integer), a dream vector env none."""

from __future__ import annotations

import graphwm_envs  # noqa: F401  (registers the envs)
import gymnasium as gym
import numpy as np
import pytest
from tiny_models import random_policy_episodes, tiny_trained_model

from graphwm.dream import DreamEnv, DreamVectorEnv, stored_starts
from graphwm.envs import make_env

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N = 8


@pytest.mark.parametrize("env_id", ["graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/SAR-v0"])
def test_graph_envs_refuse_options_they_do_not_read(env_id):
    env = gym.make(env_id, num_nodes=N)
    env.reset(seed=0, options=None)
    env.reset(seed=0, options={})
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['num_nodes'\]"):
        env.reset(seed=0, options={"num_nodes": 9})
    with pytest.raises(TypeError, match="must be a dict or None, got list"):
        env.reset(seed=0, options=["x"])


def test_a_failed_reset_changes_nothing():
    env = gym.make("graphenv/OD-v0", num_nodes=N).unwrapped
    obs, _ = env.reset(seed=3)
    env.step(env.sample_valid_action(env.np_random))
    with pytest.raises(ValueError):
        env.reset(seed=4, options={"typo": 1})
    assert env.elapsed_steps == 1


@pytest.fixture(scope="module")
def dream_parts():
    model = tiny_trained_model("vanilla-gwm", "SAR", num_nodes=N)
    env = make_env("SAR", N)
    return model, env, stored_starts(random_policy_episodes("SAR", N, 2))


def test_dream_env_refuses_a_typo_and_a_fractional_start_index(dream_parts):
    model, env, starts = dream_parts
    dream = DreamEnv(model, env, start_states=starts)
    dream.reset(seed=0, options={"start_index": 1})
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['start_idx'\].*start_index"):
        dream.reset(seed=0, options={"start_idx": 1})
    with pytest.raises(ValueError, match="'start_index' must be an integer, got 1.7"):
        dream.reset(seed=0, options={"start_index": 1.7})
    vec = DreamVectorEnv(model, env, 2)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="unknown reset option"):
        vec.reset(seed=0, options={"start_index": 0})
    assert np.isfinite(dream.reset(seed=1)[0]["node_continuous"]).all()
