"""Speed of the CF load and of CF / OD at N = 1000 (issue targets; prints PASS/FAIL).

* CF steps/s at N = 1000 with random valid actions, resets included (target >= 20);
* the fast load (rustworkx, :func:`graph_envs.cf.loads.betweenness_load`) against a networkx
  betweenness reference on the same SHK graph, measured in this run (target ratio >= 20);
* OD steps/s at N = 1000 with random valid actions, resets included (target >= 200).

Run: ``uv run python packages/graph-envs/benchmarks/bench_cf_load.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import graph_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import networkx as nx
import numpy as np
from graph_envs.cf.loads import betweenness_load, pair_count
from graph_envs.cf.shk import shk_graph

N = 1000
CF_TARGET = 20.0
OD_TARGET = 200.0
RATIO_TARGET = 20.0


def networkx_load(adjacency: np.ndarray) -> np.ndarray:
    """Reference load: networkx unnormalised betweenness divided by P = N(N-1)/2."""
    graph = nx.from_numpy_array(adjacency.astype(np.int8))
    raw = nx.betweenness_centrality(graph, normalized=False)
    return np.array([raw[i] for i in range(len(adjacency))]) / pair_count(len(adjacency))


def steps_per_second(env_id: str, seconds: float) -> tuple[float, float, int]:
    """(steps/s with resets included, mean reset seconds, episodes) for random valid actions."""
    env = gym.make(env_id, num_nodes=N)
    rng = np.random.default_rng(0)
    episode = 0
    reset_times = []
    t0 = time.perf_counter()
    env.reset(seed=episode)
    reset_times.append(time.perf_counter() - t0)
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(env.unwrapped.sample_valid_action(rng))
        steps += 1
        if terminated or truncated:
            episode += 1
            t0 = time.perf_counter()
            env.reset(seed=episode)
            reset_times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    return steps / elapsed, statistics.mean(reset_times), episode


def load_ratio(pairs: int = 3, fast_repeats: int = 3) -> tuple[float, float, float, float]:
    """One load pass at N = 1000, fast vs networkx, measured in interleaved pairs.

    Each pair times the fast load (median of ``fast_repeats``) right next to one networkx
    pass, so a change in machine load affects both sides of a pair alike.

    Returns:
        (median fast seconds, median networkx seconds, median per-pair ratio, max |diff|).
    """
    adjacency = shk_graph(N, np.random.default_rng(0)).adjacency
    fast_times, nx_times, ratios = [], [], []
    diff = 0.0
    for _ in range(pairs):
        runs = []
        for _ in range(fast_repeats):
            t0 = time.perf_counter()
            fast = betweenness_load(adjacency)
            runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        reference = networkx_load(adjacency)
        nx_times.append(time.perf_counter() - t0)
        fast_times.append(statistics.median(runs))
        ratios.append(nx_times[-1] / fast_times[-1])
        diff = max(diff, float(np.abs(fast - reference).max()))
    return (
        statistics.median(fast_times),
        statistics.median(nx_times),
        statistics.median(ratios),
        diff,
    )


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements; returns 0 if every target is met, else 1.

    ``argv`` defaults to no arguments (not ``sys.argv``), so other scripts can call ``main()``.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="time per env run")
    args = parser.parse_args([] if argv is None else argv)

    fast_s, nx_s, ratio, diff = load_ratio()
    print(
        f"load pass N={N}: rustworkx {fast_s * 1e3:.1f} ms, networkx {nx_s * 1e3:.0f} ms, "
        f"ratio {ratio:.1f}x (target >= {RATIO_TARGET:.0f}x), max |diff| {diff:.2e}  "
        f"{_verdict(ratio >= RATIO_TARGET and diff < 1e-9)}"
    )
    cf_rate, cf_reset, cf_eps = steps_per_second("graphenv/CF-v0", args.seconds)
    print(
        f"CF-v0 N={N}: {cf_rate:.1f} steps/s incl. resets ({cf_eps} episodes, reset "
        f"{cf_reset * 1e3:.0f} ms) (target >= {CF_TARGET:.0f})  {_verdict(cf_rate >= CF_TARGET)}"
    )
    od_rate, od_reset, od_eps = steps_per_second("graphenv/OD-v0", args.seconds)
    print(
        f"OD-v0 N={N}: {od_rate:.1f} steps/s incl. resets ({od_eps} episodes, reset "
        f"{od_reset * 1e3:.0f} ms) (target >= {OD_TARGET:.0f})  {_verdict(od_rate >= OD_TARGET)}"
    )
    ok = ratio >= RATIO_TARGET and diff < 1e-9 and cf_rate >= CF_TARGET and od_rate >= OD_TARGET
    print("overall:", _verdict(ok))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
