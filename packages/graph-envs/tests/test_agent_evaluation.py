"""The packaged evaluation protocol of docs/agents.md (``graphwm_envs.agents.evaluate_agent``),
the ImportError without the ``[agents]`` extra, and a quiet import (no torch_geometric
deprecation warning)."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys

import graphwm_envs  # noqa: F401
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch_geometric")
pytest.importorskip("sb3_contrib")


def _one_predict_per_step(model, env_id, episodes, seed=0, **kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    out = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + reward, terminated or truncated
        out.append(total)
    return out


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [("graphenv/OD-v0", {}), ("graphenv/RGC-v0", {"action_mode": "pair"})],
)
def test_batched_evaluation_equals_one_predict_per_step(env_id, kwargs):
    import torch
    from graphwm_envs.agents import agent_returns, make_graph_agent

    torch.set_num_threads(1)
    env = gym.make(env_id, num_nodes=10, **kwargs).unwrapped
    model = make_graph_agent(env, n_steps=64, seed=0, device="cpu")
    batched = agent_returns(model, env_id, episodes=4, num_nodes=10, **kwargs)
    single = _one_predict_per_step(model, env_id, 4, num_nodes=10, **kwargs)
    np.testing.assert_allclose(batched, single)
    assert len(set(single)) > 1  # distinct episodes, not one repeated number


class _Recorder:
    """An agent that takes the first valid node and records how it was asked."""

    def __init__(self) -> None:
        self.first_adjacency: list[np.ndarray] = []
        self.deterministic: set[bool] = set()

    def predict(self, obs, action_masks, deterministic):
        self.deterministic.add(deterministic)
        if not self.first_adjacency:
            self.first_adjacency = list(obs["adjacency"])
        np.testing.assert_array_equal(action_masks, obs["action_mask"].astype(bool))
        return np.array([np.flatnonzero(m)[0] for m in action_masks]), None


def test_evaluate_agent_is_the_documented_protocol():
    """Deterministic actions, episode e on reset(seed=seed + e) (the yardsticks' initial
    states), mean and standard error of the returns."""
    from graphwm_envs.agents import agent_returns, evaluate_agent

    agent = _Recorder()
    mean, se = evaluate_agent(agent, "graphenv/SAR-v0", episodes=3, seed=5, num_nodes=8)
    assert agent.deterministic == {True}
    env = gym.make("graphenv/SAR-v0", num_nodes=8).unwrapped
    for e, adjacency in enumerate(agent.first_adjacency):
        obs, _ = env.reset(seed=5 + e)
        np.testing.assert_array_equal(adjacency, obs["adjacency"])
    returns = []
    for e in range(3):
        obs, _ = env.reset(seed=5 + e)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
            total, done = total + r, term or trunc
        returns.append(total)
    assert len(set(returns)) > 1
    assert mean == pytest.approx(np.mean(returns))
    assert se == pytest.approx(np.std(returns, ddof=1) / math.sqrt(3))
    np.testing.assert_array_equal(
        agent_returns(_Recorder(), "graphenv/SAR-v0", episodes=3, seed=5, num_nodes=8), returns
    )
    sampled = _Recorder()
    agent_returns(sampled, "graphenv/SAR-v0", episodes=1, deterministic=False, num_nodes=8)
    assert sampled.deterministic == {False}
    with pytest.raises(ValueError, match="episodes"):
        evaluate_agent(agent, "graphenv/SAR-v0", episodes=0, num_nodes=8)


def _import_agents_without(monkeypatch, missing: str) -> ImportError:
    """Import graphwm_envs.agents afresh as if ``missing`` were not installed."""
    for name in [m for m in sys.modules if m.startswith("graphwm_envs.agents")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # "import missing" raises
    with pytest.raises(ImportError) as info:
        importlib.import_module("graphwm_envs.agents")
    return info.value


@pytest.mark.parametrize("missing", ["torch", "sb3_contrib", "torch_geometric"])
def test_a_missing_extra_names_the_install_command(monkeypatch, missing):
    err = _import_agents_without(monkeypatch, missing)
    assert 'pip install "graphwm-envs[agents]"' in str(err)
    assert repr(missing) in str(err)
    assert isinstance(err.__cause__, ModuleNotFoundError)


def test_the_agents_import_prints_no_torch_jit_deprecation():
    """torch_geometric's ``torch.jit.script is deprecated`` FutureWarning, shown even with
    every warning enabled: not printed by ``import graphwm_envs.agents`` (a fresh process)."""
    code = "import graphwm_envs.agents; import torch_geometric.nn"
    res = subprocess.run(
        [sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "is deprecated" not in res.stderr, res.stderr[-2000:]
