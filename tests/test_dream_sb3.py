"""DreamSB3VecEnv: a SAME_STEP DreamVectorEnv behind SB3's VecEnv API (the same rollouts, step
for step), SB3's checks (check_env on the single-episode views, the VecEnv conventions SB3's own
vec-env tests check, VecMonitor / VecCheckNan over multi-episode rollouts), MaskablePPO."""

from __future__ import annotations

import warnings
from functools import cache, partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.vector import AutoresetMode

pytest.importorskip("sb3_contrib")

from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402
from stable_baselines3.common.utils import check_for_correct_spaces  # noqa: E402
from stable_baselines3.common.vec_env import VecCheckNan, VecEnv, VecMonitor  # noqa: E402
from tiny_models import (  # noqa: E402
    short_start_states,
    tiny_ending_model,
    tiny_trained_model,
)

from graphwm.dream import DreamEnv, DreamVectorEnv  # noqa: E402
from graphwm.dream.sb3_vec_env import DreamSB3VecEnv  # noqa: E402
from graphwm.envs import make_env  # noqa: E402

N, B, HORIZON = 8, 6, 4
SAME = AutoresetMode.SAME_STEP
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@cache
def model():
    return tiny_trained_model("gdm", "SAR", num_nodes=N)


# the tiny GDM with its continuation logit raised, so that episodes end by termination and by
# truncation both, and recorded start states each truncated after HORIZON imagined steps
slow_ending_model = cache(partial(tiny_ending_model, "SAR", num_nodes=N))
short_starts = cache(partial(short_start_states, "SAR", N, HORIZON))


def dream(starts: str = "real", num_envs: int = B, mode=SAME, net=None) -> DreamVectorEnv:
    stored = short_starts() if starts == "stored" else None
    real = make_env("SAR", N)
    net = slow_ending_model() if net is None else net
    return DreamVectorEnv(net, real, num_envs, start_states=stored, autoreset_mode=mode)


def _random_actions(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks])


def _row(obs: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    return {k: v[i] for k, v in obs.items()}


def _assert_obs_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("starts", ["real", "stored"])
def test_rollouts_equal_the_same_step_dream_vector_env(starts):
    """Several episodes per env (terminations and truncations): observations, rewards, dones
    and terminal observations equal the SAME_STEP DreamVectorEnv's with the same seed."""
    gym_vec, sb3_vec = dream(starts), DreamSB3VecEnv(dream(starts))
    obs_g, _ = gym_vec.reset(seed=3)
    assert sb3_vec.seed(3) == [3 + i for i in range(B)]
    obs_s = sb3_vec.reset()
    _assert_obs_equal(obs_s, obs_g)
    rng = np.random.default_rng(0)
    episodes, terminations, truncations = np.zeros(B, int), 0, 0
    for _ in range(40):
        np.testing.assert_array_equal(get_action_masks(sb3_vec), gym_vec.action_masks())
        actions = _random_actions(gym_vec.action_masks(), rng)
        obs_g, r_g, te, tr, info = gym_vec.step(actions)
        obs_s, r_s, dones, infos = sb3_vec.step(actions)
        _assert_obs_equal(obs_s, obs_g)
        np.testing.assert_array_equal(r_s, r_g.astype(np.float32))
        np.testing.assert_array_equal(dones, te | tr)
        for i in range(B):
            if not dones[i]:
                assert infos[i] == {}
                continue
            _assert_obs_equal(infos[i]["terminal_observation"], info["final_obs"][i])
            assert infos[i]["TimeLimit.truncated"] == bool(tr[i] and not te[i])
        episodes += dones
        terminations += int(te.sum())
        truncations += int(tr.sum())
    assert (episodes >= 2).all(), episodes
    assert terminations and truncations, (terminations, truncations)


def test_a_next_step_env_is_refused_and_bad_input_too():
    with pytest.raises(ValueError, match="SAME_STEP"):
        DreamSB3VecEnv(dream(mode=AutoresetMode.NEXT_STEP))
    with pytest.raises(TypeError, match="DreamVectorEnv"):
        DreamSB3VecEnv(make_env("SAR", N))
    vec = DreamSB3VecEnv(dream(num_envs=2))
    with pytest.raises(AttributeError, match="action_masks"):
        vec.env_method("render")
    with pytest.raises(AttributeError, match="cannot set"):
        vec.set_attr("start_states", None)
    with pytest.raises(RuntimeError, match="step_async"):
        vec.step_wait()


class OneEpisodeOfSB3Vec(gym.Env):
    """The one episode of a one-episode DreamSB3VecEnv as a ``gym.Env`` (for the checkers):
    an ending step shows SB3's ``terminal_observation``, as the episode's own last step."""

    def __init__(self, vec: DreamSB3VecEnv) -> None:
        self.vec = vec
        self.observation_space = vec.observation_space
        self.action_space = vec.action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.vec.seed(seed)
        obs = self.vec.reset()
        return _row(obs, 0), dict(self.vec.reset_infos[0])

    def step(self, action):
        obs, reward, dones, infos = self.vec.step(np.asarray(action)[None])
        info = dict(infos[0])
        truncated = bool(info.pop("TimeLimit.truncated", False))
        if dones[0]:
            obs = {k: v[None] for k, v in info.pop("terminal_observation").items()}
        return _row(obs, 0), float(reward[0]), bool(dones[0]) and not truncated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.vec.action_masks()[0]


def test_sb3_check_env_passes_on_both_single_episode_views():
    """SB3's check_env (it takes a gym.Env only) on the package's DreamEnv of the same model
    and on one episode seen through DreamSB3VecEnv."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")  # (N, F) features
        sb3_check_env(DreamEnv(slow_ending_model(), make_env("SAR", N), seed=0))
        view = OneEpisodeOfSB3Vec(DreamSB3VecEnv(dream(num_envs=1)))
        sb3_check_env(view)
        gym_check_env(view, skip_render_check=True)


def _assert_in_space(space: gym.spaces.Dict, obs: dict, batch: int | None) -> None:
    """Keys, dtypes and shapes as SB3's vec-env tests check them, and every row in ``space``."""
    assert set(obs) == set(space.spaces)
    for key, sub in space.spaces.items():
        assert obs[key].dtype == sub.dtype, key
        assert obs[key].shape == (sub.shape if batch is None else (batch, *sub.shape)), key
    rows = [obs] if batch is None else [_row(obs, i) for i in range(batch)]
    assert all(space.contains(r) for r in rows)


def test_vec_env_conventions_over_a_monitored_multi_episode_rollout():
    """What SB3's own VecEnv tests check, through VecMonitor(VecCheckNan(raise_exception=True)):
    observations in the space after reset, step and restart; reward / done dtypes; infos with
    terminal_observation and TimeLimit.truncated; VecMonitor's episode returns and lengths
    (a truncated episode lasts its horizon); seed; the attribute plumbing sb3-contrib's
    get_action_masks uses; check_for_correct_spaces."""
    vec = DreamSB3VecEnv(dream("stored"))
    assert isinstance(vec, VecEnv) and vec.num_envs == B
    check_for_correct_spaces(vec, make_env("SAR", N).observation_space, vec.action_space)
    with pytest.raises(ValueError, match="Observation spaces do not match"):
        check_for_correct_spaces(vec, make_env("SAR", N + 1).observation_space, vec.action_space)
    space = vec.observation_space

    venv = VecMonitor(VecCheckNan(vec, raise_exception=True))
    venv.seed(7)
    obs = venv.reset()
    _assert_in_space(space, obs, B)
    assert [i["horizon"] for i in vec.reset_infos] == [HORIZON] * B
    again = DreamSB3VecEnv(dream("stored"))
    again.seed(7)
    _assert_obs_equal(again.reset(), obs)  # seed(s) makes the next reset reproducible

    assert is_masking_supported(venv) and vec.has_attr("action_masks")
    rng = np.random.default_rng(0)
    returns, lengths = np.zeros(B), np.zeros(B, int)
    episodes, kinds = np.zeros(B, int), set()
    for _ in range(40):
        masks = get_action_masks(venv)
        np.testing.assert_array_equal(masks, vec.dream.action_masks())
        some = venv.env_method("action_masks", indices=[1, 4])
        np.testing.assert_array_equal(some, masks[[1, 4]])
        getters = vec.get_attr("action_masks", indices=[0, 3])
        np.testing.assert_array_equal([g() for g in getters], masks[[0, 3]])
        obs, rewards, dones, infos = venv.step(_random_actions(masks, rng))
        _assert_in_space(space, obs, B)
        assert rewards.dtype == np.float32 and rewards.shape == (B,)
        assert dones.dtype == np.bool_ and dones.shape == (B,)
        assert isinstance(infos, list) and len(infos) == B
        returns += rewards
        lengths += 1
        for i in np.flatnonzero(dones):
            _assert_in_space(space, infos[i]["terminal_observation"], None)
            truncated = infos[i]["TimeLimit.truncated"]
            assert isinstance(truncated, bool)
            kinds.add(truncated)
            assert infos[i]["episode"]["l"] == lengths[i]
            assert infos[i]["episode"]["r"] == pytest.approx(returns[i], rel=1e-5, abs=1e-5)
            assert lengths[i] <= HORIZON and (lengths[i] == HORIZON) >= truncated
        for i in np.flatnonzero(~dones):
            assert "terminal_observation" not in infos[i] and "episode" not in infos[i]
        episodes += dones
        returns[dones], lengths[dones] = 0.0, 0
    assert (episodes >= 2).all(), episodes
    assert kinds == {True, False}, "terminations and truncations both"
    assert vec.env_is_wrapped(VecMonitor) == [False] * B
    assert vec.get_attr("render_mode") == [None] * B


def test_maskable_ppo_trains_on_it_and_respects_masks():
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    vec = DreamSB3VecEnv(dream(net=model()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = MaskablePPO(
            "MultiInputPolicy",
            VecCheckNan(vec, raise_exception=True),
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
        assert vec.observation_space.contains(_row(obs, 0))
        obs, *_ = vec.step(actions)
