"""Random-valid-action throughput of every registered graph env.

Usage::

    uv run python packages/graph-envs/benchmarks/bench_envs.py [--seconds 1.0]

For each env and N in {20, 100, 1000} (RGC: {20, 100, 200}, its robustness reward being
the costly part) it times ``env.step`` under the paper's random policy
(``sample_valid_action``), resetting when an episode ends (reset time is reported apart), and
prints steps/s. The issue's targets are checked and printed as PASS/FAIL:
SAR at N = 1000 > 1000 steps/s and RGC at N = 200 > 200 steps/s. As a yardstick for the
machine, the same loop on Gymnasium's CartPole-v1 is measured in the same run and every env's
rate is also printed relative to it.

At the end, if ``bench_cf_load.py`` sits next to this file, its ``main()`` runs too (with the
same ``--seconds``): the CF load against networkx, and CF / OD at N = 1000.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import time
import warnings
from pathlib import Path

import graphwm_envs
import gymnasium as gym
import numpy as np

SIZES = (20, 100, 1000)
SIZES_BY_ENV = {"graphenv/RGC-v0": (20, 100, 200)}
# id -> (N, minimum steps/s) from the issue
TARGETS = {"graphenv/SAR-v0": (1000, 1000.0), "graphenv/RGC-v0": (200, 200.0)}


def measure(env_id: str, num_nodes: int, seconds: float, seed: int = 0) -> dict[str, float]:
    """Steps/s of random valid actions for about ``seconds`` of stepping (resets excluded)."""
    env = gym.make(env_id, num_nodes=num_nodes).unwrapped
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    env.reset(seed=seed)
    reset_time, resets = time.perf_counter() - t0, 1
    step_time, steps = 0.0, 0
    while step_time < seconds or steps < 3:
        action = env.sample_valid_action(rng)
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        step_time += time.perf_counter() - t0
        steps += 1
        if terminated or truncated:
            t0 = time.perf_counter()
            env.reset(seed=seed + resets)
            reset_time += time.perf_counter() - t0
            resets += 1
    env.close()
    return {
        "steps": steps,
        "steps_per_s": steps / step_time,
        "episodes": resets,
        "reset_ms": 1e3 * reset_time / resets,
    }


def cartpole_reference(seconds: float) -> float:
    """Steps/s of CartPole-v1 with random actions: a yardstick of the machine's speed."""
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps, elapsed = 0, 0.0
    while elapsed < seconds:
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        elapsed += time.perf_counter() - t0
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / elapsed


def run_cf_load_benchmark(seconds: float) -> int:
    """Run ``bench_cf_load.main`` with ``--seconds`` if that script sits next to this one.

    Returns its exit code (0 when every target is met; 0 if the script is absent).
    """
    path = Path(__file__).with_name("bench_cf_load.py")
    if not path.exists():
        return 0
    spec = importlib.util.spec_from_file_location("bench_cf_load", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print()
    return int(module.main(["--seconds", str(seconds)]))


def main(argv: list[str] | None = None) -> int:
    """Print the throughput table and PASS/FAIL lines; return 1 if a target failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="stepping time per cell")
    parser.add_argument("--envs", nargs="*", default=None, help="env ids (default: all)")
    parser.add_argument("--skip-cf-load", action="store_true", help="skip bench_cf_load.py")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    reference = cartpole_reference(args.seconds)
    print(f"reference: CartPole-v1 random steps/s = {reference:,.0f}")
    header = f"{'env':<18} {'N':>5} {'steps/s':>10} {'vs CartPole':>12} {'steps':>7} "
    header += f"{'episodes':>8} {'reset ms':>9}"
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, int], float] = {}
    for env_id in args.envs or graphwm_envs.ENV_IDS:
        for n in SIZES_BY_ENV.get(env_id, SIZES):
            r = measure(env_id, n, args.seconds)
            results[(env_id, n)] = r["steps_per_s"]
            print(
                f"{env_id:<18} {n:>5} {r['steps_per_s']:>10,.0f} "
                f"{r['steps_per_s'] / reference:>12.4f} {r['steps']:>7} {r['episodes']:>8} "
                f"{r['reset_ms']:>9.1f}",
                flush=True,
            )
    failed = False
    print()
    for env_id, (n, target) in TARGETS.items():
        if (env_id, n) not in results:
            continue
        rate = results[(env_id, n)]
        ok = rate > target
        failed |= not ok
        print(
            f"{'PASS' if ok else 'FAIL'}: {env_id} at N={n}: {rate:,.0f} steps/s "
            f"(target > {target:,.0f}; ratio {rate / target:.2f})"
        )
    if not args.skip_cf_load:
        failed |= run_cf_load_benchmark(args.seconds) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
