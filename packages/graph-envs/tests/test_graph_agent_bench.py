"""The graph-agent yardstick script: batched evaluation and the table's numbers."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch_geometric")
pytest.importorskip("sb3_contrib")

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "graph_agent.py"


def load_script():
    spec = importlib.util.spec_from_file_location("graph_agent_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["graph_agent_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("env_id", ["graphenv/OD-v0", "graphenv/RGC-v0"])
def test_batched_evaluation_equals_one_predict_per_step(env_id):
    import torch
    from graphwm_envs.agents import make_graph_agent

    torch.set_num_threads(1)
    bench = load_script()
    env = gym.make(env_id, **bench.env_kwargs(env_id, 10)).unwrapped
    model = make_graph_agent(env, n_steps=64, seed=0, device="cpu")
    batched = bench.evaluate(model, env_id, 10, 4)
    single = []
    for episode in range(4):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + reward, terminated or truncated
        single.append(total)
    np.testing.assert_allclose(batched, single)
    assert len(set(single)) > 1  # distinct episodes, not one repeated number


def test_report_numbers():
    bench = load_script()
    rnd = [0.0, 1.0, 2.0, 3.0]
    seed0, seed1 = [2.0, 3.0, 4.0, 5.0], [4.0, 5.0, 6.0, 7.0]
    results = [
        {"kind": "random", "env": "CF", "eval_nodes": 20, "returns": rnd},
        {
            "kind": "train",
            "env": "CF",
            "train_nodes": 20,
            "eval_nodes": 20,
            "seed": 0,
            "returns": seed0,
            "curve": [],
        },
        {
            "kind": "train",
            "env": "CF",
            "train_nodes": 20,
            "eval_nodes": 20,
            "seed": 1,
            "returns": seed1,
            "curve": [],
        },
        {"kind": "throughput", "env": "CF", "policy": "mlp", "rate": 300.0},
        {"kind": "throughput", "env": "CF", "policy": "graph", "rate": 120.0},
    ]
    report = bench.format_report(results, 1000, 4)
    row = next(line for line in report.splitlines() if line.startswith("| CF | 20 |"))
    pooled = np.array(seed0 + seed1)
    g_se = pooled.std(ddof=1) / math.sqrt(8)
    r_se = np.std(rnd, ddof=1) / 2
    z = (pooled.mean() - 1.5) / math.sqrt(g_se**2 + r_se**2)
    assert f"{pooled.mean():.3f} ± {g_se:.3f} (seeds: 3.500, 5.500)" in row
    assert f"{z:+.1f}" in row
    z_greedy = (pooled.mean() + 0.732) / math.sqrt(g_se**2 + 0.015**2)  # CF's greedy at N = 20
    assert f"| {z:+.1f} | {z_greedy:+.1f} | (same) |" in row
    assert "| CF | 300 | 120 | 2.50 |" in report


def test_compact_curve_window_means():
    bench = load_script()
    curve = [(3, 1.0), (8, 3.0), (9, 5.0), (16, 2.0), (17, 4.0)]
    compact = bench.compact_curve(curve, window=8)
    # windows (0, 8], (8, 16], (16, 24]: means over the episodes that ended inside each
    assert compact == [[8, 2.0, 2], [16, 3.5, 2], [17, 4.0, 1]]
    # compacting again, or into wider windows, keeps the episode-weighted means
    assert bench.compact_curve(compact, window=8) == compact
    assert bench.compact_curve(compact, window=16) == [[16, 2.75, 4], [17, 4.0, 1]]


def test_report_states_each_budget():
    bench = load_script()
    row = {"kind": "train", "eval_nodes": 20, "returns": [1.0, 2.0], "curve": []}
    results = [
        {**row, "env": "RGC", "train_nodes": 20, "seed": 0, "steps": 40960},
        {**row, "env": "RGC", "train_nodes": 50, "eval_nodes": 50, "seed": 0, "steps": 10240},
        {"kind": "random", "env": "RGC", "eval_nodes": 20, "returns": [0.0, 1.0]},
    ]
    report = bench.format_report(results, 999, 2)
    assert "RGC N = 20: 40,960; RGC N = 50: 10,240" in report
    assert "999" not in report
