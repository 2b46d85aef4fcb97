"""A snapshot altered by hand (``dataclasses.replace``) is refused by ``restore_state``, and a
failed restore leaves the env as it was (issue 30)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from graphwm_envs.cf.env import CFEnv
from graphwm_envs.od.env import ODEnv
from graphwm_envs.rgc.env import RGCEnv
from graphwm_envs.sar.env import SAREnv


def _env(cls=SAREnv, n: int = 8):
    env = cls(num_nodes=n)
    env.reset(seed=3)
    return env


def _same(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name


def _refused(env, snap, match: str) -> None:
    before = env.clone_state()
    with pytest.raises(ValueError, match=match):
        env.restore_state(snap)
    after = env.clone_state()
    _same(before.state, after.state)
    counters = ("steps", "done", "rng_state")
    assert [getattr(after, c) for c in counters] == [getattr(before, c) for c in counters]


def test_nan_state_arrays_are_refused():
    env = _env()
    snap = env.clone_state()
    state = dataclasses.replace(snap.state, stability=np.full_like(snap.state.stability, np.nan))
    _refused(env, dataclasses.replace(snap, state=state), "'stability' holds NaN")


@pytest.mark.parametrize("cls", [SAREnv, RGCEnv, ODEnv, CFEnv])
def test_a_non_symmetric_adjacency_with_self_loops_is_refused(cls):
    env = _env(cls)
    snap = env.clone_state()
    adj = snap.state.adjacency.copy()
    adj[0, 1], adj[1, 0], adj[2, 2] = 1, 0, 1
    state = dataclasses.replace(snap.state, adjacency=adj)
    _refused(env, dataclasses.replace(snap, state=state), "not symmetric|self-loops")


def test_negative_or_odd_counters_are_refused():
    env = _env()
    snap = env.clone_state()
    _refused(env, dataclasses.replace(snap, steps=-1), "steps must be >= 0")
    _refused(env, dataclasses.replace(snap, steps=True), "steps must be an integer")
    _refused(env, dataclasses.replace(snap, done="no"), "done must be true or false")


@pytest.mark.parametrize("rng_class", ["Generator", "default_rng", "__class__", "nope"])
def test_rng_class_values_are_refused_with_a_value_error(rng_class):
    env = _env()
    snap = env.clone_state()
    _refused(env, dataclasses.replace(snap, rng_class=rng_class), "rng_class must be one of")
    _refused(env, dataclasses.replace(snap, rng_state={"x": 1}), "rng_state is not a PCG64")


def test_a_12_node_snapshot_relabelled_for_8_nodes_leaves_the_env_as_it_was():
    env = _env(SAREnv, 8)
    big = _env(SAREnv, 12).clone_state()
    _refused(env, dataclasses.replace(big, num_nodes=8), "valid SAREnv state of 8 nodes")
    obs, *_ = env.step(env.sample_valid_action(np.random.default_rng(0)))  # the env still works
    assert obs["adjacency"].shape == (8, 8)


def test_an_intact_snapshot_still_replays_exactly():
    env = _env()
    snap = env.clone_state()
    a = env.step(env.sample_valid_action(np.random.default_rng(0)))[0]
    env.restore_state(snap)
    b = env.step(env.sample_valid_action(np.random.default_rng(0)))[0]
    assert all(np.array_equal(a[k], b[k]) for k in a)
