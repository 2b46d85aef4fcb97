"""Reference policies: the random policy is valid and uniform, the greedy ones beat it."""

from __future__ import annotations

import math

import graphwm_envs  # noqa: F401
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.heuristics import (
    episode_returns,
    evaluate_heuristic,
    greedy_action,
    random_action,
)

ENV_IDS = ("graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/SAR-v0", "graphenv/CF-v0")


def make(env_id: str, num_nodes: int = 20, **kwargs):
    return gym.make(env_id, num_nodes=num_nodes, invalid_action="raise", **kwargs).unwrapped


def run(env, policy, rng, seed: int) -> list:
    """One episode with ``policy``; returns the actions (the env raises on an invalid one)."""
    env.reset(seed=seed)
    actions, done = [], False
    while not done:
        action = policy(env, rng)
        actions.append(np.asarray(action).tolist())
        _, _, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"]
        done = terminated or truncated
    return actions


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_action_is_always_valid_and_distinct(env_id):
    env = make(env_id, num_nodes=12)
    rng = np.random.default_rng(0)
    for seed in range(3):
        for action in run(env, random_action, rng, seed):
            if isinstance(action, list):  # k distinct nodes
                assert len(set(action)) == len(action)


def test_random_action_covers_the_valid_set_uniformly():
    """CF (Discrete): every masked-in node is drawn at the uniform rate, no other node ever."""
    env = make("graphenv/CF-v0", num_nodes=20)
    env.reset(seed=1)
    for _ in range(4):  # a state with some nodes already cut off
        env.step(greedy_action(env, np.random.default_rng(0)))
        if not env.action_masks().all():
            break
    valid = np.flatnonzero(env.action_masks())
    assert 2 <= valid.size < 20
    draws = 400 * valid.size
    rng = np.random.default_rng(0)
    counts = np.bincount([random_action(env, rng) for _ in range(draws)], minlength=20)
    assert set(np.flatnonzero(counts)) == set(valid)
    # each count is Binomial(draws, 1/|valid|): within 5 standard deviations of 400
    sd = math.sqrt(draws * (1 / valid.size) * (1 - 1 / valid.size))
    assert np.abs(counts[valid] - 400).max() < 5 * sd


def test_random_action_on_multidiscrete_covers_every_ordered_pair():
    """RGC (MultiDiscrete([N, N])): ordered pairs of distinct masked-in nodes, uniformly."""
    env = make("graphenv/RGC-v0", num_nodes=6)
    env.reset(seed=0)
    valid = np.flatnonzero(env.action_masks()[:6])
    pairs = valid.size * (valid.size - 1)
    rng = np.random.default_rng(1)
    draws = 300 * pairs
    counts: dict[tuple[int, int], int] = {}
    for _ in range(draws):
        i, j = random_action(env, rng).tolist()
        counts[(i, j)] = counts.get((i, j), 0) + 1
    assert set(counts) == {(i, j) for i in valid for j in valid if i != j}
    sd = math.sqrt(draws * (1 / pairs) * (1 - 1 / pairs))
    assert max(abs(c - 300) for c in counts.values()) < 5 * sd


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_greedy_is_valid_and_deterministic_for_a_seed(env_id):
    env = make(env_id)
    first = run(env, greedy_action, np.random.default_rng(5), seed=2)
    again = run(env, greedy_action, np.random.default_rng(5), seed=2)
    assert first == again


@pytest.mark.parametrize(("env_id", "episodes"), [(e, 4 if "RGC" in e else 10) for e in ENV_IDS])
def test_greedy_beats_random_at_n20(env_id, episodes):
    """Paired episodes (same initial states): the mean return difference is a real margin,
    more than three standard errors of the paired differences above zero."""
    greedy = episode_returns(env_id, greedy_action, episodes=episodes, seed=100, num_nodes=20)
    random = episode_returns(env_id, random_action, episodes=episodes, seed=100, num_nodes=20)
    diff = greedy - random
    sem = diff.std(ddof=1) / math.sqrt(episodes)
    assert diff.mean() > 3 * sem > 0


def test_greedy_rgc_adds_the_edge_with_the_best_one_step_reward():
    """Against a slow reference: the reward of every addable edge, via clone/restore."""
    env = make("graphenv/RGC-v0", num_nodes=10)
    env.reset(seed=3)
    snapshot = env.clone_state()
    rewards = {}
    for i in range(10):
        for j in range(i + 1, 10):
            if not env.state.adjacency[i, j]:
                env.restore_state(snapshot)
                rewards[(i, j)] = env.step(np.array([i, j]))[1]
    env.restore_state(snapshot)
    best = max(rewards.values())
    picks = {tuple(sorted(greedy_action(env, np.random.default_rng(s)).tolist())) for s in range(8)}
    ties = {p for p, r in rewards.items() if r == best}
    assert picks <= ties
    assert len(picks) > 1 or len(ties) == 1  # ties are broken by the generator


def test_greedy_sar_ignores_survivors_the_agent_cannot_see():
    from graphwm_envs.sar.dynamics import visible_nodes

    env = make("graphenv/SAR-v0", num_nodes=30)
    for seed in range(10):
        env.reset(seed=seed)
        before = greedy_action(env, np.random.default_rng(0))
        hidden = ~visible_nodes(env.state)
        hidden[env.state.exit_node] = False
        env.state.survivors[hidden] = ~env.state.survivors[hidden]  # rewrite what is unseen
        assert greedy_action(env, np.random.default_rng(0)) == before


def test_greedy_sar_escorts_along_a_shortest_path_to_the_exit():
    from scipy.sparse.csgraph import shortest_path

    env = make("graphenv/SAR-v0", num_nodes=30)
    env.reset(seed=4)
    state = env.state
    state.escorting = True
    state.location = int(np.flatnonzero(state.adjacency[state.exit_node])[0])
    state.location = int(np.flatnonzero(state.adjacency[state.location])[-1])
    dist = shortest_path(state.adjacency, unweighted=True, indices=state.exit_node)
    move = greedy_action(env, np.random.default_rng(0))
    assert state.adjacency[state.location, move]
    assert dist[move] == dist[state.location] - 1


def test_greedy_od_selects_non_target_nodes_with_the_most_reach():
    env = make("graphenv/OD-v0", num_nodes=60)  # k = 3
    env.reset(seed=0)
    state = env.state
    chosen = greedy_action(env, np.random.default_rng(0))
    assert len(set(chosen.tolist())) == env.k == 3
    assert np.all(state.opinion[chosen] != 0)
    adj = state.adjacency.astype(float)
    degree = adj.sum(1)
    reach = np.array(
        [
            sum(1 / degree[u] for u in np.flatnonzero(adj[v]) if state.opinion[u] != 0)
            for v in range(60)
        ]
    )
    others = np.setdiff1d(np.flatnonzero(state.opinion != 0), chosen)
    assert reach[chosen].min() >= reach[others].max() - 1e-12


def test_greedy_cf_cuts_a_node_of_highest_degree():
    env = make("graphenv/CF-v0", num_nodes=30)
    env.reset(seed=0)
    degree = env.state.adjacency.sum(axis=1)
    assert degree[greedy_action(env, np.random.default_rng(0))] == degree.max()


def test_evaluate_heuristic_mean_and_standard_error():
    returns = episode_returns("graphenv/CF-v0", random_action, episodes=5, seed=7, num_nodes=10)
    mean, sem = evaluate_heuristic(
        "graphenv/CF-v0", random_action, episodes=5, seed=7, num_nodes=10
    )
    assert mean == pytest.approx(returns.mean())
    assert sem == pytest.approx(returns.std(ddof=1) / math.sqrt(5))
    assert sem > 0  # the episodes differ
    again = episode_returns("graphenv/CF-v0", random_action, episodes=5, seed=7, num_nodes=10)
    np.testing.assert_array_equal(returns, again)  # deterministic in the seed
    single = evaluate_heuristic("graphenv/OD-v0", random_action, episodes=1, num_nodes=10)
    assert math.isnan(single[1])


def test_evaluate_heuristic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="episodes"):
        evaluate_heuristic("graphenv/OD-v0", random_action, episodes=0)
    with pytest.raises(TypeError, match="callable"):
        evaluate_heuristic("graphenv/OD-v0", "greedy", episodes=1)
    with pytest.raises(TypeError, match="no greedy heuristic"):
        greedy_action(gym.make("CartPole-v1"), np.random.default_rng(0))


def test_greedy_refuses_a_state_with_no_move():
    env = make("graphenv/CF-v0", num_nodes=8)
    env.reset(seed=0)
    env.state.adjacency[:] = False
    with pytest.raises(ValueError, match="no node has an edge"):
        greedy_action(env, np.random.default_rng(0))
    sar = make("graphenv/SAR-v0", num_nodes=8)
    sar.reset(seed=0)
    sar.state.adjacency[sar.state.location] = 0
    with pytest.raises(ValueError, match="no neighbour"):
        greedy_action(sar, np.random.default_rng(0))
