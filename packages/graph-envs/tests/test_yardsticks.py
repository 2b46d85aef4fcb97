"""The yardstick script: its table holds the policies' evaluated returns."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
from graphwm_envs.heuristics import evaluate_heuristic, greedy_action, random_action

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "yardsticks.py"


def load_script():
    spec = importlib.util.spec_from_file_location("yardsticks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["yardsticks"] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def test_table_cells_are_the_evaluated_returns(tmp_path, capsys):
    pytest.importorskip("sb3_contrib")
    yardsticks = load_script()
    yardsticks.PPO_KWARGS.update(n_steps=64, batch_size=32)  # one short rollout
    out = tmp_path / "table.md"
    argv = ["--envs", "graphenv/CF-v0", "--sizes", "8", "--episodes", "3", "--ppo-steps", "64"]
    argv += ["--policies", "random", "greedy", "MaskablePPO", "--out", str(out)]
    assert yardsticks.main(argv) == 0
    table = out.read_text()
    assert table in capsys.readouterr().out + "\n"
    header, _, row = table.splitlines()[:3]
    assert header == "| env | N | random | greedy | MaskablePPO (64 steps) |"
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == ["CF", "8"]
    for cell, policy in zip(cells[2:4], (random_action, greedy_action), strict=True):
        mean, sem = evaluate_heuristic("graphenv/CF-v0", policy, episodes=3, seed=0, num_nodes=8)
        assert cell == f"{mean:.3f} ± {sem:.3f}"
    mean, sem = (float(x) for x in re.fullmatch(r"(\S+) ± (\S+)", cells[4]).groups())
    assert math.isfinite(mean) and sem >= 0
    assert "over 3 episodes" in table


def test_slow_cells_are_split_into_contiguous_episode_ranges():
    yardsticks = load_script()
    cells = yardsticks.make_cells(
        ["graphenv/RGC-v0"], [50], ["greedy"], 100, {("RGC", 50, "greedy"): 3}
    )
    assert [(c.first_episode, c.episodes) for c in cells] == [(0, 33), (33, 34), (67, 33)]


def test_capped_cells_run_fewer_episodes_and_are_marked():
    yardsticks = load_script()
    cells = yardsticks.make_cells(
        ["graphenv/CF-v0"], [8], ["random", "greedy"], 4, {}, {("CF", 8, "greedy"): 2}
    )
    assert {c.policy: c.episodes for c in cells} == {"random": 4, "greedy": 2}
    results = [{**c.__dict__, "returns": [float(i) for i in range(c.episodes)]} for c in cells]
    row = yardsticks.format_table(results, ppo_steps=0, episodes=4).splitlines()[2]
    assert row == "| CF | 8 | 1.500 ± 0.645 | 0.500 ± 0.500 (2 ep.) |"
