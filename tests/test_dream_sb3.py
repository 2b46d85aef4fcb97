"""DreamSB3VecEnv: DreamVectorEnv behind SB3's VecEnv API (same rollouts, SB3 autoreset)."""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from graphwm.dream import DreamVectorEnv  # noqa: E402
from graphwm.dream.sb3_vec_env import DreamSB3VecEnv  # noqa: E402
from graphwm.dream.tiny import tiny_trained_model  # noqa: E402
from graphwm.envs import make_env  # noqa: E402

N, B = 8, 6
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@cache
def model():
    return tiny_trained_model("gdm", "SAR", num_nodes=N)


def _random_actions(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks])


def test_rollouts_equal_dream_vector_env_and_restart_sb3_style():
    gym_vec = DreamVectorEnv(model(), make_env("SAR", N), B)
    sb3_vec = DreamSB3VecEnv(DreamVectorEnv(model(), make_env("SAR", N), B))
    obs_g, _ = gym_vec.reset(seed=3)
    sb3_vec.seed(3)
    obs_s = sb3_vec.reset()
    for key in obs_g:
        np.testing.assert_array_equal(obs_s[key], obs_g[key])
    rng = np.random.default_rng(0)
    for _ in range(40):
        actions = _random_actions(gym_vec.action_masks(), rng)
        np.testing.assert_array_equal(sb3_vec.action_masks(), gym_vec.action_masks())
        obs_g, r_g, te, tr, _ = gym_vec.step(actions)
        sb3_vec.step_async(actions)
        obs_s, r_s, dones, infos = sb3_vec.step_wait()
        np.testing.assert_allclose(r_s, r_g, rtol=1e-6)
        np.testing.assert_array_equal(dones, te | tr)
        ended = np.flatnonzero(dones)
        for i in range(B):
            if i not in ended:
                for key in obs_g:
                    np.testing.assert_array_equal(obs_s[key][i], obs_g[key][i])
        if ended.size:
            for i in ended:
                for key in obs_g:  # SB3 keeps the last imagined observation in the info
                    np.testing.assert_array_equal(
                        infos[i]["terminal_observation"][key], obs_g[key][i]
                    )
                assert infos[i]["TimeLimit.truncated"] == bool(tr[i] and not te[i])
            # Gymnasium's NEXT_STEP autoreset hands out the same start states one step later
            obs_next, r_next, *_ = gym_vec.step(_random_actions(gym_vec.action_masks(), rng))
            for i in ended:
                assert r_next[i] == 0.0
                for key in obs_g:
                    np.testing.assert_array_equal(obs_s[key][i], obs_next[key][i])
            return
    pytest.fail("no episode ended in 40 steps: the restart was not exercised")


def test_maskable_ppo_trains_on_it_and_respects_masks():
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecCheckNan

    vec = DreamSB3VecEnv(DreamVectorEnv(model(), make_env("SAR", N), B))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = MaskablePPO(
            "MultiInputPolicy",
            VecCheckNan(vec),
            n_steps=16,
            batch_size=32,
            n_epochs=1,
            seed=0,
            device="cpu",
        )
        agent.set_logger(Logger(folder=None, output_formats=[]))
        agent.learn(3 * 16 * B)
    assert agent.num_timesteps >= 3 * 16 * B
    obs = vec.reset()
    for _ in range(20):
        masks = get_action_masks(vec)
        actions, _ = agent.predict(obs, action_masks=masks)
        assert all(masks[i][a] for i, a in enumerate(actions))
        assert vec.observation_space.contains({k: v[0] for k, v in obs.items()})
        obs, *_ = vec.step(actions)


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="DreamVectorEnv"):
        DreamSB3VecEnv(make_env("SAR", N))
    vec = DreamSB3VecEnv(DreamVectorEnv(model(), make_env("SAR", N), 2))
    with pytest.raises(AttributeError, match="action_masks"):
        vec.env_method("render")
