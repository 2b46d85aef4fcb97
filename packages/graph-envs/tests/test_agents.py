"""The graph agents (graphwm_envs.agents): permutation equivariance, masking, any N, save/load,
and learning that needs message passing."""

from __future__ import annotations

import subprocess
import sys
import warnings

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("sb3_contrib")

from graphwm_envs.agents import (  # noqa: E402
    GraphPolicy,
    MaskableGraphPolicy,
    load_graph_agent,
    make_graph_agent,
)

CASES = [
    ("graphenv/RGC-v0", {}),
    ("graphenv/RGC-v0", {"action_mode": "pair"}),
    ("graphenv/OD-v0", {}),
    ("graphenv/SAR-v0", {}),
    ("graphenv/CF-v0", {}),
]
IDS = ["RGC", "RGC-pair", "OD", "SAR", "CF"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _env(env_id: str, n: int, **kwargs) -> gym.Env:
    return gym.make(env_id, num_nodes=n, **kwargs).unwrapped


def _agent(env, algo: str = "MaskablePPO", **policy_kwargs):
    from stable_baselines3.common.logger import Logger

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_graph_agent(
            env,
            algo=algo,
            n_steps=64,
            batch_size=64,
            n_epochs=1,
            seed=0,
            device="cpu",
            policy_kwargs=policy_kwargs or None,
        )
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _tensor_obs(obs: dict) -> dict:
    return {k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()}


def _permute(obs: dict, perm: np.ndarray) -> dict:
    """The same graph with node i renamed to position inv[i] (new node p is old perm[p])."""
    out = dict(obs)
    out["adjacency"] = obs["adjacency"][np.ix_(perm, perm)]
    out["action_mask"] = obs["action_mask"][perm]
    for key in ("node_continuous", "node_categorical"):
        if key in obs:
            out[key] = obs[key][perm]
    return out


def _advance(env, steps: int, seed: int) -> dict:
    """An observation a few random steps into an episode (edges, features, masks non-trivial)."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(env.sample_valid_action(rng))
        if terminated or truncated:
            obs, _ = env.reset(seed=seed + 1)
    return obs


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_permuting_nodes_permutes_logits_and_keeps_the_value(env_id, kwargs):
    n = 9
    env = _env(env_id, n, **kwargs)
    policy = _agent(env).policy
    obs = _advance(env, 3, seed=1)
    perm = np.random.default_rng(0).permutation(n)
    with torch.no_grad():
        logits, value = policy.net(_tensor_obs(obs))
        plogits, pvalue = policy.net(_tensor_obs(_permute(obs, perm)))
    if kwargs.get("action_mode") == "pair":
        # pair (perm[a], perm[b]) of the original is pair (a, b) of the permuted graph
        rows, cols = np.triu_indices(n, 1)
        index = {(i, j): p for p, (i, j) in enumerate(zip(rows, cols, strict=True))}
        expected = torch.stack(
            [
                logits[0, index[tuple(sorted((perm[a], perm[b])))]]
                for a, b in zip(rows, cols, strict=True)
            ]
        )
        torch.testing.assert_close(plogits[0], expected, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(plogits[0], logits[0, perm], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pvalue, value, rtol=1e-5, atol=1e-5)
    # the scores are not constant: the check above compares informative numbers
    assert logits.std() > 1e-4


@pytest.mark.parametrize("algo", ["MaskablePPO", "PPO"])
@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_masked_actions_are_never_taken(env_id, kwargs, algo):
    env = _env(env_id, 10, **kwargs)
    model = _agent(env, algo=algo)
    assert isinstance(model.policy, MaskableGraphPolicy if algo == "MaskablePPO" else GraphPolicy)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(40):
        mask = env.action_masks().reshape(-1, 10) if not kwargs else env.action_masks()
        for deterministic in (False, True):
            action, _ = model.predict(obs, deterministic=deterministic)  # mask from obs only
            if kwargs:  # pair mode: index into the addable pairs
                assert mask[int(action)]
            else:
                chosen = np.atleast_1d(action)
                assert all(mask[0][int(a)] for a in chosen)
                if deterministic and chosen.size > 1 and mask[0].sum() >= chosen.size:
                    assert len(set(chosen.tolist())) == chosen.size  # the k best distinct nodes
        obs, _, terminated, truncated, _ = env.step(env.sample_valid_action(rng))
        if terminated or truncated:
            obs, _ = env.reset()


@pytest.mark.parametrize("algo", ["MaskablePPO", "PPO"])
@pytest.mark.parametrize(
    ("env_id", "n", "slots"), [("graphenv/OD-v0", 20, 1), ("graphenv/OD-v0", 50, 3)]
)
def test_rollout_actions_get_one_log_prob_each(env_id, n, slots, algo):
    """PPO's update passes MultiDiscrete actions as (batch, k), also for k = 1 (OD at N <= 20):
    each gets the sum over its slots of log softmax(node scores) at the chosen node, from its
    own observation (not a (batch, batch) broadcast that mixes observations)."""
    env = _env(env_id, n)
    assert env.action_space.shape == (slots,)
    model = _agent(env, algo=algo)
    observations = [_advance(env, 3 * i, seed=i) for i in range(4)]
    batch = {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}
    actions = torch.as_tensor(np.random.default_rng(0).integers(0, n, size=(4, slots)))
    with torch.no_grad():
        _, log_prob, entropy = model.policy.evaluate_actions(batch, actions)
        scores, _ = model.policy.net(batch)
    expected = torch.log_softmax(scores, -1).gather(1, actions).sum(1)
    assert log_prob.shape == (4,) and entropy.shape == (4,)
    torch.testing.assert_close(log_prob, expected)
    # the observations differ, so a broadcast mixing them would give other numbers
    assert scores.std(0).max() > 1e-4


def test_sar_sampling_respects_the_sparse_mask():
    """SAR allows only the agent's neighbours: many samples, none outside the mask."""
    env = _env("graphenv/SAR-v0", 20)
    model = _agent(env)
    obs, _ = env.reset(seed=3)
    obs_t, _ = model.policy.obs_to_tensor({k: np.repeat(v[None], 500, 0) for k, v in obs.items()})
    with torch.no_grad():
        actions = model.policy.get_distribution(obs_t).get_actions().numpy()
    allowed = set(np.flatnonzero(obs["action_mask"]).tolist())
    assert set(actions.tolist()) <= allowed and len(allowed) < 20


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_the_same_weights_act_at_n20_and_n50(env_id, kwargs, tmp_path):
    small, big = _env(env_id, 20, **kwargs), _env(env_id, 50, **kwargs)
    model = _agent(small)
    model.save(tmp_path / "agent")
    loaded = load_graph_agent(tmp_path / "agent", big, device="cpu")
    assert type(loaded) is type(model)
    assert loaded.action_space == big.action_space
    for (name, a), (_, b) in zip(
        model.policy.state_dict().items(), loaded.policy.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    obs, _ = big.reset(seed=0)
    action, _ = loaded.predict(obs, action_masks=big.action_masks(), deterministic=True)
    assert big.action_space.contains(np.asarray(action, dtype=big.action_space.dtype))
    # the loaded policy computes exactly what the N = 20 network computes on the N = 50 graph
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.policy.net(_tensor_obs(obs)), model.policy.net(_tensor_obs(obs))
        )


@pytest.mark.parametrize("algo", ["MaskablePPO", "PPO"])
def test_save_load_round_trip_gives_the_same_policy(algo, tmp_path):
    env = _env("graphenv/OD-v0", 12)
    model = _agent(env, algo=algo, hidden_dim=16, num_layers=2, conv="gin")
    model.learn(64)  # trained weights, not the initial ones
    model.save(tmp_path / "agent.zip")
    loaded = load_graph_agent(tmp_path / "agent.zip", env, device="cpu")
    assert (loaded.policy.hidden_dim, loaded.policy.num_layers, loaded.policy.conv) == (
        16,
        2,
        "gin",
    )
    obs = _advance(env, 5, seed=2)
    obs_t, _ = model.policy.obs_to_tensor(obs)
    actions = torch.as_tensor([[3]])  # (batch, k): one slot at N = 12
    with torch.no_grad():
        v1, lp1, e1 = model.policy.evaluate_actions(obs_t, actions)
        v2, lp2, e2 = loaded.policy.evaluate_actions(obs_t, actions)
    torch.testing.assert_close((v1, lp1, e1), (v2, lp2, e2))


def test_a_non_graph_file_is_refused(tmp_path):
    from sb3_contrib import MaskablePPO

    env = _env("graphenv/CF-v0", 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MaskablePPO("MultiInputPolicy", env, n_steps=64, device="cpu").save(tmp_path / "mlp")
    with pytest.raises(ValueError, match="does not hold a graph agent"):
        load_graph_agent(tmp_path / "mlp.zip", env)


def test_unsupported_action_space_is_refused():
    env = _env("graphenv/CF-v0", 8)
    env.action_space = spaces.Discrete(7)
    with pytest.raises(ValueError, match="Discrete\\(N\\)"):
        _agent(env)


def test_a_non_graph_observation_space_is_refused():
    env = _env("graphenv/CF-v0", 8)
    env.observation_space = spaces.Dict({"x": spaces.Box(0.0, 1.0, (8, 2))})
    with pytest.raises(ValueError, match="graphwm_envs observation space .*'adjacency'"):
        _agent(env)


class MarkedNeighbourEnv(gym.Env):
    """One step: pick a neighbour of the marked node (reward 1, else 0).

    The graph is a random cycle, so every node has degree 2 and, apart from the marked node,
    the same inputs: only message passing can tell a neighbour of the marked node (random
    choice: 2 / (N - 1))."""

    def __init__(self, n: int = 10) -> None:
        self.n = n
        self.observation_space = spaces.Dict(
            {
                "adjacency": spaces.MultiBinary((n, n)),
                "node_categorical": spaces.Box(0, 1, (n, 1), np.int64),
                "action_mask": spaces.MultiBinary(n),
            }
        )
        self.action_space = spaces.Discrete(n)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        order = self.np_random.permutation(self.n)
        self.adj = np.zeros((self.n, self.n), np.int8)
        self.adj[order, np.roll(order, 1)] = self.adj[np.roll(order, 1), order] = 1
        self.marked = int(self.np_random.integers(self.n))
        self.mask = np.ones(self.n, bool)
        self.mask[self.marked] = False
        return self._obs(), {}

    def _obs(self):
        marked = np.zeros((self.n, 1), np.int64)
        marked[self.marked] = 1
        return {
            "adjacency": self.adj.copy(),
            "node_categorical": marked,
            "action_mask": self.mask.astype(np.int8),
        }

    def action_masks(self):
        return self.mask.copy()

    def step(self, action):
        return self._obs(), float(self.adj[self.marked, int(action)]), True, False, {}


def _hit_rate(num_layers: int) -> float:
    from stable_baselines3.common.logger import Logger

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_graph_agent(
            MarkedNeighbourEnv(),
            n_steps=256,
            batch_size=64,
            n_epochs=4,
            learning_rate=1e-3,
            seed=0,
            device="cpu",
            policy_kwargs=dict(num_layers=num_layers, hidden_dim=32),
        )
        model.set_logger(Logger(folder=None, output_formats=[]))
        model.learn(2048)
    env, hits = MarkedNeighbourEnv(), 0.0
    for episode in range(200):
        obs, _ = env.reset(seed=10_000 + episode)
        action, _ = model.predict(obs, deterministic=True)
        hits += env.step(action)[1]
    return hits / 200


def test_learning_needs_message_passing():
    """Measured: 1.00 with two layers, 0.23 without (chance 2/9 = 0.22), 2,048 steps."""
    assert _hit_rate(2) > 0.9
    assert _hit_rate(0) < 0.4


def test_importing_the_envs_does_not_import_torch():
    code = (
        "import sys, gymnasium as gym, graphwm_envs\n"
        "for env_id in graphwm_envs.ENV_IDS:\n"
        "    env = gym.make(env_id, num_nodes=8); env.reset(seed=0); env.unwrapped.action_masks()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_action_masks_before_reset_is_a_clear_error(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    for call in (env.action_masks, env.node_mask):
        with pytest.raises(RuntimeError, match="call reset\\(\\) before"):
            call()


def test_rgc_pair_masks_before_reset_are_a_clear_error():
    env = gym.make("graphenv/RGC-v0", num_nodes=8, action_mode="pair").unwrapped
    with pytest.raises(RuntimeError, match="call reset\\(\\) before action_masks"):
        env.action_masks()


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_reset_info_horizon_bounds_the_episode(env_id):
    """``info["horizon"]`` is the most steps an episode lasts; with no-op-ish play (a fixed
    harmless policy: the random one) the truncating envs reach it exactly."""
    env = gym.make(env_id, num_nodes=10)
    rng = np.random.default_rng(0)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        horizon = info["horizon"]
        expected = {"graphenv/RGC-v0": 45, "graphenv/OD-v0": 50, "graphenv/CF-v0": 5}
        if env_id in expected:
            assert horizon == expected[env_id]
        else:  # SAR: N x initial survivors
            assert horizon == 10 * env.unwrapped.state.num_initial_survivors
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.unwrapped.sample_valid_action(rng))
            steps += 1
            done = terminated or truncated
            if truncated:
                assert steps == horizon
        assert steps <= horizon
