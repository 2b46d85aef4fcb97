"""Generic contract tests, parametrised over every registered env whose module imports.

Covers both env checkers, both registration forms, vector envs, determinism, clone/restore,
invalid actions, the observation contract and rendering. Env-specific behaviour is tested in
``test_<env>*.py``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import warnings

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.core.base import EnvSnapshot
from graphwm_envs.core.validation import validate_observation
from gymnasium import spaces

ENV_IDS = graphwm_envs.ENV_IDS
SIZES = (5, 20, 50)


def _make(env_id: str, num_nodes: int = 20, **kwargs):
    return gym.make(env_id, num_nodes=num_nodes, **kwargs).unwrapped


def _assert_obs_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _assert_tree_equal(a, b, path: str = "state") -> None:
    """Recursive equality of snapshot contents (dataclasses, dicts, arrays, scalars)."""
    if hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b), path
        for name in a.__dataclass_fields__:
            _assert_tree_equal(getattr(a, name), getattr(b, name), f"{path}.{name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _assert_tree_equal(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_tree_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        assert a == b, path


def _random_in_space_action(env, rng: np.random.Generator):
    """A uniformly random action from the whole action space (valid or not)."""
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return int(rng.integers(space.n))
    return rng.integers(0, space.nvec).astype(np.int64)


def _step_record(env, action):
    obs, reward, terminated, truncated, info = env.step(action)
    return obs, reward, terminated, truncated, info


# ----------------------------------------------------------------------------- checkers
@pytest.mark.parametrize("num_nodes", SIZES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_env_checker(env_id, num_nodes):
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(_make(env_id, num_nodes))


@pytest.mark.parametrize("num_nodes", SIZES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_env_checker(env_id, num_nodes):
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(_make(env_id, num_nodes), warn=False)


# ------------------------------------------------------------------------- registration
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registration_after_import(env_id):
    env = gym.make(env_id)  # default num_nodes = 20
    obs, _ = env.reset(seed=0)
    assert env.unwrapped.num_nodes == 20
    assert obs["adjacency"].shape == (20, 20)
    env.close()


def test_registration_without_import_in_fresh_process():
    """``gym.make("graphwm_envs:graphenv/X-v0")`` works with no prior ``import graphwm_envs``."""
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'graphwm_envs' not in sys.modules\n"
        f"for env_id in {ENV_IDS!r}:\n"
        "    env = gym.make('graphwm_envs:' + env_id, num_nodes=7)\n"
        "    obs, _ = env.reset(seed=1)\n"
        "    assert obs['adjacency'].shape == (7, 7), env_id\n"
        "print('ok', len(sys.argv))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_vec_sync(env_id):
    vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", num_nodes=8)
    obs, _ = vec.reset(seed=3)
    assert obs["adjacency"].shape == (2, 8, 8)
    assert obs["action_mask"].shape == (2, 8)
    rng = np.random.default_rng(0)
    for _ in range(5):
        actions = np.stack([_random_in_space_action(e, rng) for e in vec.unwrapped.envs])
        obs, reward, terminated, truncated, _ = vec.step(actions)
        assert reward.shape == (2,) and terminated.shape == (2,) and truncated.shape == (2,)
        assert obs["action_mask"].shape == (2, 8) and obs["action_mask"].any(axis=1).all()
    vec.close()


# ------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_is_deterministic_in_seed(env_id):
    a, b = _make(env_id), _make(env_id)
    for seed in (0, 1, 12345):
        _assert_obs_equal(a.reset(seed=seed)[0], b.reset(seed=seed)[0])
    # different seeds give different graphs
    obs0 = a.reset(seed=0)[0]["adjacency"]
    assert any(not np.array_equal(obs0, a.reset(seed=s)[0]["adjacency"]) for s in range(1, 5))
    # a same-seed rollout with the same actions is identical
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    a.reset(seed=9)
    b.reset(seed=9)
    for _ in range(15):
        ra = a.step(a.sample_valid_action(rng_a))
        rb = b.step(b.sample_valid_action(rng_b))
        _assert_obs_equal(ra[0], rb[0])
        assert ra[1:4] == rb[1:4]
        if ra[2] or ra[3]:
            break


# ----------------------------------------------------------------------- clone/restore
def _rollout(env, actions):
    out = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return out


@pytest.mark.parametrize("n", [12, 50])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_clone_restore_replays_exactly(env_id, n):
    """Restoring a snapshot replays every env exactly, with no reseeding."""
    env = _make(env_id, n)
    rng = np.random.default_rng(0)
    for seed in range(6):
        env.reset(seed=seed)
        for _ in range(int(rng.integers(0, 4))):
            _, _, term, trunc, _ = env.step(env.sample_valid_action(rng))
            if term or trunc:
                env.reset(seed=100 + seed)
        snap = env.clone_state()
        # mix valid actions and arbitrary in-space actions (invalid ones are noops)
        actions = [
            env.sample_valid_action(rng)
            if rng.random() < 0.8
            else _random_in_space_action(env, rng)
            for _ in range(25)
        ]
        first = _rollout(env, actions)
        obs = env.restore_state(snap)
        assert isinstance(obs, dict)
        second = _rollout(env, actions)
        assert len(first) == len(second)
        for (o1, *r1), (o2, *r2) in zip(first, second, strict=True):
            _assert_obs_equal(o1, o2)
            assert r1 == r2


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_snapshot_survives_later_steps(env_id):
    env = _make(env_id, 10)
    rng = np.random.default_rng(1)
    env.reset(seed=4)
    snap = env.clone_state()
    frozen = copy.deepcopy(snap)
    obs_at_snap = env.restore_state(snap)
    for _ in range(30):
        _, _, term, trunc, _ = env.step(env.sample_valid_action(rng))
        if term or trunc:
            env.reset(seed=int(rng.integers(1000)))
    _assert_tree_equal(snap, frozen)
    # restoring the snapshot twice, with steps in between, gives the same observation
    _assert_obs_equal(env.restore_state(snap), obs_at_snap)
    env.step(env.sample_valid_action(rng))
    _assert_tree_equal(snap, frozen)
    _assert_obs_equal(env.restore_state(snap), obs_at_snap)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_restore_rejects_foreign_snapshots(env_id):
    env = _make(env_id, 10)
    env.reset(seed=0)
    snap = env.clone_state()
    other = _make(env_id, 11)
    other.reset(seed=0)
    with pytest.raises(ValueError, match="nodes"):
        other.restore_state(snap)
    with pytest.raises(TypeError):
        env.restore_state({"not": "a snapshot"})
    assert isinstance(snap, EnvSnapshot)


# ---------------------------------------------------------------------- invalid actions
def _find_invalid_action(env, rng):
    """An in-space action the mask forbids in the current state, or ``None``."""
    mask = env.action_masks()
    space = env.action_space
    n = env.num_nodes
    node_mask = mask[:n]
    bad = np.flatnonzero(~node_mask)
    if bad.size == 0:
        return None
    if isinstance(space, spaces.Discrete):
        return int(rng.choice(bad))
    action = env.sample_valid_action(rng)
    action[0] = int(rng.choice(bad))
    return action


def _state_with_invalid_action(env_id, num_nodes=10):
    env = _make(env_id, num_nodes)
    rng = np.random.default_rng(0)
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(40):
            action = _find_invalid_action(env, rng)
            if action is not None:
                return env, action
            _, _, term, trunc, _ = env.step(env.sample_valid_action(rng))
            if term or trunc:
                break
    return env, None


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_invalid_action_noop_and_raise(env_id):
    env, action = _state_with_invalid_action(env_id)
    if action is None:
        pytest.skip(f"{env_id}: random play never masks a node (env-specific test covers it)")
    assert not env._is_valid(action)
    snap = env.clone_state()
    *_, info = env.step(action)
    assert info["invalid_action"] is True
    raising = _make(env_id, env.num_nodes, invalid_action="raise")
    raising.reset(seed=0)
    raising.restore_state(snap)
    before = raising.clone_state()
    with pytest.raises(ValueError, match="mask"):
        raising.step(action)
    _assert_tree_equal(raising.clone_state(), before)  # nothing changed
    # a valid action is not flagged
    *_, info = raising.step(raising.sample_valid_action(np.random.default_rng(0)))
    assert info["invalid_action"] is False


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_out_of_space_action_raises_value_error(env_id):
    env = _make(env_id, 8)
    env.reset(seed=0)
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        bad_actions = [8, -1, 100, 1.5, np.array([1, 2])]
    else:
        good = env.sample_valid_action(np.random.default_rng(0))
        too_big = good.copy()
        too_big[-1] = 8
        negative = good.copy()
        negative[0] = -1
        bad_actions = [too_big, negative, good[:-1], np.append(good, 0), good.astype(float) + 0.5]
    for bad in bad_actions:
        with pytest.raises(ValueError, match="action"):
            env.step(bad)


# ------------------------------------------------------------------ observation contract
@pytest.mark.parametrize("num_nodes", (5, 13))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_observations_honour_the_contract(env_id, num_nodes):
    env = _make(env_id, num_nodes)
    schema = env.schema
    assert json.loads(json.dumps(schema.to_dict())) == schema.to_dict()
    assert type(schema).from_dict(schema.to_dict()) == schema
    rng = np.random.default_rng(2)
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        for _ in range(30):
            validate_observation(obs, schema, num_nodes)
            assert env.observation_space.contains(obs)
            mask = env.action_masks()
            assert mask.dtype == bool
            np.testing.assert_array_equal(mask[:num_nodes], obs["action_mask"].astype(bool))
            action = env.sample_valid_action(rng)
            nodes = env.action_to_nodes(action)
            assert nodes.shape == (num_nodes,) and nodes.dtype == np.int8
            assert set(np.unique(nodes)) <= {0, 1} and nodes.sum() >= 1
            obs, reward, terminated, truncated, info = env.step(action)
            assert isinstance(reward, float) and np.isfinite(reward)
            assert info["invalid_action"] is False
            if terminated or truncated:
                break


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("adjacency", 2, "adjacency has entries other than 0/1"),
        ("adjacency", -1, "adjacency has entries other than 0/1"),
        ("action_mask", 2, "action_mask has entries other than 0/1"),
        ("action_mask", -1, "action_mask has entries other than 0/1"),
    ],
)
def test_validation_names_entries_other_than_zero_one(key, value, message):
    env = _make("graphenv/OD-v0", 6)
    obs, _ = env.reset(seed=0)
    validate_observation(obs, env.schema, 6)
    bad = {k: v.copy() for k, v in obs.items()}
    if key == "adjacency":  # symmetric, off the diagonal: only the value is wrong
        bad[key][0, 1] = bad[key][1, 0] = value
    else:
        bad[key][0] = value
    with pytest.raises(ValueError, match=message):
        validate_observation(bad, env.schema, 6)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_returns_rgb_image(env_id):
    env = _make(env_id, 9, render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert image.std() > 0  # not a blank canvas
    env.step(env.sample_valid_action(np.random.default_rng(0)))
    assert env.render().shape == image.shape


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bad_constructor_arguments(env_id):
    with pytest.raises(ValueError, match="num_nodes"):
        gym.make(env_id, num_nodes=4)
    with pytest.raises(TypeError, match="num_nodes"):
        gym.make(env_id, num_nodes=7.5)
    with pytest.raises(ValueError, match="invalid_action"):
        gym.make(env_id, invalid_action="ignore")
