"""Speed of the CF load and of CF / OD at N = 1000 (issue targets; prints PASS/FAIL).

* CF steps/s at N = 1000 with random valid actions, resets included (target >= 20);
* the fast load (igraph, :func:`graphwm_envs.cf.loads.betweenness_load`) against a networkx
  betweenness reference on the same SHK graph, measured in this run (target ratio >= 20);
  single-threaded rustworkx (the previous implementation) is timed alongside for comparison;
* OD steps/s at N = 1000 with random valid actions, resets included (target >= 200).

Run: ``uv run python packages/graph-envs/benchmarks/bench_cf_load.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import graphwm_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import networkx as nx
import numpy as np
import rustworkx as rx
from graphwm_envs.cf.loads import betweenness_load, pair_count
from graphwm_envs.cf.shk import shk_graph

N = 1000
CF_TARGET = 20.0
OD_TARGET = 200.0
RATIO_TARGET = 20.0


def networkx_load(adjacency: np.ndarray) -> np.ndarray:
    """Reference load: networkx unnormalised betweenness divided by P = N(N-1)/2."""
    graph = nx.from_numpy_array(adjacency.astype(np.int8))
    raw = nx.betweenness_centrality(graph, normalized=False)
    return np.array([raw[i] for i in range(len(adjacency))]) / pair_count(len(adjacency))


def rustworkx_load(adjacency: np.ndarray) -> np.ndarray:
    """Single-threaded rustworkx betweenness divided by P (for comparison only)."""
    n = len(adjacency)
    rows, cols = np.nonzero(np.triu(adjacency, k=1))
    graph = rx.PyGraph(multigraph=False)
    graph.add_nodes_from(range(n))
    graph.add_edges_from_no_data(list(zip(rows.tolist(), cols.tolist(), strict=True)))
    raw = rx.betweenness_centrality(
        graph, normalized=False, endpoints=False, parallel_threshold=2**62
    )
    return np.fromiter((raw[i] for i in range(n)), dtype=np.float64, count=n) / pair_count(n)


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


def load_ratio(pairs: int = 3, fast_repeats: int = 3) -> dict[str, float]:
    """One load pass at N = 1000, fast vs networkx, measured in interleaved pairs.

    Each pair times the fast load and the rustworkx load (medians of ``fast_repeats``) right
    next to one networkx pass, so a change in machine load affects both sides of a pair alike.

    Returns:
        medians of the fast, rustworkx and networkx seconds and of the per-pair ratios
        networkx / fast and networkx / rustworkx, and the max |fast - networkx| over all passes.
    """
    adjacency = shk_graph(np.random.default_rng(0), N).adjacency
    times: dict[str, list[float]] = {"fast": [], "rustworkx": [], "networkx": []}
    ratios: dict[str, list[float]] = {"fast": [], "rustworkx": []}
    diff = 0.0
    for _ in range(pairs):
        for name, fn in (("fast", betweenness_load), ("rustworkx", rustworkx_load)):
            runs = []
            for _ in range(fast_repeats):
                t0 = time.perf_counter()
                fast = fn(adjacency)
                runs.append(time.perf_counter() - t0)
            times[name].append(statistics.median(runs))
            if name == "fast":
                fast_result = fast
        t0 = time.perf_counter()
        reference = networkx_load(adjacency)
        times["networkx"].append(time.perf_counter() - t0)
        for name in ratios:
            ratios[name].append(times["networkx"][-1] / times[name][-1])
        diff = max(diff, float(np.abs(fast_result - reference).max()))
    out = {f"{name}_s": statistics.median(t) for name, t in times.items()}
    out.update({f"{name}_ratio": statistics.median(r) for name, r in ratios.items()})
    out["max_diff"] = diff
    return out


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements; returns 0 if every target is met, else 1.

    ``argv`` defaults to no arguments (not ``sys.argv``), so other scripts can call ``main()``.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="time per env run")
    args = parser.parse_args([] if argv is None else argv)

    r = load_ratio()
    ratio, diff = r["fast_ratio"], r["max_diff"]
    print(
        f"load pass N={N}: igraph {r['fast_s'] * 1e3:.1f} ms, networkx "
        f"{r['networkx_s'] * 1e3:.0f} ms, ratio {ratio:.1f}x (target >= {RATIO_TARGET:.0f}x), "
        f"max |diff| {diff:.2e}  {_verdict(ratio >= RATIO_TARGET and diff < 1e-9)}"
    )
    print(
        f"  (for comparison: single-threaded rustworkx {r['rustworkx_s'] * 1e3:.1f} ms, "
        f"ratio {r['rustworkx_ratio']:.1f}x against networkx)"
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
