"""Tests of the CF env: generator, failure rule, hand-checked transitions, invariants."""

from __future__ import annotations

import dataclasses

import graphwm_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.cf.dynamics import failure_probability
from graphwm_envs.cf.env import CFEnv
from graphwm_envs.cf.loads import betweenness_load
from graphwm_envs.cf.types import CFParams, CFState
from graphwm_envs.core.graph_ops import is_connected, largest_component_size
from graphwm_envs.core.validation import validate_observation


def _graph(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    adj = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        adj[a, b] = adj[b, a] = True
    return adj


def _restore(env: CFEnv, state: CFState, seed: int | None = 0, steps: int = 0) -> dict:
    """Put ``state`` into ``env`` through the public snapshot API."""
    env.reset(seed=0)
    snap = dataclasses.replace(env.clone_state(), state=state, steps=steps, done=False)
    return env.restore_state(snap, seed=seed)


def _state(adj: np.ndarray, capacity: np.ndarray | None = None, xi: float = 1.2) -> CFState:
    load = betweenness_load(adj)
    n = len(adj)
    return CFState(
        adjacency=adj.copy(),
        load=load,
        capacity=load.copy() if capacity is None else np.asarray(capacity, dtype=np.float64),
        xi=xi,
        positions=np.random.default_rng(0).random((n, 2)),
    )


PATH5 = _graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)])  # loads 0, .3, .4, .3, 0 (P = 10)
K5 = _graph(5, [(a, b) for a in range(5) for b in range(a + 1, 5)])


# ------------------------------------------------------------------ failure rule
def test_failure_probability_hand_values() -> None:
    load = np.array([0.5, 0.3, 0.25, 0.1, 0.2, 0.0])
    cap = np.array([0.2, 0.2, 0.2, 0.2, 0.0, 0.0])
    # xi cap = 0.25: p = min(1, (load - .25)/.25); zero capacity with positive load: p = 1
    np.testing.assert_allclose(
        failure_probability(load, cap, 1.25), [1.0, 0.2, 0.0, 0.0, 1.0, 0.0], atol=1e-12
    )
    assert failure_probability(np.array([0.9]), np.array([0.2]), 1.25)[0] == 1.0  # capped at 1


def test_load_exactly_at_threshold_never_fails() -> None:
    env = CFEnv(5)
    state = _state(PATH5, xi=1.3)
    state.capacity[2] = 0.31
    state.load[2] = state.xi * state.capacity[2]  # load == xi * capacity exactly
    for seed in range(200):
        _restore(
            env, dataclasses.replace(state, adjacency=PATH5.copy(), load=state.load.copy()), seed
        )
        obs, *_ = env.step(0)
        assert obs["adjacency"][2].sum() == 2  # node 2 kept both edges


# ------------------------------------------------------------------ hand-checked transitions
def test_forced_failure_when_probability_is_one() -> None:
    env = CFEnv(5)
    capacity = betweenness_load(PATH5)
    capacity[2] = 0.1  # xi cap = 0.12 < 0.4: p = min(1, 0.28 / 0.12) = 1
    for seed in range(50):
        _restore(env, _state(PATH5, capacity, xi=1.2), seed)
        obs, reward, terminated, truncated, info = env.step(0)
        # the agent's node 0 and the failed node 2 lose all edges; only 3-4 remains
        assert np.array_equal(obs["adjacency"], _graph(5, [(3, 4)]).astype(np.int8))
        assert obs["action_mask"].tolist() == [0, 0, 0, 1, 1]
        np.testing.assert_array_equal(obs["node_continuous"][:, 0], np.zeros(5))
        np.testing.assert_allclose(obs["node_continuous"][:, 1], capacity.astype(np.float32))
        assert reward == pytest.approx(-1 / 3)  # H = ceil(5 / 2) = 3
        assert not terminated and not truncated
        assert info["num_failed"] == 1 and not info["invalid_action"]


def test_agent_removal_recomputes_loads() -> None:
    env = CFEnv(5)
    _restore(env, _state(PATH5, xi=1.4))  # capacities = loads: nobody overloaded
    obs, *_ = env.step(4)
    # path 0-1-2-3 plus isolated 4: node 1 on {0,2},{0,3}; node 2 on {0,3},{1,3}; P = 10
    np.testing.assert_allclose(obs["node_continuous"][:, 0], [0, 0.2, 0.2, 0, 0], atol=1e-7)
    assert obs["adjacency"].sum() == 6


def test_horizon_penalty_is_largest_component_fraction() -> None:
    env = CFEnv(5)
    _restore(env, _state(K5))  # complete graph: all loads 0, nothing ever fails
    rewards, dones = [], []
    for node in (0, 1, 2):
        _, reward, terminated, truncated, _ = env.step(node)
        rewards.append(reward)
        dones.append((terminated, truncated))
    # after 3 = H steps the edge 3-4 remains: lcc = 2 nodes
    assert rewards == pytest.approx([-1 / 3, -1 / 3, -1 / 3 - 2 / 5])
    assert dones == [(False, False), (False, False), (True, False)]


def test_terminates_without_penalty_when_no_edge_is_left() -> None:
    env = CFEnv(6)
    star = _graph(6, [(0, i) for i in range(1, 6)])
    _restore(env, _state(star))
    obs, reward, terminated, truncated, _ = env.step(0)
    assert terminated and not truncated
    assert reward == pytest.approx(-1 / 3)
    assert obs["adjacency"].sum() == 0 and not env._mask().any()  # no node has an edge left
    assert obs["action_mask"].all()  # the published terminal mask is never all-zero
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)


def test_invalid_action_is_an_agent_noop_but_failures_still_happen() -> None:
    adj = PATH5.copy()
    adj[0, 1] = adj[1, 0] = False  # node 0 isolated; path 1-2-3-4
    capacity = betweenness_load(adj)
    overloaded = capacity.copy()
    overloaded[2] = 0.05  # load of node 2 is 0.3 > 1.2 * 0.05: p = 1
    env = CFEnv(5)
    _restore(env, _state(adj, overloaded))
    obs, reward, terminated, _, info = env.step(0)
    assert info["invalid_action"] and info["num_failed"] == 1
    assert np.array_equal(obs["adjacency"], _graph(5, [(3, 4)]).astype(np.int8))
    assert reward == pytest.approx(-1 / 3) and not terminated
    env_raise = CFEnv(5, invalid_action="raise")
    _restore(env_raise, _state(adj, capacity))
    with pytest.raises(ValueError, match="not allowed"):
        env_raise.step(0)


# ------------------------------------------------------------------ stochastic semantics
def test_reseeded_restores_match_the_failure_probability() -> None:
    """Node 2 of the path has load 0.4 and xi cap = 0.4 / 1.5: p = 0.5."""
    env = CFEnv(5)
    capacity = betweenness_load(PATH5)
    capacity[2] = 0.4 / 1.5 / 1.2
    state = _state(PATH5, capacity, xi=1.2)
    np.testing.assert_allclose(failure_probability(state.load, state.capacity, 1.2)[2], 0.5)
    _restore(env, state)
    snap = env.clone_state()
    trials = 600
    fails = 0
    outcomes = set()
    for seed in range(trials):
        env.restore_state(snap, seed=seed)
        obs, *_ = env.step(4)
        failed = obs["adjacency"][2].sum() == 0
        fails += failed
        outcomes.add(bool(failed))
    assert outcomes == {True, False}
    assert abs(fails / trials - 0.5) < 4 * np.sqrt(0.25 / trials)


# ------------------------------------------------------------------ generator and hidden xi
@pytest.mark.parametrize("n", [5, 20, 50])
def test_reset_state(n: int) -> None:
    env = CFEnv(n)
    obs, _ = env.reset(seed=1)
    validate_observation(obs, env.schema, n)
    state = env.state
    assert is_connected(state.adjacency)
    np.testing.assert_array_equal(state.load, state.capacity)
    np.testing.assert_allclose(state.load, betweenness_load(state.adjacency))
    assert 1.1 <= state.xi <= 1.4
    assert obs["graph_continuous"].tolist() == [1.0]
    assert obs["action_mask"].all()
    assert env.horizon == -(-n // 2)
    again, _ = CFEnv(n).reset(seed=1)
    for key in obs:
        assert np.array_equal(obs[key], again[key])


def test_xi_is_hidden_but_kept_in_snapshots() -> None:
    env = CFEnv(30)
    env.reset(seed=3)
    snap = env.clone_state()
    assert snap.state.xi == env.state.xi
    low = dataclasses.replace(snap, state=dataclasses.replace(snap.state, xi=1.1))
    high = dataclasses.replace(snap, state=dataclasses.replace(snap.state, xi=1.4))
    o_low, o_high = env.restore_state(low), env.restore_state(high)
    for key in o_low:  # observations do not depend on xi
        assert np.array_equal(o_low[key], o_high[key])
    assert env.state.xi == 1.4
    sampler = CFEnv(10)
    seen = []
    for s in range(40):
        sampler.reset(seed=s)
        seen.append(sampler.state.xi)
    assert min(seen) >= 1.1 and max(seen) <= 1.4 and max(seen) - min(seen) > 0.15


# ------------------------------------------------------------------ invariants over many seeds
def test_invariants_over_random_episodes() -> None:
    rng = np.random.default_rng(0)
    for seed in range(15):
        env = CFEnv(30)
        obs, _ = env.reset(seed=seed)
        h = env.horizon
        for t in range(h):
            state = env.state
            prev_adj, prev_load = state.adjacency.copy(), state.load.copy()
            prob = failure_probability(prev_load, state.capacity, state.xi)
            action = env.sample_valid_action(rng)
            obs, reward, terminated, truncated, info = env.step(action)
            validate_observation(obs, env.schema, 30)
            adj = obs["adjacency"].astype(bool)
            assert not (adj & ~prev_adj).any(), "edges only disappear"
            lost = prev_adj & ~adj
            allowed = (prob > 0).copy()
            allowed[action] = True
            # every removed edge has an endpoint that is the agent's node or overloaded
            assert not (lost & ~allowed[:, None] & ~allowed[None, :]).any()
            assert not adj[prob >= 1.0].any(), "p = 1 nodes always fail"
            assert not adj[action].any()
            np.testing.assert_allclose(env.state.load, betweenness_load(adj), atol=1e-12)
            assert (env.state.load[env.state.capacity == 0] == 0).all(), "zero stays zero"
            rule = adj.any(axis=1)
            published = rule if rule.any() else np.ones_like(rule)  # never all-zero
            np.testing.assert_array_equal(obs["action_mask"], published)
            assert not truncated
            assert terminated == (t + 1 == h or not adj.any())
            expected = -1 / h
            if t + 1 == h and adj.any():
                expected -= largest_component_size(adj) / 30
            assert reward == pytest.approx(expected)
            if terminated:
                break


def test_registered_id_and_options() -> None:
    env = gym.make("graphenv/CF-v0", num_nodes=12)
    assert isinstance(env.unwrapped, CFEnv)
    assert env.unwrapped.schema.to_dict()["node_continuous"] == ["load", "capacity"]
    assert CFEnv(7).horizon == 4 and CFEnv(8).horizon == 4
    with pytest.raises(ValueError, match="xi_low"):
        CFParams(xi_low=1.5, xi_high=1.2)
    frame = CFEnv(12, render_mode="rgb_array")
    frame.reset(seed=0)
    image = frame.render()
    assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
