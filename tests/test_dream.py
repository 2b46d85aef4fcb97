"""DreamEnv / DreamVectorEnv: env checkers, faithfulness to the model's API, validity, seeds."""

from __future__ import annotations

import warnings
from functools import cache

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from tiny_models import random_policy_episodes, tiny_trained_model

from graphwm.dream import DreamEnv, DreamVectorEnv, StartState, stored_starts
from graphwm.dream.validity import ObservationFixer
from graphwm.envs import make_env

MODELS = ("gdm", "vanilla-gwm", "ea-gwm", "g-rssm")
ENVS = ("SAR", "OD")
N = 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@cache
def episodes(env: str) -> tuple:
    return tuple(random_policy_episodes(env, N, 3))


@cache
def trained(model_name: str, env: str):
    """A tiny model trained for a few steps on three random-policy episodes."""
    return tiny_trained_model(model_name, env, num_nodes=N)


def run_checkers(env: gym.Env) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")  # (N, F) features
        check_env(env, skip_render_check=True)
        sb3_check_env(env)


class OneEpisodeOfVector(gym.Env):
    """Episode 0 of a one-episode DreamVectorEnv as a ``gym.Env`` (for the checkers)."""

    def __init__(self, vec: DreamVectorEnv) -> None:
        self.vec = vec
        self.observation_space = vec.single_observation_space
        self.action_space = vec.single_action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, info = self.vec.reset(seed=seed)
        return {k: v[0] for k, v in obs.items()}, info

    def step(self, action):
        obs, r, te, tr, info = self.vec.step(np.asarray(action)[None])
        return {k: v[0] for k, v in obs.items()}, float(r[0]), bool(te[0]), bool(tr[0]), info


@pytest.mark.parametrize("env_name", ENVS)
@pytest.mark.parametrize("model_name", MODELS)
def test_dream_envs_pass_both_checkers(model_name, env_name):
    model = trained(model_name, env_name)
    run_checkers(DreamEnv(model, make_env(env_name, N), seed=0))
    run_checkers(OneEpisodeOfVector(DreamVectorEnv(model, make_env(env_name, N), 1, seed=0)))


ABLATIONS = ("gdm:no-recurrent-adj", "gdm:no-graph-state+no-h-plus", "gdm:all-pairs-mp")


@pytest.mark.parametrize(
    ("model_name", "env_name"),
    [(m, e) for m in MODELS for e in ENVS] + [(a, "SAR") for a in ABLATIONS],
)
def test_stepping_draws_what_observe_and_imagine_multi_draw(model_name, env_name):
    """WorldModel.start + k batched steps (what the dream env runs) with one generator ==
    the public observe + imagine_multi."""
    from gdm_models import predictions_to_numpy
    from gdm_models.data import OBS_KEYS

    model = trained(model_name, env_name)
    ep = episodes(env_name)[0]
    obs0 = {k: ep[k][0] for k in OBS_KEYS}
    actions = ep["action_nodes"][:4]
    g = torch.Generator().manual_seed(7)
    latent = model.observe(obs0, None, generator=g)
    expected = model.imagine_multi(latent, actions, 1, generator=g)

    env = DreamEnv(model, make_env(env_name, N))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        state = model.start(env.core.model_inputs([obs0]), g)
        for k, a in enumerate(actions):
            a = torch.as_tensor(a[None], dtype=torch.float32)
            pred, state = model.step(state, a, g)
            got = predictions_to_numpy(pred)
            for key, value in expected[k].items():
                np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("model_name", MODELS)
def test_seeded_episodes_are_reproducible_and_seeds_differ(model_name):
    model = trained(model_name, "SAR")

    def rollout(seed: int) -> list:
        env = DreamEnv(model, make_env("SAR", N))
        obs, _ = env.reset(seed=seed)
        out = [obs]
        rng = np.random.default_rng(0)
        for _ in range(6):
            action = int(rng.choice(np.flatnonzero(env.action_masks())))
            obs, r, term, trunc, _ = env.step(action)
            out.append((obs, r, term))
            if term or trunc:
                break
        return out

    def same(a, b) -> bool:
        return (
            all(
                all(np.array_equal(x[k], y[k]) for k in x)
                if isinstance(x, dict)
                else all(np.array_equal(x[0][k], y[0][k]) for k in x[0]) and x[1:] == y[1:]
                for x, y in zip(a, b, strict=True)
            )
            if len(a) == len(b)
            else False
        )

    assert same(rollout(3), rollout(3))
    assert not all(same(rollout(3), rollout(s)) for s in (4, 5, 6))


def test_real_start_and_horizon_come_from_the_real_env():
    """reset(seed) shows the real env's reset observation; OD truncates at H = 50."""
    model = trained("vanilla-gwm", "OD")
    with torch.no_grad():
        model.continuation_head.bias.fill_(50.0)  # never terminates
    env = DreamEnv(model, make_env("OD", N))
    obs, info = env.reset(seed=11)
    real_obs, _ = make_env("OD", N).reset(seed=11)
    for key in obs:
        np.testing.assert_array_equal(obs[key], real_obs[key])
    assert info["horizon"] == 50
    for t in range(1, 51):
        obs, _, term, trunc, info = env.step(env.action_space.sample())
        assert not term and trunc == (t == 50) and info["step"] == t
    with pytest.raises(RuntimeError, match="over"):
        env.step(env.action_space.sample())


def test_termination_is_sampled_from_the_continuation_head():
    model = trained("g-rssm", "SAR")
    env = DreamEnv(model, make_env("SAR", N), seed=0)
    head = model.continuation_head if hasattr(model, "continuation_head") else None
    assert head is not None
    with torch.no_grad():
        old = head.bias.clone()
        head.bias.fill_(-50.0)  # continuation probability ~ 0
    try:
        env.reset(seed=0)
        _, _, term, trunc, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert term and not trunc
    finally:
        with torch.no_grad():
            head.bias.copy_(old)


def test_observation_fixer_makes_any_prediction_valid():
    space = make_env("SAR", 5).observation_space
    fixer = ObservationFixer(space, torch.device("cpu"))
    adj = torch.tensor(
        [[[1.0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]]
    )
    pred = {
        "adjacency": adj,
        # (a NaN raises instead: tests/test_dream_nan.py)
        "node_continuous": torch.tensor([[[2.0], [-1.0], [0.0], [0.5], [0.25]]]),
        "node_categorical": torch.tensor(
            [[[5, -1, 1], [0, 0, 0], [1, 1, 1], [0, 2, 0], [0, 0, 0]]]
        ),
        "graph_continuous": torch.tensor([[3.0]]),
        "graph_categorical": torch.tensor([[7]]),
        "action_mask": torch.zeros(1, 5, dtype=torch.long),
    }
    previous = torch.tensor([[0, 1, 1, 0, 0]])
    obs, mask = fixer.observation(pred, previous)
    expected_adj = np.array(
        [[0, 1, 0, 0, 0], [1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [0, 0, 1, 0, 1], [0, 0, 0, 1, 0]],
        np.int8,
    )
    np.testing.assert_array_equal(obs["adjacency"][0], expected_adj)
    np.testing.assert_array_equal(obs["node_continuous"][0, :, 0], [1.0, 0.0, 0.0, 0.5, 0.25])
    np.testing.assert_array_equal(obs["node_categorical"][0, 0], [1, 0, 1])
    np.testing.assert_array_equal(obs["node_categorical"][0, 3], [0, 1, 0])
    np.testing.assert_array_equal(obs["action_mask"][0], [0, 1, 1, 0, 0])  # previous mask kept
    np.testing.assert_array_equal(mask, previous)
    assert space.contains({k: v[0] for k, v in obs.items()})


def test_vector_env_autoresets_next_step_and_is_reproducible():
    model = trained("gdm", "SAR")

    def run(seed: int):
        vec = DreamVectorEnv(model, make_env("SAR", N), 6)
        obs, _ = vec.reset(seed=seed)
        rng = np.random.default_rng(1)
        trace, done_before = [], np.zeros(6, bool)
        for _ in range(25):
            masks = vec.action_masks()
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            obs, r, te, tr, _ = vec.step(actions)
            assert vec.observation_space.contains(obs)
            # NEXT_STEP autoreset: the step after an episode ended is a fresh start
            assert np.all(r[done_before] == 0) and not np.any((te | tr)[done_before])
            assert np.all(obs["node_categorical"][done_before][:, :, 2].sum(1) == 1)
            done_before = te | tr
            trace.append((obs["adjacency"].copy(), r.copy(), te.copy()))
        return trace

    a, b = run(0), run(0)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)
    assert any(tr[2].any() for tr in a), "no episode ended: autoreset untested"


def test_vector_env_first_observations_are_the_seeded_real_resets():
    model = trained("vanilla-gwm", "OD")
    vec = DreamVectorEnv(model, make_env("OD", N), 3)
    obs, _ = vec.reset(seed=20)
    for i in range(3):
        real, _ = make_env("OD", N).reset(seed=20 + i)
        np.testing.assert_array_equal(obs["adjacency"][i], real["adjacency"])


def test_stored_start_states_and_bad_inputs():
    model = trained("gdm", "OD")
    eps = episodes("OD")
    starts = stored_starts(eps)
    assert starts[0].horizon == len(eps[0]["reward"]) == 50  # OD episodes end by truncation
    env = DreamEnv(model, make_env("OD", N), start_states=starts)
    obs, _ = env.reset(seed=0, options={"start_index": 1})
    np.testing.assert_array_equal(obs["adjacency"], eps[1]["adjacency"][0])
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([N], dtype=np.int64))
    with pytest.raises(ValueError, match="start_index"):
        env.reset(options={"start_index": 9})
    with pytest.raises(ValueError, match="trained on another env"):
        DreamEnv(model, make_env("SAR", N))
    small = {k: eps[0][k][0] for k in env.observation_space.spaces}
    small["adjacency"] = small["adjacency"][:5, :5]
    with pytest.raises(ValueError, match="nodes"):
        env.core.start(np.zeros(1, np.int64), [StartState(small, None)])
    with pytest.raises(TypeError, match="gdm_models.WorldModel"):
        DreamEnv(object(), make_env("SAR", N))


@pytest.mark.parametrize("env_name", ["RGC", "CF"])
def test_dream_env_on_the_other_envs(env_name):
    model = tiny_trained_model("gdm", env_name, num_nodes=N)
    run_checkers(DreamEnv(model, make_env(env_name, N), seed=0))


def test_pair_action_mode_is_refused_with_a_clear_error():
    model = tiny_trained_model("vanilla-gwm", "RGC", num_nodes=N)
    with pytest.raises(NotImplementedError, match="node-selection"):
        DreamEnv(model, make_env("RGC", N, action_mode="pair"))
