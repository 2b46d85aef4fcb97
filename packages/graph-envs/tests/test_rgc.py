"""Robust Graph Construction: robustness measure, generator, budget, rewards, termination."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import graphwm_envs  # noqa: F401
import gymnasium as gym
import networkx as nx
import numpy as np
import pytest
from graphwm_envs.core.graph_ops import connected_erdos_renyi
from graphwm_envs.rgc.env import edge_budget, num_pairs
from graphwm_envs.rgc.robustness import (
    critical_counts,
    default_num_samples,
    removal_orders,
    targeted_robustness,
    tiebreak_keys,
)
from graphwm_envs.rgc.types import RGCParams, RGCState


def make_env(num_nodes: int = 20, **kwargs):
    return gym.make("graphenv/RGC-v0", num_nodes=num_nodes, **kwargs).unwrapped


def adjacency_of(graph: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(graph, nodelist=range(graph.number_of_nodes()), dtype=np.int8)


# --------------------------------------------------------------- slow reference versions
def reference_critical_count(adjacency: np.ndarray, order) -> int:
    """m* by removing nodes one by one and checking connectivity (networkx)."""
    graph = nx.from_numpy_array(adjacency)
    n = len(order)
    if not nx.is_connected(graph):
        return 0
    for m in range(1, n - 1):
        graph.remove_node(order[m - 1])
        if not nx.is_connected(graph):
            return m
    return n


def exact_robustness(adjacency: np.ndarray) -> float:
    """E[m*] / N over every tie-breaking order (uniform within each degree class)."""
    degrees = adjacency.sum(axis=1)
    classes = [np.flatnonzero(degrees == d).tolist() for d in sorted(set(degrees), reverse=True)]
    total, count = 0.0, 0
    for perms in itertools.product(*(itertools.permutations(c) for c in classes)):
        order = [v for perm in perms for v in perm]
        total += reference_critical_count(adjacency, order)
        count += 1
    return total / count / len(degrees)


def random_connected(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    while True:
        upper = np.triu(rng.random((n, n)) < p, k=1)
        adj = (upper | upper.T).astype(np.int8)
        if nx.is_connected(nx.from_numpy_array(adj)):
            return adj


# ----------------------------------------------------------------------- robustness
@pytest.mark.parametrize("n", [3, 4, 5, 8, 30])
def test_path_and_star_break_at_the_first_removal(n):
    assert targeted_robustness(adjacency_of(nx.path_graph(n))) == 1 / n
    assert targeted_robustness(adjacency_of(nx.star_graph(n - 1))) == 1 / n


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_complete_graph_never_disconnects(n):
    assert targeted_robustness(adjacency_of(nx.complete_graph(n))) == 1.0


def test_complete_minus_an_edge():
    # degrees: 0, 1 -> 3, others 4; after removing 2, 3, 4 only the non-adjacent 0, 1 remain
    graph = nx.complete_graph(5)
    graph.remove_edge(0, 1)
    assert targeted_robustness(adjacency_of(graph)) == 3 / 5


def test_cycle_matches_the_hand_computed_expectation():
    # C5, all degrees tie: m* = 2 w.p. 1/2 (the two removed nodes are not adjacent), 3 w.p. 1/6,
    # and the graph survives to one node (m* = N = 5) w.p. 1/3: E[m*] / 5 = 19 / 30.
    adj = adjacency_of(nx.cycle_graph(5))
    assert exact_robustness(adj) == pytest.approx(19 / 30)
    estimate = targeted_robustness(adj, num_samples=4000)
    # per-order m*/N has sd <= 0.3 here: a 4-sigma band around the exact value
    assert abs(estimate - 19 / 30) < 4 * 0.3 / math.sqrt(4000)


def test_disconnected_graph_has_zero_robustness():
    graph = nx.disjoint_union(nx.complete_graph(3), nx.complete_graph(3))
    assert targeted_robustness(adjacency_of(graph)) == 0.0


def test_fast_algorithm_matches_removal_by_removal_reference():
    rng = np.random.default_rng(0)
    for n in (2, 3, 4, 5, 7, 12, 25):
        for _ in range(25):
            upper = np.triu(rng.random((n, n)) < rng.uniform(0.05, 0.95), k=1)
            adj = (upper | upper.T).astype(np.int8)
            orders = removal_orders(adj, rng.random((5, n)))
            expected = [reference_critical_count(adj, order) for order in orders]
            assert critical_counts(adj, orders).tolist() == expected


def test_removal_orders_are_descending_degree_with_key_tie_breaks():
    adj = adjacency_of(nx.star_graph(4))  # hub 0 (degree 4), leaves 1..4 tie
    keys = np.array([[0.9, 0.4, 0.1, 0.3, 0.2]])
    np.testing.assert_array_equal(removal_orders(adj, keys), [[0, 2, 4, 3, 1]])


def test_estimate_converges_to_the_exact_expectation():
    rng = np.random.default_rng(1)
    for n in (6, 7):
        for _ in range(4):
            adj = random_connected(rng, n, 0.5)
            exact = exact_robustness(adj)
            assert abs(targeted_robustness(adj, num_samples=3000) - exact) < 4 * 0.5 / math.sqrt(
                3000
            )


def test_robustness_is_a_pure_function_of_the_graph():
    rng = np.random.default_rng(2)
    adj = random_connected(rng, 30, 0.2)
    values = {targeted_robustness(adj.copy()) for _ in range(3)}
    assert len(values) == 1
    # identical in a fresh process (no hidden global state)
    code = (
        "import numpy as np, sys\n"
        "from graphwm_envs.rgc.robustness import targeted_robustness\n"
        "adj = np.frombuffer(bytes.fromhex(sys.argv[1]), dtype=np.int8).reshape(30, 30)\n"
        "print(repr(targeted_robustness(adj)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, adj.tobytes().hex()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert float(out.stdout.strip()) == values.pop()
    # the fixed tie-breaking keys cannot be modified by a caller
    keys = tiebreak_keys(30, default_num_samples(30))
    with pytest.raises(ValueError):
        keys[0, 0] = 0.5


def test_relabelling_the_nodes_keeps_the_robustness():
    rng = np.random.default_rng(3)
    for graph in (nx.complete_graph(6), nx.path_graph(7), nx.star_graph(6)):
        adj = adjacency_of(graph)
        perm = rng.permutation(len(adj))
        assert targeted_robustness(adj[perm][:, perm]) == targeted_robustness(adj)
    # with ties, relabelling changes which fixed orders are drawn: equal up to sampling error
    adj = random_connected(rng, 7, 0.5)
    perm = rng.permutation(7)
    a = targeted_robustness(adj, num_samples=3000)
    b = targeted_robustness(adj[perm][:, perm], num_samples=3000)
    assert abs(a - b) < 4 * math.sqrt(2) * 0.5 / math.sqrt(3000)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((3, 4), dtype=np.int8), "square"),
        (np.array([[0, 1], [0, 0]]), "symmetric"),
        (np.eye(3, dtype=np.int8), "diagonal"),
        (np.full((3, 3), 2) - 2 * np.eye(3, dtype=int), "0/1"),
        (np.zeros((1, 1), dtype=np.int8), "at least 2"),
    ],
)
def test_robustness_rejects_bad_adjacency(bad, match):
    with pytest.raises(ValueError, match=match):
        targeted_robustness(bad)


def test_robustness_rejects_bad_sample_counts():
    adj = adjacency_of(nx.path_graph(4))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_samples"):
            targeted_robustness(adj, num_samples=bad)


def test_default_number_of_samples():
    assert [default_num_samples(n) for n in (5, 20, 50, 100, 200, 1000)] == [32, 32, 16, 8, 4, 4]


# ------------------------------------------------------------------------ generator
@pytest.mark.parametrize("n", [5, 6, 30])
def test_initial_graphs_are_connected_and_not_complete(n):
    rng = np.random.default_rng(n)
    for _ in range(40):
        adj = connected_erdos_renyi(rng, n, 0.2)
        assert nx.is_connected(nx.from_numpy_array(adj))
        assert adj.sum() < n * (n - 1)
        assert np.array_equal(adj, adj.T) and not np.diagonal(adj).any()


def test_initial_edge_density_is_p():
    rng = np.random.default_rng(0)
    n, graphs = 40, 60
    adjs = [connected_erdos_renyi(rng, n, 0.2) for _ in range(graphs)]
    density = np.mean([adj.sum() / (n * (n - 1)) for adj in adjs])
    # conditioning on connectivity barely matters at N = 40: 4-sigma band around p = 0.2
    sd = math.sqrt(0.2 * 0.8 / (graphs * num_pairs(n)))
    assert abs(density - 0.2) < 4 * sd + 0.002


# ------------------------------------------------------------------------------ env
def test_schema():
    env = make_env()
    assert env.schema.to_dict() == {
        "node_continuous": [],
        "node_categorical": {},
        "graph_continuous": ["tau", "k"],
        "graph_categorical": {},
        "ranges": {"tau": [0.0, 0.1], "k": [2.0, 2.0]},
    }


@pytest.mark.parametrize(("n", "budget"), [(5, 1), (6, 1), (7, 2), (20, 10), (40, 39), (200, 995)])
def test_edge_budget_is_ceil_of_five_percent(n, budget):
    assert edge_budget(n) == budget
    assert budget / num_pairs(n) <= 0.1  # inside the schema's tau range


def test_initial_observation():
    env = make_env(20)
    obs, _ = env.reset(seed=0)
    # no node features and no graph categorical features: those keys are absent
    assert set(obs) == {"adjacency", "graph_continuous", "action_mask"}
    np.testing.assert_allclose(obs["graph_continuous"], [10 / 190, 2.0], rtol=1e-6)
    state = env.state
    np.testing.assert_array_equal(state.degrees, obs["adjacency"].sum(axis=1))
    np.testing.assert_array_equal(obs["action_mask"], state.degrees < 19)
    assert state.robustness == targeted_robustness(obs["adjacency"])


def set_state(env, adjacency: np.ndarray, edges_added: int = 0) -> None:
    adjacency = adjacency.astype(np.int8)
    env._state = RGCState(
        adjacency=adjacency,
        degrees=adjacency.sum(axis=1, dtype=np.int64),
        budget=edge_budget(env.num_nodes),
        edges_added=edges_added,
        robustness=env.robustness(adjacency),
    )


def test_reward_by_hand_completing_k5():
    graph = nx.complete_graph(5)
    graph.remove_edge(0, 1)
    env = make_env(5)
    env.reset(seed=0)
    set_state(env, adjacency_of(graph))
    np.testing.assert_array_equal(env.action_masks(), [1, 1, 0, 0, 0] * 2)
    obs, reward, terminated, truncated, info = env.step(np.array([1, 0]))
    # robustness 3/5 -> 1 (complete graph); the single-edge budget of N = 5 is spent
    assert reward == pytest.approx(1.0 - 3 / 5)
    assert terminated and not truncated and info["edge_added"]
    assert obs["graph_continuous"][0] == 0.0
    assert obs["adjacency"].sum() == 20 and not env._mask().any()
    assert obs["action_mask"].all()  # a complete graph: the published mask marks every node


def test_rewards_are_robustness_differences_along_random_play():
    env = make_env(15)
    rng = np.random.default_rng(4)
    env.reset(seed=4)
    m = num_pairs(15)
    for _ in range(40):
        before = env.state.adjacency.copy()
        tau_before = env.tau
        action = env.sample_valid_action(rng)
        obs, reward, terminated, truncated, info = env.step(action)
        i, j = action
        expected = targeted_robustness(obs["adjacency"], env.robustness_samples)
        expected -= targeted_robustness(before, env.robustness_samples)
        assert reward == pytest.approx(expected, abs=1e-12)
        if before[i, j]:
            assert not info["edge_added"] and reward == 0.0 and env.tau == tau_before
            np.testing.assert_array_equal(obs["adjacency"], before)
        else:
            assert info["edge_added"]
            assert env.tau == pytest.approx(tau_before - 2 / (15 * 14))
            changed = np.argwhere(obs["adjacency"] != before)
            assert sorted(map(tuple, changed)) == sorted([(i, j), (j, i)])
        assert obs["graph_continuous"][0] == np.float32(env.tau)
        assert env.tau * m == pytest.approx(round(env.tau * m))
        assert not truncated
        if terminated:
            break


def test_self_pair_and_existing_edge_are_free_noops():
    env = make_env(10)
    env.reset(seed=1)
    snap = env.clone_state()
    i, j = np.argwhere(np.triu(env.state.adjacency, 1))[0]
    for action in (np.array([3, 3]), np.array([i, j]), np.array([j, i])):
        obs, reward, terminated, _, info = env.step(action)
        assert reward == 0.0 and not terminated
        assert not info["invalid_action"] and not info["edge_added"]
        np.testing.assert_array_equal(obs["adjacency"], snap.state.adjacency)
        assert env.state.edges_added == 0
    assert env.action_to_nodes(np.array([3, 3])).tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    assert env.action_to_nodes(np.array([1, 4])).tolist() == [0, 1, 0, 0, 1, 0, 0, 0, 0, 0]


def test_full_degree_node_is_masked_and_selecting_it_is_an_invalid_noop():
    graph = nx.star_graph(5)  # hub 0 is adjacent to everything
    env = make_env(6)
    env.reset(seed=0)
    set_state(env, adjacency_of(graph))
    assert env._mask().tolist() == [False, True, True, True, True, True]
    obs, reward, terminated, _, info = env.step(np.array([0, 3]))
    assert info["invalid_action"] and reward == 0.0 and not terminated
    assert env.state.edges_added == 0
    raising = make_env(6, invalid_action="raise")
    raising.reset(seed=0)
    set_state(raising, adjacency_of(graph))
    with pytest.raises(ValueError, match="mask"):
        raising.step(np.array([3, 0]))


def test_budget_exhaustion_terminates_exactly_at_tau_zero():
    env = make_env(20)
    env.reset(seed=2)
    rng = np.random.default_rng(2)
    additions = 0
    while True:
        _, _, terminated, truncated, info = env.step(env.sample_valid_action(rng))
        additions += info["edge_added"]
        assert not truncated
        if terminated:
            break
        assert env.tau > 0
    assert additions == edge_budget(20) == 10 and env.tau == 0.0


def test_horizon_terminates_after_n_choose_2_steps():
    env = make_env(8)
    env.reset(seed=0)
    env._steps = num_pairs(8) - 2
    _, _, terminated, *_ = env.step(np.array([2, 2]))
    assert not terminated
    _, _, terminated, truncated, _ = env.step(np.array([2, 2]))
    assert terminated and not truncated and env.elapsed_steps == num_pairs(8)


def test_environment_is_deterministic_under_reseeded_restores():
    env = make_env(12)
    env.reset(seed=5)
    snap = env.clone_state()
    action = env.sample_valid_action(np.random.default_rng(0))
    outcomes = set()
    for seed in range(5):
        env.restore_state(snap, seed=seed)
        obs, reward, *_ = env.step(action)
        outcomes.add((obs["adjacency"].tobytes(), reward))
    assert len(outcomes) == 1


def test_bad_robustness_samples_argument():
    with pytest.raises(ValueError, match="robustness_samples"):
        make_env(10, robustness_samples=0)
    assert make_env(10, robustness_samples=4).robustness_samples == 4


# ----------------------------------------------------------------- pair mode, G(N, m) option
def test_pair_index_enumerates_the_upper_triangle_row_major():
    env = make_env(7, action_mode="pair")
    assert env.action_space == gym.spaces.Discrete(21)
    pairs = list(itertools.combinations(range(7), 2))  # (0,1), (0,2), ..., (5,6)
    for k, (i, j) in enumerate(pairs):
        assert env.pair_index(i, j) == env.pair_index(j, i) == k
        assert env.endpoints(k) == (i, j)
        np.testing.assert_array_equal(np.flatnonzero(env.action_to_nodes(k)), [i, j])
    with pytest.raises(ValueError, match="distinct"):
        env.pair_index(3, 3)


def test_pair_mode_masks_are_exactly_the_addable_pairs():
    """Exhaustive: from several states, every action is stepped from the same snapshot; an
    action adds an edge iff its mask entry is set (so the mask has no no-op and misses none)."""
    env = make_env(7, action_mode="pair")
    rng = np.random.default_rng(0)
    checked = 0
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        for _ in range(2):
            mask = env.action_masks()
            assert mask.dtype == bool and mask.shape == (21,)
            # the observation keeps the contract's node mask: nodes with an addable pair
            nodes_in_addable = np.zeros(7, dtype=bool)
            for k in np.flatnonzero(mask):
                nodes_in_addable[list(env.endpoints(k))] = True
            np.testing.assert_array_equal(obs["action_mask"].astype(bool), nodes_in_addable)
            snap = env.clone_state()
            for k in range(21):
                env.restore_state(snap)
                *_, info = env.step(k)
                assert info["edge_added"] == mask[k] == (not info["invalid_action"])
                checked += 1
            env.restore_state(snap)
            obs, _, terminated, _, _ = env.step(env.sample_valid_action(rng))
            if terminated:
                break
    assert checked >= 4 * 21


def test_pair_mode_has_the_same_dynamics_as_node_mode():
    nodes_env, pair_env = make_env(12), make_env(12, action_mode="pair")
    for seed in range(3):
        a, _ = nodes_env.reset(seed=seed)
        b, _ = pair_env.reset(seed=seed)
        np.testing.assert_array_equal(a["adjacency"], b["adjacency"])
        rng = np.random.default_rng(seed)
        done = False
        while not done:
            k = pair_env.sample_valid_action(rng)
            i, j = pair_env.endpoints(k)
            a, ra, ta, _, _ = nodes_env.step(np.array([j, i]))
            b, rb, tb, _, _ = pair_env.step(k)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
            assert ra == rb and ta == tb
            done = ta


def test_pair_mode_existing_edge_is_invalid():
    env = make_env(6, action_mode="pair")
    obs, _ = env.reset(seed=0)
    i, j = np.argwhere(np.triu(obs["adjacency"]))[0]
    k = env.pair_index(i, j)
    _, reward, _, _, info = env.step(k)
    assert info["invalid_action"] and not info["edge_added"] and reward == 0.0
    strict = make_env(6, action_mode="pair", invalid_action="raise")
    strict.reset(seed=0)
    with pytest.raises(ValueError, match="mask"):
        strict.step(k)


def test_pair_mode_passes_both_env_checkers():
    import warnings

    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(make_env(9, action_mode="pair"))
        sb3_check_env(make_env(9, action_mode="pair"), warn=False)


@pytest.mark.parametrize("n", [9, 10, 20, 33])
def test_gnm_initial_graph_has_exactly_m_edges_and_is_connected(n):
    env = make_env(n, params=RGCParams(initial_graph="gnm"))
    m = math.ceil(0.2 * n * (n - 1) / 2 - 1e-9)
    edge_counts = set()
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        adj = obs["adjacency"]
        assert adj.sum() == 2 * m
        assert nx.is_connected(nx.from_numpy_array(adj))
        edge_counts.add(int(adj.sum()))
    assert edge_counts == {2 * m}


def test_gnp_stays_the_default_and_varies_its_edge_count():
    default, gnp = make_env(20), make_env(20, params=RGCParams(initial_graph="gnp"))
    counts = set()
    for seed in range(6):
        a, _ = default.reset(seed=seed)
        np.testing.assert_array_equal(a["adjacency"], gnp.reset(seed=seed)[0]["adjacency"])
        np.testing.assert_array_equal(
            a["adjacency"], connected_erdos_renyi(np.random.default_rng(seed), 20, 0.2)
        )
        counts.add(int(a["adjacency"].sum()))
    assert len(counts) > 1  # G(N, p): the edge count is random


def test_bad_mode_arguments_are_refused():
    with pytest.raises(ValueError, match="action_mode"):
        make_env(8, action_mode="edges")
    with pytest.raises(ValueError, match="initial_graph"):
        RGCParams(initial_graph="ba")
    with pytest.raises(ValueError, match="num_nodes >= 9"):
        make_env(8, params=RGCParams(initial_graph="gnm"))
    with pytest.raises(TypeError, match="RGCParams"):
        make_env(8, params={"initial_graph": "gnm"})
