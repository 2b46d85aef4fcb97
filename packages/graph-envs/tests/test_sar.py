"""Search and Rescue: generator, dynamics invariants, rewards on hand-built graphs, partial
observability and the stochastic transition's frequencies."""

from __future__ import annotations

import graphwm_envs  # noqa: F401
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.core.graph_ops import within_hops
from graphwm_envs.sar.dynamics import visible_nodes
from graphwm_envs.sar.generator import num_survivors, reverse_index
from graphwm_envs.sar.types import SARState
from scipy.spatial import Delaunay

SCHEMA = {
    "node_continuous": ["stability"],
    "node_categorical": {"survivor_present": 2, "exit_node": 2, "current_location": 2},
    "graph_continuous": ["k"],
    "graph_categorical": {"escorting": 2},
    "ranges": {"stability": [0.0, 1.0], "k": [1.0, 1.0]},
}


def make_env(num_nodes: int = 20, **kwargs):
    return gym.make("graphenv/SAR-v0", num_nodes=num_nodes, **kwargs).unwrapped


def rng_whose_first_draw(loss: bool) -> np.random.Generator:
    """A Generator whose first ``random()`` is below 0.5 (the stability loss happens) or not."""
    for seed in range(100):
        if (np.random.default_rng(seed).random() < 0.5) == loss:
            return np.random.default_rng(seed)
    raise AssertionError("unreachable")


LOSS, NO_LOSS = True, False


def hand_state(
    edges: list[tuple[int, int]],
    stability: list[float],
    *,
    exit_node: int = 0,
    location: int | None = None,
    survivors: tuple[int, ...] = (),
    escorting: bool = False,
    num_initial: int | None = None,
    num_delivered: int = 0,
) -> SARState:
    """A SAR state on a hand-built graph (positions on a circle, only used for rendering)."""
    n = len(stability)
    adjacency = np.zeros((n, n), dtype=np.int8)
    for u, v in edges:
        adjacency[u, v] = adjacency[v, u] = 1
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(adjacency.sum(axis=1), out=indptr[1:])
    indices = np.concatenate([np.flatnonzero(row) for row in adjacency]).astype(np.int32)
    surv = np.zeros(n, dtype=bool)
    surv[list(survivors)] = True
    angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
    state = SARState(
        adjacency=adjacency,
        positions=np.stack([np.cos(angles), np.sin(angles)], axis=1),
        stability=np.array(stability, dtype=np.float64),
        survivors=surv,
        exit_node=exit_node,
        location=exit_node if location is None else location,
        escorting=escorting,
        num_initial_survivors=(
            num_initial if num_initial is not None else len(survivors) + int(escorting)
        ),
        num_delivered=num_delivered,
        exit_reachable=np.ones(n, dtype=bool),
        csr_indptr=indptr,
        csr_indices=indices,
        csr_reverse=reverse_index(indptr, indices),
        edge_alive=np.ones(len(indices), dtype=bool),
    )
    from graphwm_envs.sar.dynamics import reachable_mask

    state.exit_reachable = reachable_mask(state, exit_node)
    return state


def env_with(state: SARState, loss: bool = NO_LOSS, **kwargs):
    """An env in the hand-built ``state`` whose next stability-loss draw is ``loss``."""
    env = make_env(len(state.stability), **kwargs)
    env.reset(seed=0)
    env._state = state
    env.np_random = rng_whose_first_draw(loss)
    return env


# ------------------------------------------------------------------------- generator
def test_schema_is_the_contract_schema():
    assert make_env().schema.to_dict() == SCHEMA


@pytest.mark.parametrize(("n", "expected"), [(5, 1), (20, 6), (21, 6), (50, 15), (1000, 300)])
def test_number_of_survivors(n, expected):
    assert num_survivors(n) == expected


@pytest.mark.parametrize("n", [5, 8, 30])
def test_initial_state_matches_the_paper(n):
    env = make_env(n)
    for seed in range(15):
        obs, _ = env.reset(seed=seed)
        s = env.state
        # Delaunay triangulation of the stored points
        tri = Delaunay(s.positions)
        expected = np.zeros((n, n), dtype=np.int8)
        for simplex in tri.simplices:
            for a in range(3):
                for b in range(3):
                    if a != b:
                        expected[simplex[a], simplex[b]] = 1
        np.testing.assert_array_equal(s.adjacency, expected)
        assert ((s.positions >= 0) & (s.positions <= 1)).all()
        assert s.location == s.exit_node and not s.escorting
        assert s.stability[s.exit_node] == 1.0
        others = np.delete(s.stability, s.exit_node)
        assert ((others >= 0.5) & (others <= 1.0)).all()
        assert not s.survivors[s.exit_node]
        assert s.survivors.sum() == num_survivors(n) == s.num_initial_survivors
        assert s.exit_reachable.all()
        # observation: agent at the exit, k = 1, not escorting
        np.testing.assert_array_equal(obs["node_categorical"][:, 1], np.eye(n)[s.exit_node])
        np.testing.assert_array_equal(obs["node_categorical"][:, 2], np.eye(n)[s.exit_node])
        assert obs["graph_continuous"].tolist() == [1.0]
        assert obs["graph_categorical"].tolist() == [0]
        np.testing.assert_array_equal(obs["action_mask"], s.adjacency[s.exit_node])


def test_exit_and_survivor_placement_are_uniform():
    n, runs = 6, 1200
    env = make_env(n)
    exits, survivors = np.zeros(n), np.zeros(n)
    for seed in range(runs):
        env.reset(seed=seed)
        exits[env.state.exit_node] += 1
        survivors += env.state.survivors
    # each node is the exit w.p. 1/6: 4-sigma binomial band
    sd = np.sqrt(runs * (1 / n) * (1 - 1 / n))
    assert np.all(np.abs(exits - runs / n) < 4 * sd)
    # and holds a survivor w.p. (5/6) * (2/5) = 1/3 (num_survivors(6) = 2 of the 5 others)
    p = (1 - 1 / n) * num_survivors(n) / (n - 1)
    sd = np.sqrt(runs * p * (1 - p))
    assert np.all(np.abs(survivors - runs * p) < 4 * sd)


# --------------------------------------------------------------- dynamics invariants
@pytest.mark.parametrize("n", [5, 12, 40])
def test_dynamics_invariants_over_many_seeds(n):
    env = make_env(n)
    rng = np.random.default_rng(n)
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            before = env.clone_state().state
            if rng.random() < 0.9:
                action = env.sample_valid_action(rng)
            else:
                action = int(rng.integers(n))
            valid = bool(before.adjacency[before.location, action])
            obs, reward, terminated, truncated, info = env.step(action)
            s = env.state
            adj = obs["adjacency"]
            assert np.array_equal(adj, adj.T) and not np.diagonal(adj).any()
            np.testing.assert_array_equal(adj, s.adjacency)
            # edges only disappear, and only next to the visited node
            assert not (adj & (1 - before.adjacency)).any()
            removed = np.argwhere(before.adjacency & (1 - adj))
            assert info["edges_removed"] == len(removed) // 2
            if valid:
                assert s.location == action
                assert all(action in (u, v) for u, v in removed)
                # a removed edge collapsed: stability(u) + stability(v) < 1
                assert all(s.stability[u] + s.stability[v] < 1 for u, v in removed)
                # the visited node's surviving edges are stable enough
                nbrs = np.flatnonzero(adj[action])
                assert (s.stability[action] + s.stability[nbrs] >= 1).all()
            else:
                assert info["invalid_action"] and len(removed) == 0
                assert s.location == before.location
            # stability in [0, 1]; only the visited non-exit node may lose exactly 0.3 (or hit 0)
            assert ((s.stability >= 0) & (s.stability <= 1)).all()
            changed = np.flatnonzero(s.stability != before.stability)
            assert changed.size <= 1
            if changed.size:
                (u,) = changed
                assert valid and u == action and u != s.exit_node and info["stability_loss"]
                assert np.isclose(s.stability[u], max(0.0, before.stability[u] - 0.3))
            assert s.stability[s.exit_node] == 1.0
            # reachability cache agrees with a fresh computation
            from graphwm_envs.core.graph_ops import reachable_from

            np.testing.assert_array_equal(s.exit_reachable, reachable_from(adj, s.exit_node))
            # at most one survivor escorted; survivors only disappear
            assert not (s.survivors & ~before.survivors).any()
            assert s.survivors.sum() + int(s.escorting) + s.num_delivered == (
                s.num_initial_survivors
            )
            assert obs["graph_categorical"][0] == int(s.escorting)
            done = terminated or truncated
            if not done:  # a live state always has a move
                assert obs["action_mask"].any()


def test_collapsed_edges_stay_collapsed_in_csr_structure():
    env = make_env(30)
    rng = np.random.default_rng(3)
    env.reset(seed=3)
    for _ in range(40):
        _, _, term, trunc, _ = env.step(env.sample_valid_action(rng))
        s = env.state
        n = len(s.stability)
        rows = np.repeat(np.arange(n), np.diff(s.csr_indptr))
        rebuilt = np.zeros((n, n), dtype=np.int8)
        rebuilt[rows[s.edge_alive], s.csr_indices[s.edge_alive]] = 1
        np.testing.assert_array_equal(rebuilt, s.adjacency)
        if term or trunc:
            break


# ----------------------------------------------------------------- partial observability
def test_visible_nodes_matches_reference_within_hops():
    env = make_env(40)
    rng = np.random.default_rng(0)
    for seed in range(5):
        env.reset(seed=seed)
        for _ in range(30):
            s = env.state
            np.testing.assert_array_equal(visible_nodes(s), within_hops(s.adjacency, s.location, 2))
            _, _, term, trunc, _ = env.step(env.sample_valid_action(rng))
            if term or trunc:
                break


def test_hidden_survivors_never_leak():
    env = make_env(40)
    rng = np.random.default_rng(1)
    hidden_seen = 0
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            s = env.state
            window = within_hops(s.adjacency, s.location, 2)
            shown = obs["node_categorical"][:, 0].astype(bool)
            np.testing.assert_array_equal(shown, s.survivors & window)
            hidden_seen += int((s.survivors & ~window).sum())
            # moving / adding / removing survivors outside the window changes nothing observed
            snap = env.clone_state()
            outside = np.flatnonzero(~window)
            if outside.size:
                env.state.survivors[outside] = rng.random(outside.size) < 0.5
                other = env._observation()
                for key in obs:
                    np.testing.assert_array_equal(obs[key], other[key], err_msg=key)
            env.restore_state(snap)
            obs, _, terminated, truncated, _ = env.step(env.sample_valid_action(rng))
            done = terminated or truncated
    assert hidden_seen > 0  # the test exercised hidden survivors


def test_clone_keeps_the_hidden_truth():
    env = make_env(40)
    env.reset(seed=2)
    snap = env.clone_state()
    obs = env.restore_state(snap)
    assert snap.state.survivors.sum() == num_survivors(40)
    assert obs["node_categorical"][:, 0].sum() < snap.state.survivors.sum()


# ------------------------------------------------------------------ hand-built rewards
# Path 0 - 1 - 2 - 3 - 4 with the exit at 0.
PATH = [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_plain_move_costs_one():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], survivors=(3,))
    env = env_with(state)
    obs, reward, term, trunc, info = env.step(1)
    assert (reward, term, trunc) == (-1.0, False, False)
    assert env.state.location == 1 and not info["collected"]
    assert not info["stability_loss"] and env.state.stability[1] == 0.9


def test_collect_gives_plus_one():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1, survivors=(2, 4))
    env = env_with(state)
    obs, reward, term, _, info = env.step(2)
    assert reward == -1.0 + 1.0 and not term and info["collected"]
    assert env.state.escorting and not env.state.survivors[2]
    assert obs["graph_categorical"].tolist() == [1]
    assert obs["node_categorical"][2, 0] == 0  # the collected survivor left the node


def test_escorting_agent_cannot_collect_a_second_survivor():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1, survivors=(2,), escorting=True)
    env = env_with(state)
    _, reward, term, _, info = env.step(2)
    assert reward == -1.0 and not term and not info["collected"]
    assert env.state.survivors[2] and env.state.escorting  # the survivor stays put


def test_deliver_gives_plus_ten():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1, survivors=(3,), escorting=True)
    env = env_with(state)
    _, reward, term, _, info = env.step(0)
    assert reward == -1.0 + 10.0 and not term and info["delivered"]
    assert not env.state.escorting and env.state.num_delivered == 1


def test_last_delivery_adds_five_and_terminates():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1, escorting=True, num_initial=2,
                       num_delivered=1)  # fmt: skip
    env = env_with(state)
    _, reward, term, trunc, info = env.step(0)
    assert reward == -1.0 + 10.0 + 5.0 and term and not trunc
    assert info["outcome"] == "all_rescued"


def test_stranded_agent_pays_thirty_plus_five_per_undelivered():
    # agent moves from 1 to 2 (stability 0.5 -> 0.2); neighbours 0.6 < 0.8: both edges collapse
    state = hand_state(PATH, [1, 0.6, 0.5, 0.6, 0.9], location=1, survivors=(4,), escorting=True)
    env = env_with(state, loss=LOSS)
    obs, reward, term, _, info = env.step(2)
    assert info["stability_loss"] and np.isclose(env.state.stability[2], 0.2)
    assert info["edges_removed"] == 2 and not obs["adjacency"][2].any()
    remaining = 2  # the escorted one and the one on node 4
    assert reward == -1.0 - 30.0 - 5.0 * remaining and term
    assert info["outcome"] == "stranded"
    assert not env._mask().any()  # no neighbour left ...
    assert obs["action_mask"].all()  # ... so the published terminal mask marks every node
    assert env.action_masks().all()


def test_collect_then_stranded_counts_the_escorted_survivor():
    state = hand_state(PATH, [1, 0.6, 0.5, 0.6, 0.9], location=1, survivors=(2, 4))
    env = env_with(state, loss=LOSS)
    _, reward, term, _, info = env.step(2)
    assert info["collected"] and term and info["outcome"] == "stranded"
    assert reward == -1.0 + 1.0 - 30.0 - 5.0 * 2


def test_unreachable_survivors_penalty_when_not_escorting():
    # agent walks 2 -> 1; node 1 loses stability and its edge to 2 collapses; survivor at 3 is
    # cut off from the exit, the agent (at 1) still reaches it.
    state = hand_state(PATH, [1, 0.7, 0.55, 0.9, 0.9], location=2, survivors=(3,))
    env = env_with(state, loss=LOSS)
    _, reward, term, _, info = env.step(1)
    assert np.isclose(env.state.stability[1], 0.4)
    assert info["edges_removed"] == 1  # (1, 2): 0.4 + 0.55 < 1; (0, 1): 0.4 + 1 >= 1
    assert term and info["outcome"] == "survivors_unreachable"
    assert reward == -1.0 - 5.0 * 1


def test_no_unreachable_penalty_while_escorting():
    # same collapse, but the agent escorts a survivor it can still deliver
    state = hand_state(PATH, [1, 0.7, 0.55, 0.9, 0.9], location=2, survivors=(3,), escorting=True)
    env = env_with(state, loss=LOSS)
    _, reward, term, _, info = env.step(1)
    assert reward == -1.0 and not term and info["outcome"] == "none"


def test_no_stability_loss_at_the_exit_and_exit_edges_never_collapse():
    state = hand_state(PATH, [1, 0.0, 0.9, 0.9, 0.9], location=1, survivors=(3,))
    env = env_with(state, loss=LOSS)
    _, reward, term, _, info = env.step(0)
    assert env.state.stability[0] == 1.0 and not info["stability_loss"]
    assert env.state.adjacency[0, 1] == 1  # 1.0 + 0.0 is not < 1
    assert reward == -1.0 and not term


def test_invalid_action_is_a_noop_that_costs_one():
    state = hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1, survivors=(3,))
    env = env_with(state, loss=LOSS)
    before = env.clone_state()
    obs, reward, term, trunc, info = env.step(3)  # not adjacent to 1
    assert info["invalid_action"] and reward == -1.0 and not term and not trunc
    after = env.state
    for name in ("adjacency", "stability", "survivors", "edge_alive"):
        np.testing.assert_array_equal(getattr(after, name), getattr(before.state, name))
    assert after.location == 1 and env.elapsed_steps == before.steps + 1
    raising = env_with(
        hand_state(PATH, [1, 0.9, 0.9, 0.9, 0.9], location=1), invalid_action="raise"
    )
    with pytest.raises(ValueError, match="mask"):
        raising.step(3)


def test_truncation_after_n_times_initial_survivors():
    env = make_env(10)
    env.reset(seed=0)
    limit = 10 * num_survivors(10)
    env._steps = limit - 1
    # move back and forth between the exit and a neighbour: never terminal without loss
    env.np_random = rng_whose_first_draw(NO_LOSS)
    target = int(np.flatnonzero(env.state.adjacency[env.state.exit_node])[0])
    _, _, term, trunc, _ = env.step(target)
    assert trunc and not term and env.elapsed_steps == limit


# ------------------------------------------------------------- stochastic transitions
SAMPLES = 600  # reseeded restores per test; 4 binomial sd ~ 49 around 300


def path_snapshot(stability: list[float]):
    """Env and snapshot on PATH at node 1, one survivor at 4, with the given stabilities."""
    env = env_with(hand_state(PATH, stability, location=1, survivors=(4,)))
    env.np_random = np.random.default_rng(0)
    return env, env.clone_state()


def test_reseeded_restores_match_the_stability_loss_probability():
    """Restores with different seeds: the 0.5 loss shows up at the binomial rate."""
    env, snap = path_snapshot([1, 0.9, 0.65, 0.9, 0.9])
    samples = SAMPLES
    losses = collapses = 0
    next_states = set()
    for seed in range(samples):
        obs = env.restore_state(snap, seed=seed)
        obs, _, _, _, info = env.step(2)
        losses += info["stability_loss"]
        # loss: 0.65 -> 0.35; edge (1, 2) survives (0.9 + 0.35), edge (2, 3) too: no collapse
        collapses += info["edges_removed"]
        next_states.add(round(float(obs["node_continuous"][2, 0]), 6))
    sd = np.sqrt(samples * 0.25)
    assert abs(losses - samples / 2) < 4 * sd
    assert next_states == {0.65, 0.35}
    assert collapses == 0


def test_reseeded_restores_collapse_frequency():
    """With a fragile neighbourhood, the next graph is the collapsed one w.p. 0.5."""
    # visiting 2 (0.6): a loss gives 0.3; edges to 1 (0.6) and 3 (0.65) collapse, none otherwise
    env, snap = path_snapshot([1, 0.6, 0.6, 0.65, 0.9])
    samples = SAMPLES
    outcomes = {}
    for seed in range(samples):
        env.restore_state(snap, seed=seed)
        obs, reward, term, *_ = env.step(2)
        key = (int(obs["adjacency"].sum()) // 2, reward, term)
        outcomes[key] = outcomes.get(key, 0) + 1
    assert set(outcomes) == {(4, -1.0, False), (2, -1.0 - 30.0 - 5.0, True)}
    sd = np.sqrt(samples * 0.25)
    assert abs(outcomes[(2, -36.0, True)] - samples / 2) < 4 * sd
    # seed=None replays the snapshot's own RNG: always the same next state
    replays = set()
    for _ in range(5):
        env.restore_state(snap)
        obs, *_ = env.step(2)
        replays.add(obs["adjacency"].tobytes())
    assert len(replays) == 1


def test_render_uses_the_delaunay_coordinates():
    env = make_env(12, render_mode="rgb_array")
    env.reset(seed=0)
    np.testing.assert_array_equal(env._node_positions(), env.state.positions)
    image = env.render()
    assert image.dtype == np.uint8 and image.shape[2] == 3
