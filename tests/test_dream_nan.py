"""Issue 38, class 4: a dream env never passes NaN off as data. Built over a model with a NaN
weight it refuses; a NaN in a prediction raises instead of becoming reward 0 or feature 0."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tiny_models import tiny_trained_model

from graphwm.dream import DreamEnv, DreamVectorEnv
from graphwm.dream.validity import ObservationFixer, valid_reward
from graphwm.envs import make_env

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N = 8


@pytest.fixture(scope="module")
def model():
    return tiny_trained_model("vanilla-gwm", "SAR", num_nodes=N)


def _poisoned(model):
    bad = copy.deepcopy(model)
    with torch.no_grad():
        next(p for p in bad.parameters() if p.is_floating_point()).view(-1)[0] = float("nan")
    return bad


def test_a_model_with_a_nan_weight_is_refused_when_the_env_is_built(model):
    env = make_env("SAR", num_nodes=N)
    with pytest.raises(ValueError, match=r"weight '.*' holds NaN or inf"):
        DreamEnv(_poisoned(model), env)
    with pytest.raises(ValueError, match=r"weight '.*' holds NaN or inf"):
        DreamVectorEnv(_poisoned(model), env, num_envs=2)
    DreamEnv(model, env).reset(seed=0)  # the same model with finite weights is fine


def test_a_nan_prediction_raises_instead_of_becoming_data(model):
    with pytest.raises(FloatingPointError, match="NaN in 'reward'"):
        valid_reward(torch.tensor([0.5, float("nan")]))
    assert valid_reward(torch.tensor([float("inf")]))[0] == np.finfo(np.float32).max
    env = make_env("SAR", num_nodes=N)
    fixer = ObservationFixer(env.observation_space, torch.device("cpu"))
    obs, _ = env.reset(seed=0)
    pred = {k: torch.as_tensor(np.asarray(v), dtype=torch.float32)[None] for k, v in obs.items()}
    fixer.observation(pred, None)  # a finite prediction passes
    pred["node_continuous"][0, 0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN in 'node_continuous'"):
        fixer.observation(pred, None)
