"""Published yardsticks: mean return +- standard error of reference policies on every env.

Usage (the table in ``docs/envs.md``, section "Yardsticks", comes from this command)::

    uv run python packages/graph-envs/benchmarks/yardsticks.py --jobs 2

For each env and N in ``--sizes`` (default 20 and 50) it evaluates, over ``--episodes``
(default 100) episodes with initial states ``reset(seed=e)``, e = 0 .. episodes - 1 (the same
states for every policy):

* ``random``: :func:`graphwm_envs.heuristics.random_action`, a uniformly random valid action;
* ``greedy``: :func:`graphwm_envs.heuristics.greedy_action`, the env's greedy heuristic;
* ``PPO`` and ``MaskablePPO`` (stable-baselines3 / sb3-contrib, ``MultiInputPolicy``, library
  defaults, seed 0) trained for ``--ppo-steps`` env steps (default 20,000) on the unwrapped env
  of the same N, then run deterministically (MaskablePPO with the env's action masks). RGC
  uses ``action_mode="pair"`` (exact masks over addable edges) when the env offers it.

and prints a markdown table (also written to ``--out`` when given). The graph agent
(``graphwm_envs.agents``: several training seeds, transfer across N, learning curves) has its
own script, ``graph_agent.py`` next to this one, on the same initial states. Cells are independent
jobs run on ``--jobs`` processes; each PPO cell trains with one torch thread. Use
``nice -n 10`` on a shared machine.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

POLICIES = ("random", "greedy", "PPO", "MaskablePPO")
SHORT = {"graphenv/RGC-v0": "RGC", "graphenv/OD-v0": "OD", "graphenv/SAR-v0": "SAR"}
SHORT["graphenv/CF-v0"] = "CF"
# Extra constructor arguments of PPO / MaskablePPO (empty: the library defaults).
PPO_KWARGS: dict = {}


@dataclass(frozen=True)
class Cell:
    """One job: a policy on an env at one size, over a contiguous range of episode seeds."""

    env_id: str
    num_nodes: int
    policy: str
    first_episode: int
    episodes: int


def env_kwargs(env_id: str, num_nodes: int, policy: str) -> dict:
    """Constructor arguments of a cell: RGC's exact pair masks for the learned policies."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym

    kwargs: dict = {"num_nodes": num_nodes}
    if policy in ("PPO", "MaskablePPO") and env_id == "graphenv/RGC-v0":
        cls = gym.make(env_id, num_nodes=num_nodes).unwrapped.__class__
        if "action_mode" in inspect.signature(cls.__init__).parameters:
            kwargs["action_mode"] = "pair"
    return kwargs


def train(env_id: str, num_nodes: int, policy: str, steps: int):
    """A PPO or MaskablePPO model trained for ``steps`` env steps (library defaults, seed 0)."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym
    import torch
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)
    env = gym.make(env_id, **env_kwargs(env_id, num_nodes, policy))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if policy == "MaskablePPO":
            from sb3_contrib import MaskablePPO

            model = MaskablePPO("MultiInputPolicy", env, seed=0, device="cpu", **PPO_KWARGS)
        else:
            from stable_baselines3 import PPO

            model = PPO("MultiInputPolicy", env, seed=0, device="cpu", **PPO_KWARGS)
        # a silent logger: SB3's default one leaves an empty /tmp/SB3-<time> folder per run
        model.set_logger(Logger(folder=None, output_formats=[]))
        model.learn(total_timesteps=steps)
    return model


def run_cell(cell: Cell, ppo_steps: int) -> dict:
    """The returns of one cell (a PPO cell trains first; its training time is reported)."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym
    from graphwm_envs.heuristics import episode_returns, greedy_action, random_action

    t0 = time.perf_counter()
    if cell.policy in ("random", "greedy"):
        policy = random_action if cell.policy == "random" else greedy_action
        returns = episode_returns(
            cell.env_id,
            policy,
            episodes=cell.episodes,
            seed=cell.first_episode,
            num_nodes=cell.num_nodes,
        )
        return {**cell.__dict__, "returns": returns.tolist(), "seconds": time.perf_counter() - t0}
    model = train(cell.env_id, cell.num_nodes, cell.policy, ppo_steps)
    train_s = time.perf_counter() - t0
    env = gym.make(cell.env_id, **env_kwargs(cell.env_id, cell.num_nodes, cell.policy)).unwrapped
    returns = []
    for episode in range(cell.first_episode, cell.first_episode + cell.episodes):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            if cell.policy == "MaskablePPO":
                action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            else:
                action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return {
        **cell.__dict__,
        "returns": returns,
        "seconds": time.perf_counter() - t0,
        "train_seconds": train_s,
    }


def make_cells(
    env_ids: Iterable[str],
    sizes: Iterable[int],
    policies: Iterable[str],
    episodes: int,
    split: dict,
    caps: dict | None = None,
) -> list[Cell]:
    """Every (env, N, policy) cell, the slow ones split into ``split[(short, N, policy)]``
    chunks of episodes (so they spread over the processes); ``caps[(short, N, policy)]``
    lowers a cell's number of episodes."""
    cells = []
    for env_id in env_ids:
        for n in sizes:
            for policy in policies:
                key = (SHORT.get(env_id, env_id), n, policy)
                count = min(episodes, (caps or {}).get(key, episodes))
                chunks = min(split.get(key, 1), count)
                bounds = np.linspace(0, count, chunks + 1).round().astype(int)
                for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                    if hi > lo:
                        cells.append(Cell(env_id, n, policy, int(lo), int(hi - lo)))
    return cells


# RGC's greedy scores every addable edge with the robustness: ~20 s per episode at N = 50.
SLOW_CELLS = {("RGC", 50, "greedy"): 10, ("RGC", 20, "greedy"): 2}


def format_table(results: list[dict], ppo_steps: int, episodes: int) -> str:
    """Markdown table: one row per (env, N), one column per policy, ``mean +- s.e.``."""
    merged: dict[tuple[str, int, str], list[float]] = {}
    for r in sorted(results, key=lambda r: r["first_episode"]):
        merged.setdefault((r["env_id"], r["num_nodes"], r["policy"]), []).extend(r["returns"])
    policies = [p for p in POLICIES if any(k[2] == p for k in merged)]
    header = [f"{p} ({ppo_steps:,} steps)" if "PPO" in p else p for p in policies]
    lines = [
        "| env | N | " + " | ".join(header) + " |",
        "|---|---|" + "---|" * len(policies),
    ]
    for env_id, n in sorted({(k[0], k[1]) for k in merged}, key=lambda k: (_order(k[0]), k[1])):
        cells = []
        for p in policies:
            returns = np.asarray(merged.get((env_id, n, p), []), dtype=float)
            if returns.size == 0:
                cells.append("-")
                continue
            sem = returns.std(ddof=1) / math.sqrt(returns.size) if returns.size > 1 else math.nan
            fewer = f" ({returns.size} ep.)" if returns.size != episodes else ""
            cells.append(f"{returns.mean():.3f} ± {sem:.3f}{fewer}")
        lines.append(f"| {SHORT.get(env_id, env_id)} | {n} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Mean undiscounted return ± standard error over {episodes} episodes "
        f"(initial states `reset(seed=e)`, e = 0..{episodes - 1}, shared by every policy)."
    )
    return "\n".join(lines)


def _order(env_id: str) -> int:
    return list(SHORT).index(env_id) if env_id in SHORT else len(SHORT)


def main(argv: list[str] | None = None) -> int:
    """Run every cell and print the markdown table."""
    import graphwm_envs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="*", default=list(graphwm_envs.ENV_IDS))
    parser.add_argument("--sizes", nargs="*", type=int, default=[20, 50])
    parser.add_argument("--policies", nargs="*", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--ppo-steps", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--cap",
        nargs="*",
        default=[],
        metavar="ENV:N:POLICY=EPISODES",
        help="fewer episodes for a slow cell, e.g. RGC:50:greedy=10 (marked in the table)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("--raw", type=Path, default=None, help="append raw JSON lines here")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error("--episodes must be >= 2 (a standard error needs two episodes)")

    _preload(args.envs, args.policies)
    split = SLOW_CELLS if args.jobs > 1 else {}
    caps = {}
    for spec in args.cap:
        try:
            key, count = spec.split("=")
            env, n, policy = key.split(":")
            caps[(env, int(n), policy)] = int(count)
        except ValueError:
            parser.error(f"--cap {spec!r}: expected ENV:N:POLICY=EPISODES, e.g. RGC:50:greedy=10")
    cells = make_cells(args.envs, args.sizes, args.policies, args.episodes, split, caps)
    # longest first: PPO training and RGC's greedy at the largest N
    cells.sort(key=lambda c: ("PPO" not in c.policy, -c.num_nodes, c.policy != "greedy"))
    results = []
    start = time.perf_counter()
    if args.jobs == 1:
        done = (run_cell(c, args.ppo_steps) for c in cells)
        _collect(done, results, args.raw, start)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_cell, c, args.ppo_steps) for c in cells]
            _collect((f.result() for f in as_completed(futures)), results, args.raw, start)
    table = format_table(results, args.ppo_steps, args.episodes)
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


def _preload(env_ids: Iterable[str], policies: Iterable[str]) -> None:
    """Import everything the workers use before they fork (they then share one code state)."""
    import graphwm_envs.heuristics  # noqa: F401
    import gymnasium as gym

    for env_id in env_ids:
        gym.make(env_id, num_nodes=8).close()
    if any("PPO" in p for p in policies):
        import sb3_contrib  # noqa: F401
        import stable_baselines3  # noqa: F401


def _collect(done: Iterable[dict], results: list[dict], raw: Path | None, start: float) -> None:
    for r in done:
        results.append(r)
        elapsed = time.perf_counter() - start
        print(
            f"[{elapsed:7.1f}s] {r['env_id']} N={r['num_nodes']} {r['policy']} "
            f"episodes {r['first_episode']}+{r['episodes']}: {r['seconds']:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        if raw is not None:
            with raw.open("a") as fh:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
