"""Tests of the OD env: generator, dynamics pieces, hand-checked transitions, invariants."""

from __future__ import annotations

import dataclasses

import graphwm_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.core.graph_ops import connected_erdos_renyi, is_connected
from graphwm_envs.core.validation import validate_observation
from graphwm_envs.od.dynamics import (
    agent_influence,
    copy_opinion,
    rewire,
    rewire_candidates,
    softmax_sample,
)
from graphwm_envs.od.env import ODEnv
from graphwm_envs.od.types import ODParams, ODState, fraction_count


def _graph(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    adj = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        adj[a, b] = adj[b, a] = True
    return adj


def _state(adj: np.ndarray, opinion: list[int], vibe: list[float]) -> ODState:
    return ODState(
        adjacency=adj.copy(),
        opinion=np.array(opinion, dtype=np.int64),
        vibe=np.array(vibe, dtype=np.float64),
    )


def _restore(env: ODEnv, state: ODState, seed: int | None = 0) -> dict:
    env.reset(seed=0)
    snap = dataclasses.replace(env.clone_state(), state=state, steps=0, done=False)
    return env.restore_state(snap, seed=seed)


def _binomial_ok(hits: int, trials: int, p: float) -> bool:
    return abs(hits / trials - p) < 4 * np.sqrt(p * (1 - p) / trials)


# ------------------------------------------------------------------ generator
@pytest.mark.parametrize("n", [5, 6, 8, 13, 50, 200, 1000])
def test_initial_graph_connected_with_mean_degree_about_four(n: int) -> None:
    seeds = range(3 if n == 1000 else 10)
    degrees = []
    for seed in seeds:
        p = min(1.0, 4.0 / (n - 1))
        adj = connected_erdos_renyi(np.random.default_rng(seed), n, p, method="join")
        assert adj.shape == (n, n) and adj.dtype == bool
        assert np.array_equal(adj, adj.T) and not np.diagonal(adj).any()
        assert is_connected(adj)
        degrees.append(adj.sum() / n)
    if n == 5:
        assert degrees == [4.0] * len(degrees)  # p = 1: the complete graph
    # E[mean degree] = 4 + 2 (E[#components] - 1) / N; the join edges add at most ~0.3 at N=6
    assert 3.5 < np.mean(degrees) < 4.4


def test_reset_distribution_and_determinism() -> None:
    env = ODEnv(200)
    obs, _ = env.reset(seed=4)
    validate_observation(obs, env.schema, 200)
    opinions = obs["node_categorical"][:, 0]
    assert set(np.unique(opinions)) == {0, 1, 2, 3, 4}
    vibe = obs["node_continuous"][:, 0]
    assert vibe.min() >= -1 and vibe.max() <= 1 and vibe.min() < -0.8 and vibe.max() > 0.8
    np.testing.assert_allclose(obs["graph_continuous"], [0.05, 0.1])
    assert obs["action_mask"].all()
    again, _ = ODEnv(200).reset(seed=4)
    for key in obs:
        assert np.array_equal(obs[key], again[key])


@pytest.mark.parametrize(
    ("n", "k", "k_env"), [(5, 1, 1), (20, 1, 2), (21, 2, 3), (30, 2, 3), (1000, 50, 100)]
)
def test_selection_counts(n: int, k: int, k_env: int) -> None:
    env = ODEnv(n)
    assert (env.k, env.k_env) == (k, k_env)
    assert env.action_space.shape == (k,)
    assert fraction_count(30, 0.1) == 3  # 0.1 * 30 == 3.0000000000000004 in floating point


# ------------------------------------------------------------------ dynamics pieces
def test_softmax_sample_frequencies_and_stability() -> None:
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 1.0, 2.0])
    probs = np.exp(logits) / np.exp(logits).sum()
    draws = np.array([softmax_sample(logits, rng.random()) for _ in range(4000)])
    for i, p in enumerate(probs):
        assert _binomial_ok(int((draws == i).sum()), 4000, p)
    two = np.log(np.array([1.0, 3.0]))  # probabilities 1/4, 3/4
    assert [softmax_sample(two, u) for u in (0.0, 0.24, 0.26, 0.99)] == [0, 0, 1, 1]
    huge = np.array([-1e4, 1e4, 1e4 - 1.0])  # would overflow without subtracting the max
    assert {softmax_sample(huge, rng.random()) for _ in range(200)} <= {1, 2}
    assert softmax_sample(huge, 0.0) == 1 and softmax_sample(huge, 1.0 - 1e-16) == 2


def test_rewire_hand_checked() -> None:
    # node 0 - node 1 only; opinions 0:A 1:B 2:A 3:B -> drop 1, new partner 2 (the only one)
    state = _state(_graph(4, [(0, 1), (1, 3)]), [2, 4, 2, 4], [0.0, 0.5, -0.5, 0.9])
    assert rewire(state, 0, 0.1, 0.5, 0.5)
    assert np.array_equal(state.adjacency, _graph(4, [(0, 2), (1, 3)]))
    np.testing.assert_array_equal(state.opinion, [2, 4, 2, 4])


def test_rewire_probabilities() -> None:
    """Drop ~ exp(+d/T) over neighbours, new partner ~ exp(-d/T) over same-opinion others."""
    adj = _graph(5, [(0, 1), (0, 2)])
    base = _state(adj, [1, 3, 3, 1, 1], [0.0, 0.1, 0.3, 0.0, 0.2])
    neighbours, partners = rewire_candidates(base, 0)
    assert neighbours.tolist() == [1, 2] and partners.tolist() == [3, 4]
    p_drop_2 = np.exp(3) / (np.exp(1) + np.exp(3))
    p_new_3 = 1 / (1 + np.exp(-2))
    rng = np.random.default_rng(1)
    trials, drop2, new3 = 3000, 0, 0
    for _ in range(trials):
        state = _state(adj, [1, 3, 3, 1, 1], [0.0, 0.1, 0.3, 0.0, 0.2])
        assert rewire(state, 0, 0.1, rng.random(), rng.random())
        drop2 += not state.adjacency[0, 2]
        new3 += bool(state.adjacency[0, 3])
        assert state.adjacency.sum() == adj.sum()  # one edge out, one in
    assert _binomial_ok(drop2, trials, p_drop_2)
    assert _binomial_ok(new3, trials, p_new_3)


def test_rewire_impossible_cases_change_nothing() -> None:
    # node 0 isolated; node 1 has a neighbour but no same-opinion non-neighbour
    state = _state(_graph(4, [(1, 2), (2, 3)]), [0, 1, 2, 3], [0.0, 0.1, 0.2, 0.3])
    before = state.adjacency.copy()
    assert not rewire(state, 0, 0.1, 0.5, 0.5)
    assert not rewire(state, 1, 0.1, 0.5, 0.5)
    assert np.array_equal(state.adjacency, before)


def test_copy_opinion_hand_checked() -> None:
    state = _state(_graph(4, [(0, 1)]), [2, 3, 4, 1], [0.0] * 4)
    assert copy_opinion(state, 0, 0.99)
    assert state.opinion.tolist() == [3, 3, 4, 1]
    assert not copy_opinion(state, 2, 0.5)  # isolated: no change
    assert state.opinion.tolist() == [3, 3, 4, 1]


def test_agent_influence_repeated_nodes_count_once() -> None:
    params = ODParams()
    a = _state(_graph(5, []), [1] * 5, [0.0] * 5)
    b = _state(_graph(5, []), [1] * 5, [0.0] * 5)
    out_a = agent_influence(a, np.array([3, 3, 3]), params, np.random.default_rng(9))
    out_b = agent_influence(b, np.array([3]), params, np.random.default_rng(9))
    np.testing.assert_array_equal(out_a, out_b)
    np.testing.assert_array_equal(a.opinion, b.opinion)
    env = ODEnv(40)
    assert env.action_to_nodes(np.array([7, 7])).tolist() == [int(i == 7) for i in range(40)]


# ------------------------------------------------------------------ env transitions
def test_adoption_probability_and_reward_from_reseeded_restores() -> None:
    """No edges: the env's moves change nothing; node 0 adopts opinion 0 w.p. 0.3."""
    env = ODEnv(10)
    _restore(env, _state(_graph(10, []), [2] * 10, np.linspace(-1, 1, 10).tolist()))
    snap = env.clone_state()
    trials, adopted = 800, 0
    for seed in range(trials):
        env.restore_state(snap, seed=seed)
        obs, reward, terminated, truncated, info = env.step(np.array([0]))
        hit = obs["node_categorical"][0, 0] == 0
        adopted += hit
        assert reward == pytest.approx(0.1 if hit else 0.0)
        assert (obs["node_categorical"][1:, 0] == 2).all()
        assert info["num_rewired"] == 0 and not terminated and not truncated
    assert _binomial_ok(adopted, trials, 0.3)


def test_rewire_probability_from_reseeded_restores() -> None:
    """One opinion everywhere on a path: a rewire always changes the graph, a copy never does."""
    env = ODEnv(5)
    _restore(env, _state(_graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)]), [0] * 5, [0.0] * 5))
    snap = env.clone_state()
    trials, changed = 1000, 0
    for seed in range(trials):
        env.restore_state(snap, seed=seed)
        obs, reward, *_ = env.step(np.array([0]))
        changed += not np.array_equal(obs["adjacency"], snap.state.adjacency.astype(np.int8))
        assert obs["adjacency"].sum() == 8 and reward == 0.0
    assert _binomial_ok(changed, trials, 0.458)


def test_copy_probability_from_reseeded_restores() -> None:
    """Distinct opinions: no rewire is possible, a copy always changes an opinion."""
    env = ODEnv(5)
    state = _state(_graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)]), [0, 1, 2, 3, 4], [0.0] * 5)
    _restore(env, state)
    snap = env.clone_state()
    trials, changed = 1000, 0
    for seed in range(trials):
        env.restore_state(snap, seed=seed)
        obs, reward, *_ = env.step(np.array([0]))  # node 0 already holds opinion 0
        opinions = obs["node_categorical"][:, 0]
        changed += not np.array_equal(opinions, [0, 1, 2, 3, 4])
        assert np.array_equal(obs["adjacency"], snap.state.adjacency.astype(np.int8))
        assert reward == pytest.approx(np.mean(opinions == 0) - 0.2)
    assert _binomial_ok(changed, trials, 1 - 0.458)


def test_invariants_over_random_episodes() -> None:
    n = 30
    rng = np.random.default_rng(0)
    for seed in range(12):
        env = ODEnv(n)
        obs, _ = env.reset(seed=seed)
        vibe0 = obs["node_continuous"].copy()
        n_edges = obs["adjacency"].sum()
        for t in range(50):
            prev = obs
            action = env.sample_valid_action(rng)
            assert len(set(action.tolist())) == env.k
            obs, reward, terminated, truncated, info = env.step(action)
            validate_observation(obs, env.schema, n)
            assert obs["adjacency"].sum() == n_edges, "rewiring conserves the edge count"
            assert np.array_equal(obs["node_continuous"], vibe0), "vibes are fixed"
            changed = obs["node_categorical"][:, 0] != prev["node_categorical"][:, 0]
            assert changed.sum() <= env.k_env + env.k
            moved_rows = (obs["adjacency"] != prev["adjacency"]).any(axis=1).sum()
            assert moved_rows <= 3 * info["num_rewired"] and info["num_rewired"] <= env.k_env
            frac = np.mean(obs["node_categorical"][:, 0] == 0)
            assert reward == pytest.approx(frac - np.mean(prev["node_categorical"][:, 0] == 0))
            assert not terminated and truncated == (t == 49) and not info["invalid_action"]


def test_registered_id_render_and_params() -> None:
    env = gym.make("graphenv/OD-v0", num_nodes=25)
    assert isinstance(env.unwrapped, ODEnv)
    assert env.unwrapped.schema.to_dict()["node_categorical"] == {"opinion": 5}
    with pytest.raises(ValueError, match="phi"):
        ODParams(phi=1.5)
    with pytest.raises(ValueError, match="outside the action space"):
        env.reset(seed=0)
        env.step(np.array([25, 0]))
    frame = ODEnv(12, render_mode="rgb_array")
    frame.reset(seed=0)
    image = frame.render()
    assert image.ndim == 3 and image.dtype == np.uint8
