"""The graph-agent yardstick script: batched evaluation and the table's numbers."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

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


def test_cli_overrides_reach_the_trained_agent(tmp_path):
    import argparse

    import torch
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    bench = load_script()
    settings = bench.parse_settings(["OD=0.9"], ["OD=on", "CF=off"])
    args = argparse.Namespace(
        envs=["graphenv/OD-v0", "graphenv/CF-v0", "graphenv/RGC-v0"],
        seeds=1,
        seeds_50=0,
        first_seed=0,
        first_seed_50=0,
        steps=10,
        episodes=1,
        out_dir=Path("unused"),
    )
    jobs = {job[1]: job for job in bench.train_jobs(args, settings)}
    # the job's trailing (gamma, reward scaling) build the agent that would be trained
    for env_id, gamma, scaling in (
        ("graphenv/OD-v0", 0.9, True),  # both overridden (defaults: 0.98, off)
        ("graphenv/CF-v0", 0.99, False),  # scaling overridden (default: on)
        ("graphenv/RGC-v0", 0.99, True),  # untouched defaults
    ):
        model = bench.make_agent(env_id, 10, 0, *jobs[env_id][-2:])
        assert model.gamma == gamma
        assert isinstance(model.get_env(), VecNormalize) is scaling
        assert bench.agent_settings(model) == {"gamma": gamma, "reward_scaling": scaling}
        if scaling:
            assert model.get_env().gamma == gamma  # the return's running std uses it too
    # end to end: one rollout of a train job records what its model trained with
    od_job = jobs["graphenv/OD-v0"]
    (row,) = bench.train_job("graphenv/OD-v0", 10, 0, 1, 2, str(tmp_path), *od_job[-2:])["results"]
    assert (row["gamma"], row["reward_scaling"], row["steps"]) == (0.9, True, 8 * 128)
    with pytest.raises(ValueError, match="unknown env"):
        bench.parse_settings(["XX=0.9"], [])
    with pytest.raises(ValueError, match="on or off"):
        bench.parse_settings([], ["OD=yes"])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        bench.parse_settings(["OD=1.5"], [])


def test_report_states_each_rows_settings():
    bench = load_script()
    row = {"kind": "train", "eval_nodes": 20, "train_nodes": 20, "returns": [1.0], "curve": []}
    results = [
        {**row, "env": "OD", "seed": 0, "steps": 10240, "gamma": 0.99, "reward_scaling": True},
        {**row, "env": "OD", "seed": 1, "steps": 40960, "gamma": 0.99, "reward_scaling": True},
        {**row, "env": "OD", "seed": 0, "steps": 10240, "gamma": 0.98, "reward_scaling": False},
        {**row, "env": "CF", "seed": 0, "steps": 10240},  # an old row without the fields
    ]
    report = bench.format_report(results, 10240, 1)
    assert (
        "CF N = 20: 10,240; OD N = 20: 10,240 (gamma 0.98, reward scaling off), "
        "10,240 / 40,960 (gamma 0.99, reward scaling on)"
    ) in report


def test_report_without_random_jobs_still_has_the_agent_rows():
    """--no-random on one env: the table keeps the graph agent's row (it printed none)."""
    bench = load_script()
    row = {"kind": "train", "env": "RGC", "train_nodes": 20, "eval_nodes": 20, "curve": []}
    results = [{**row, "seed": 0, "returns": [0.4, 0.5]}, {**row, "seed": 1, "returns": [0.6]}]
    report = bench.format_report(results, 1000, 2)
    (line,) = [ln for ln in report.splitlines() if ln.startswith("| RGC | 20 |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "-"  # no random row: its cell and its z are left empty
    assert cells[5].startswith("0.500 ± ") and "(seeds: 0.450, 0.600)" in cells[5]
    assert cells[6] == "-"
    assert not [ln for ln in report.splitlines() if ln.startswith("| RGC | 50 |")]


@pytest.mark.parametrize(
    ("argv", "seeds_20", "seeds_50"),
    [
        ([], [0, 1, 2], [0, 1]),
        (["--first-seed", "101", "--seeds", "2"], [101, 102], [101, 102]),
        (["--first-seed", "101", "--first-seed-50", "1"], [101, 102, 103], [1, 2]),
    ],
)
def test_first_seed_chooses_the_seeds_at_every_size(argv, seeds_20, seeds_50):
    import argparse

    bench = load_script()
    args = argparse.Namespace(
        envs=["graphenv/RGC-v0"], steps=10, episodes=1, out_dir=Path("out"),
        seeds=3, seeds_50=2, first_seed=0, first_seed_50=None,
    )  # fmt: skip
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        setattr(args, flag.removeprefix("--").replace("-", "_"), int(value))
    settings = bench.parse_settings([], [])
    jobs = bench.train_jobs(args, settings)
    by_size = {n: [job[3] for job in jobs if job[2] == n] for n in (20, 50)}
    assert by_size == {20: seeds_20, 50: seeds_50}
