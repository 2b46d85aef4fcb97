"""DreamVectorEnv's two autoreset modes: Gymnasium's SAME_STEP semantics, the same first
episodes and start states as NEXT_STEP, a mode Gymnasium's wrappers read from the metadata."""

from __future__ import annotations

from functools import cache, partial

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from tiny_models import (
    short_start_states,
    tiny_ending_model,
)

from graphwm.dream import DreamVectorEnv
from graphwm.envs import make_env

N, B, HORIZON = 8, 6, 4
NEXT, SAME = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# the tiny GDM with its continuation logit raised, so that episodes end by termination and by
# truncation both, and recorded start states each truncated after HORIZON imagined steps
slow_ending_model = cache(partial(tiny_ending_model, "SAR", num_nodes=N))
short_starts = cache(partial(short_start_states, "SAR", N, HORIZON))


def vector(mode, starts: str, num_envs: int = B) -> DreamVectorEnv:
    stored = short_starts() if starts == "stored" else None
    real = make_env("SAR", N)
    return DreamVectorEnv(
        slow_ending_model(), real, num_envs, start_states=stored, autoreset_mode=mode
    )


def _actions(vec: DreamVectorEnv, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in vec.action_masks()])


def _rows(obs: dict[str, np.ndarray], rows) -> list[dict[str, np.ndarray]]:
    return [{k: v[i].copy() for k, v in obs.items()} for i in rows]


def _assert_obs_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_mode_is_validated_and_in_the_instance_metadata():
    assert vector(NEXT, "real").metadata["autoreset_mode"] is NEXT
    default = DreamVectorEnv(slow_ending_model(), make_env("SAR", N), 2)
    assert default.autoreset_mode is NEXT and default.metadata["autoreset_mode"] is NEXT
    by_name = vector("SameStep", "real")
    assert by_name.autoreset_mode is SAME and by_name.metadata["autoreset_mode"] is SAME
    assert DreamVectorEnv.metadata["autoreset_mode"] is NEXT  # the class default is untouched
    for bad in ("same_step", AutoresetMode.DISABLED, 1):
        with pytest.raises(ValueError, match="autoreset_mode must be one of"):
            vector(bad, "real")


@pytest.mark.parametrize("starts", ["real", "stored"])
def test_same_step_restarts_in_the_step_the_episode_ends(starts):
    """Gymnasium's SAME_STEP contract (SyncVectorEnv's info layout): the ending step returns the
    episode's reward and flags, the next start state as observation and the last imagined
    observation in info["final_obs"]; the step after it is an ordinary step of the new episode."""
    vec = vector(SAME, starts)
    obs, _ = vec.reset(seed=2)
    rng = np.random.default_rng(0)
    ended = np.zeros(B, int)
    terminations = truncations = 0
    steps = np.zeros(B, int)
    for _ in range(40):
        horizons = vec.core.horizons.copy()  # of the running episodes (-1: none)
        obs, reward, te, tr, info = vec.step(_actions(vec, rng))
        assert vec.observation_space.contains(obs)
        done = te | tr
        steps += 1
        np.testing.assert_array_equal(tr, ~te & (steps == horizons))
        if not done.any():
            assert info == {}
            continue
        assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
        np.testing.assert_array_equal(info["_final_obs"], done)
        np.testing.assert_array_equal(info["_final_info"], done)
        assert info["final_info"] == {}  # the imagined steps carry no per-episode info
        assert info["final_obs"].dtype == object and info["final_obs"].shape == (B,)
        for i in range(B):
            if not done[i]:
                assert info["final_obs"][i] is None
                continue
            final = info["final_obs"][i]
            assert vec.single_observation_space.contains(final)
            if starts == "stored":  # the observation is a start state already
                assert any(
                    all(np.array_equal(obs[k][i], s.observation[k]) for k in obs)
                    for s in short_starts()
                )
                assert not all(np.array_equal(obs[k][i], final[k]) for k in obs)
        truncations += int(tr.sum())
        terminations += int(te.sum())
        ended += done
        steps[done] = 0  # the new episode's first step is the next one
    assert (ended >= 2).all(), ended
    assert terminations and truncations, (terminations, truncations)


@pytest.mark.parametrize("num_envs", [1, B])
@pytest.mark.parametrize("starts", ["real", "stored"])
def test_next_and_same_step_agree_on_first_episodes_and_start_states(starts, num_envs):
    """With one seed and the same actions, the two modes imagine the same steps up to the first
    episode end of the batch (with B = 1: the whole first episode); the SAME_STEP restart is the
    state NEXT_STEP returns one step later; and over long rollouts both restart from the same
    sequence of start states (one np_random draw per restart, in order of the episode ends)."""
    nxt, same = vector(NEXT, starts, num_envs), vector(SAME, starts, num_envs)
    obs_n, _ = nxt.reset(seed=5)
    obs_s, _ = same.reset(seed=5)
    _assert_obs_equal(obs_n, obs_s)
    rng_n, rng_s = np.random.default_rng(1), np.random.default_rng(1)
    starts_n: list[dict] = []
    starts_s: list[dict] = []
    pending = np.zeros(num_envs, bool)  # NEXT_STEP rows that restart in this step
    first_end = None
    for t in range(60):
        obs_n, r_n, te_n, tr_n, _ = nxt.step(_actions(nxt, rng_n))
        obs_s, r_s, te_s, tr_s, info = same.step(_actions(same, rng_s))
        starts_n += _rows(obs_n, np.flatnonzero(pending))
        starts_s += _rows(obs_s, np.flatnonzero(te_s | tr_s))
        if first_end is None:
            np.testing.assert_array_equal(r_n, r_s)
            np.testing.assert_array_equal(te_n, te_s)
            np.testing.assert_array_equal(tr_n, tr_s)
            done = te_s | tr_s
            for i in range(num_envs):
                expected = info["final_obs"][i] if done[i] else _rows(obs_s, [i])[0]
                _assert_obs_equal(_rows(obs_n, [i])[0], expected)
            if done.any():
                first_end = (t, done.copy(), _rows(obs_s, np.flatnonzero(done)))
        elif first_end[0] == t - 1:  # NEXT_STEP hands out the SAME_STEP restarts now
            rows = np.flatnonzero(first_end[1])
            assert np.all(r_n[rows] == 0) and not np.any((te_n | tr_n)[rows])
            for got, want in zip(_rows(obs_n, rows), first_end[2], strict=True):
                _assert_obs_equal(got, want)
        pending = te_n | tr_n
    assert first_end is not None, "no episode ended"
    count = min(len(starts_n), len(starts_s))
    assert count >= 2 * num_envs, count
    for a, b in zip(starts_n[:count], starts_s[:count], strict=True):
        _assert_obs_equal(a, b)


@pytest.mark.parametrize("mode", [NEXT, SAME])
def test_gymnasium_episode_statistics_follow_the_mode(mode):
    """RecordEpisodeStatistics reads metadata["autoreset_mode"]: a truncated episode lasts
    exactly its horizon, and its return is the sum of its rewards, in both modes."""
    vec = RecordEpisodeStatistics(vector(mode, "stored"))
    vec.reset(seed=4)
    rng = np.random.default_rng(2)
    returns, lengths = np.zeros(B), np.zeros(B, int)
    pending = np.zeros(B, bool)
    truncated_lengths = []
    for _ in range(40):
        _, reward, te, tr, info = vec.step(_actions(vec.unwrapped, rng))
        live = ~pending  # NEXT_STEP: a restart step belongs to no episode
        returns[live] += reward[live]
        lengths[live] += 1
        done = te | tr
        if done.any():
            stats = info["episode"]
            np.testing.assert_array_equal(stats["l"][done], lengths[done])
            np.testing.assert_allclose(stats["r"][done], returns[done], rtol=1e-6)
            truncated_lengths += stats["l"][tr].tolist()
        returns[done], lengths[done] = 0.0, 0
        pending = done if mode is NEXT else np.zeros(B, bool)
    assert truncated_lengths and set(truncated_lengths) == {HORIZON}


def test_make_dream_env_passes_the_mode_to_the_vector_env():
    from graphwm.dream import DreamEnv, make_dream_env

    model = slow_ending_model()
    same = make_dream_env(model, "SAR", N, num_envs=2, autoreset_mode="SameStep")
    assert same.autoreset_mode is SAME
    assert same.metadata["autoreset_mode"] is SAME
    assert make_dream_env(model, "SAR", N, num_envs=2).autoreset_mode is NEXT
    assert isinstance(make_dream_env(model, "SAR", N), DreamEnv)
    with pytest.raises(ValueError, match="vector env only"):
        make_dream_env(model, "SAR", N, autoreset_mode=SAME)
