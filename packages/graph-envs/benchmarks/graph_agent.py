"""Yardsticks of the graph agent (``graphwm_envs.agents``): returns, transfer across N,
training throughput against the MLP MaskablePPO, and learning curves.

Usage (the graph-agent table and figure in ``docs/agents.md`` come from this command)::

    nice -n 10 uv run python packages/graph-envs/benchmarks/graph_agent.py --jobs 2 \
        --out-dir packages/graph-envs/benchmarks/out/graph_agent

Jobs (independent processes, one torch thread each):

* ``train``: MaskablePPO with :class:`~graphwm_envs.agents.MaskableGraphPolicy` on the
  unwrapped env at N (RGC in ``action_mode="pair"``, as the MLP yardstick), ``--steps`` env
  steps, training seed s; then evaluated deterministically on ``reset(seed=e)``,
  e = 0 .. episodes - 1 (the yardsticks' shared initial states), at N and, for N = 20, at N = 50
  with the same weights (:func:`~graphwm_envs.agents.load_graph_agent`, no retraining). Every
  finished training episode's return is logged with the env step count (learning curves).
* ``random``: the random policy on the same initial states (the reference of the z-scores).
* ``throughput``: ``--throughput-steps`` of MaskablePPO training at N = 20 with SB3's default
  hyperparameters (one env, ``n_steps=2048``, ``batch_size=64``, ``n_epochs=10``), once with
  ``MultiInputPolicy`` (MLP) and once with the graph policy: the ratio of their env steps per
  second, measured in the same run.

Writes ``table.md``, ``raw.jsonl`` and ``learning_curves.png`` to ``--out-dir``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ENVS = ("graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/SAR-v0", "graphenv/CF-v0")
SHORT = {"graphenv/RGC-v0": "RGC", "graphenv/OD-v0": "OD", "graphenv/SAR-v0": "SAR"}
SHORT["graphenv/CF-v0"] = "CF"
# Discount per env horizon: OD's 50-step episodes reward the final share, so a shorter memory;
# the others' episodes are short (RGC's 10 additions, CF's N / 2 steps) or need long paths (SAR).
GAMMA = {"RGC": 0.99, "OD": 0.98, "SAR": 0.99, "CF": 0.99}
# The graph agent's PPO settings (not tuned beyond a sanity check; see docs/agents.md).
AGENT_KWARGS = dict(
    n_steps=128,
    batch_size=256,
    n_epochs=4,
    learning_rate=3e-4,
    ent_coef=0.01,
    gae_lambda=0.95,
    policy_kwargs=dict(hidden_dim=64, num_layers=3, conv="graphconv"),
)
N_ENVS = 8  # parallel envs per run (DummyVecEnv): one batched forward pass per step
# SAR's agent navigates to survivors and the exit several hops away: 5 message-passing layers
# (10,000 steps, 20 episodes at N = 20: 3 layers -15.7, 5 layers +2.9); 3 elsewhere.
LAYERS = {"RGC": 3, "OD": 3, "SAR": 5, "CF": 3}
# Reward scaling (VecNormalize) everywhere but OD. OD's gamma and scaling were first chosen while
# a policy bug hid learning at N = 20; re-examined after the fix (N = 20, 10,240 steps, 6 seeds,
# 100 episodes each: gamma 0.98 off 0.666 / on 0.674, gamma 0.99 off 0.668 / on 0.662, s.e.
# about 0.007 each) the four score alike, so they stay (docs/agents.md; --gamma and
# --reward-scaling override them per run).
REWARD_SCALING = {"RGC": True, "OD": False, "SAR": True, "CF": True}
# Published yardsticks (docs/envs.md, same initial states), per (env, N): the greedy heuristic's
# mean return and its standard error (RGC at N = 50 over 20 episodes, the others over 100), and
# the MLP MaskablePPO's mean return (20,000 steps).
PUBLISHED = {
    # (env, N): (greedy, greedy s.e., MLP MaskablePPO)
    ("RGC", 20): (0.487, 0.015, 0.116),
    ("RGC", 50): (0.506, 0.036, 0.129),
    ("OD", 20): (0.721, 0.016, 0.194),
    ("OD", 50): (0.792, 0.007, 0.217),
    ("SAR", 20): (13.430, 3.086, -93.390),
    ("SAR", 50): (-28.950, 2.940, -420.610),
    ("CF", 20): (-0.732, 0.015, -0.876),
    ("CF", 50): (-0.782, 0.010, -1.020),
}
GREEDY = {cell: greedy for cell, (greedy, _, _) in PUBLISHED.items()}
GREEDY_SE = {cell: se for cell, (_, se, _) in PUBLISHED.items()}
MLP_MASKABLE = {cell: mlp for cell, (_, _, mlp) in PUBLISHED.items()}


def env_kwargs(env_id: str, num_nodes: int) -> dict:
    """RGC in pair mode (exact masks over addable edges), as the MLP yardstick."""
    kwargs: dict = {"num_nodes": num_nodes}
    if env_id == "graphenv/RGC-v0":
        kwargs["action_mode"] = "pair"
    return kwargs


def _silence(model) -> None:
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


def evaluate(model, env_id: str, num_nodes: int, episodes: int) -> list[float]:
    """Deterministic returns on ``reset(seed=e)``, e < episodes: the documented protocol,
    :func:`graphwm_envs.agents.agent_returns` (every episode steps in lockstep, one batched
    ``predict`` for all running ones)."""
    from graphwm_envs.agents import agent_returns

    kwargs = env_kwargs(env_id, num_nodes)
    return agent_returns(model, env_id, episodes=episodes, seed=0, **kwargs).tolist()


def env_settings(
    gamma: dict[str, float] | None = None, reward_scaling: dict[str, bool] | None = None
) -> dict[str, dict]:
    """Per-env ``{"gamma", "reward_scaling"}``: the module's defaults, overridden per env."""
    for name, given in (("gamma", gamma), ("reward scaling", reward_scaling)):
        unknown = set(given or {}) - set(GAMMA)
        if unknown:
            raise ValueError(
                f"{name} override for unknown env(s) {sorted(unknown)}; known: {sorted(GAMMA)}"
            )
    for env, g in (gamma or {}).items():
        if not 0.0 < g <= 1.0:
            raise ValueError(f"gamma for {env} must be in (0, 1], got {g}")
    return {
        env: {
            "gamma": float((gamma or {}).get(env, GAMMA[env])),
            "reward_scaling": bool((reward_scaling or {}).get(env, REWARD_SCALING[env])),
        }
        for env in GAMMA
    }


def make_agent(env_id: str, num_nodes: int, seed: int, gamma: float, reward_scaling: bool):
    """The untrained graph agent of a ``train`` job on ``N_ENVS`` copies of the env at N."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym
    from graphwm_envs.agents import make_graph_agent
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    vec = make_vec_env(
        lambda: gym.make(env_id, **env_kwargs(env_id, num_nodes)).unwrapped,
        n_envs=N_ENVS,
        seed=seed,
    )
    # rewards scaled by a running std of the return (the envs' scales differ by 1000x);
    # observations as they are (the policy normalises them itself)
    if reward_scaling:
        vec = VecNormalize(vec, norm_obs=False, norm_reward=True, gamma=gamma)
    kwargs = {**AGENT_KWARGS, "policy_kwargs": {**AGENT_KWARGS["policy_kwargs"]}}
    kwargs["policy_kwargs"]["num_layers"] = LAYERS[SHORT[env_id]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_graph_agent(vec, gamma=gamma, seed=seed, device="cpu", **kwargs)
    _silence(model)
    return model


def agent_settings(model) -> dict:
    """The settings a model actually trains with (recorded in each raw result row)."""
    from stable_baselines3.common.vec_env import VecNormalize

    return {
        "gamma": float(model.gamma),
        "reward_scaling": isinstance(model.get_env(), VecNormalize),
    }


def train_job(
    env_id: str,
    num_nodes: int,
    seed: int,
    steps: int,
    episodes: int,
    out: str,
    gamma: float | None = None,
    reward_scaling: bool | None = None,
) -> dict:
    """Train the graph agent, log its training episodes, evaluate at N (and at 50 from 20).
    ``gamma`` and ``reward_scaling`` default to the env's ``GAMMA`` and ``REWARD_SCALING``."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym
    import torch
    from graphwm_envs.agents import load_graph_agent
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    short = SHORT[env_id]
    gamma = GAMMA[short] if gamma is None else gamma
    reward_scaling = REWARD_SCALING[short] if reward_scaling is None else reward_scaling
    curve: list[tuple[int, float]] = []

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    curve.append((int(self.num_timesteps), float(info["episode"]["r"])))
            return True

    model = make_agent(env_id, num_nodes, seed, gamma, reward_scaling)
    settings = agent_settings(model)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(total_timesteps=steps, callback=Curve())
    train_s = time.perf_counter() - t0
    path = Path(out) / f"{short}_N{num_nodes}_seed{seed}.zip"
    model.save(path)
    results = [
        {
            "kind": "train",
            "env": short,
            "train_nodes": num_nodes,
            "eval_nodes": num_nodes,
            "seed": seed,
            "steps": int(model.num_timesteps),
            **settings,
            "train_seconds": train_s,
            "returns": evaluate(model, env_id, num_nodes, episodes),
            "curve": curve,
        }
    ]
    if num_nodes == 20:
        big = gym.make(env_id, **env_kwargs(env_id, 50)).unwrapped
        transferred = load_graph_agent(path, big, device="cpu")
        results.append(
            {
                "kind": "transfer",
                "env": short,
                "train_nodes": 20,
                "eval_nodes": 50,
                "seed": seed,
                **settings,
                "returns": evaluate(transferred, env_id, 50, episodes),
            }
        )
    return {"results": results}


def random_job(env_id: str, num_nodes: int, episodes: int) -> dict:
    """The random policy's returns on the shared initial states."""
    from graphwm_envs.heuristics import episode_returns, random_action

    returns = episode_returns(env_id, random_action, episodes=episodes, num_nodes=num_nodes)
    kind = {"kind": "random", "env": SHORT[env_id], "eval_nodes": num_nodes}
    return {"results": [{**kind, "returns": returns.tolist()}]}


def throughput_job(env_id: str, policy: str, steps: int) -> dict:
    """Env steps per second of MaskablePPO training at N = 20, SB3 defaults, one env."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym
    import torch
    from graphwm_envs.agents import MaskableGraphPolicy
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    env = gym.make(env_id, **env_kwargs(env_id, 20)).unwrapped
    cls = "MultiInputPolicy" if policy == "mlp" else MaskableGraphPolicy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MaskablePPO(cls, env, seed=0, device="cpu")
        _silence(model)
        t0 = time.perf_counter()
        model.learn(total_timesteps=steps)
    rate = model.num_timesteps / (time.perf_counter() - t0)
    return {
        "results": [{"kind": "throughput", "env": SHORT[env_id], "policy": policy, "rate": rate}]
    }


def _stats(returns: list[float]) -> tuple[float, float]:
    r = np.asarray(returns, dtype=float)
    return float(r.mean()), float(r.std(ddof=1) / math.sqrt(r.size))


def format_report(results: list[dict], steps: int, episodes: int) -> str:
    """The markdown table, the z-scores against random and the throughput ratios."""

    def pooled(kind: str, env: str, n: int, train_n: int | None = None) -> list[float]:
        out: list[float] = []
        for r in sorted(results, key=lambda r: r.get("seed", 0)):
            if r["kind"] == kind and r["env"] == env and r["eval_nodes"] == n:
                if train_n is None or r.get("train_nodes") == train_n:
                    out += r["returns"]
        return out

    def seeds(kind: str, env: str, n: int, train_n: int) -> list[float]:
        return [
            float(np.mean(r["returns"]))
            for r in sorted(results, key=lambda r: r.get("seed", 0))
            if r["kind"] == kind
            and r["env"] == env
            and r["eval_nodes"] == n
            and r.get("train_nodes") == train_n
        ]

    lines = [
        "| env | N | random | greedy | MLP MaskablePPO | graph agent, trained at N | z vs random "
        "| z vs greedy | graph agent, trained at N = 20 | z vs random | z vs greedy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env in SHORT.values():
        for n in (20, 50):
            rnd = pooled("random", env, n)
            trained = pooled("train", env, n, n) + pooled("transfer", env, n, 20)
            if not rnd and not trained:
                continue
            # without the random jobs (--no-random) the graph agent's cells stand alone
            rm, rs = _stats(rnd) if rnd else (math.nan, math.nan)
            cells = [
                f"{rm:.3f} ± {rs:.3f}" if rnd else "-",
                f"{GREEDY[(env, n)]:.3f} ± {GREEDY_SE[(env, n)]:.3f}",
                f"{MLP_MASKABLE[(env, n)]:.3f}",
            ]
            for kind, train_n in (("train", n), ("transfer" if n == 50 else "train", 20)):
                if kind == "train" and train_n == 20 and n == 20 and len(cells) == 6:
                    cells += ["(same)", "", ""]
                    continue
                g = pooled(kind, env, n, train_n)
                if not g:
                    cells += ["-", "-", "-"]
                    continue
                gm, gs = _stats(g)
                per_seed = ", ".join(f"{s:.3f}" for s in seeds(kind, env, n, train_n))
                z = (gm - rm) / math.sqrt(gs**2 + rs**2)
                z_greedy = (gm - GREEDY[(env, n)]) / math.sqrt(gs**2 + GREEDY_SE[(env, n)] ** 2)
                cells += [
                    f"{gm:.3f} ± {gs:.3f} (seeds: {per_seed})",
                    f"{z:+.1f}" if rnd else "-",
                    f"{z_greedy:+.1f}",
                ]
            lines.append(f"| {env} | {n} | " + " | ".join(cells) + " |")
    # (env, N) -> the settings' label ("" for rows written before they were recorded) -> steps
    budgets: dict[tuple[str, int], dict[str, set[int]]] = {}
    for r in results:
        if r["kind"] == "train" and "steps" in r:
            label = ""
            if "gamma" in r:
                scaling = "on" if r["reward_scaling"] else "off"
                label = f" (gamma {r['gamma']:g}, reward scaling {scaling})"
            by_label = budgets.setdefault((r["env"], r["train_nodes"]), {})
            by_label.setdefault(label, set()).add(int(r["steps"]))
    if budgets:
        # runs merged from several invocations may differ in budget and settings: state each's
        budget = "env steps per run: " + "; ".join(
            f"{env} N = {n}: "
            + ", ".join(
                " / ".join(f"{s:,}" for s in sorted(steps_)) + label
                for label, steps_ in sorted(by_label.items())
            )
            for (env, n), by_label in sorted(budgets.items())
        )
    else:
        budget = f"{steps:,} env steps per run"
    lines += [
        "",
        f"Graph agent: MaskablePPO with `MaskableGraphPolicy`, {budget}, "
        f"mean ± s.e. of the returns of every training seed pooled ({episodes} episodes each, "
        "initial states `reset(seed=e)` shared with every policy), per-seed means in brackets; "
        "z = (graph - random) / sqrt(se_graph^2 + se_random^2), likewise against greedy "
        "(positive: above greedy). greedy and MLP MaskablePPO (20,000 steps): the published "
        "yardsticks.",
    ]
    rates: dict[str, dict[str, float]] = {}
    for r in results:
        if r["kind"] == "throughput":
            rates.setdefault(r["env"], {})[r["policy"]] = r["rate"]
    if rates:
        lines += ["", "| env | MLP steps/s | graph steps/s | MLP / graph |", "|---|---|---|---|"]
        for env, rate in rates.items():
            if {"mlp", "graph"} <= set(rate):
                ratio = rate["mlp"] / rate["graph"]
                lines.append(f"| {env} | {rate['mlp']:.0f} | {rate['graph']:.0f} | {ratio:.2f} |")
    return "\n".join(lines)


CURVE_WINDOW = 1024  # env steps per row of a compacted training curve (one rollout of 8 x 128)


def compact_curve(curve: list, window: int = CURVE_WINDOW) -> list[list[float]]:
    """Training episodes binned by env step into ``window``-step windows: one
    ``[last step, mean return, episodes]`` row per non-empty window (the raw results kept in
    the repository stay small; the figure's bins are wider than a window)."""
    rows: dict[int, list] = {}
    for point in curve:
        t, ret, count = (*point, 1) if len(point) == 2 else point
        b = (int(t) - 1) // window
        last, total, n = rows.get(b, (0, 0.0, 0))
        rows[b] = [max(last, int(t)), total + float(ret) * count, n + int(count)]
    return [[t, round(total / n, 6), n] for _, (t, total, n) in sorted(rows.items())]


def plot_curves(results: list[dict], path: Path, bins: int = 20) -> None:
    """Training-episode return vs env steps: mean over seeds and min-max band, per env."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(SHORT.values())
    fig, axes = plt.subplots(1, len(envs), figsize=(3.2 * len(envs), 2.8), dpi=90)
    for ax, env in zip(axes, envs, strict=True):
        for n, colour in ((20, "tab:blue"), (50, "tab:orange")):
            runs = [r for r in results if r["kind"] == "train" and r["env"] == env]
            runs = [r for r in runs if r["train_nodes"] == n and r["curve"]]
            if not runs:
                continue
            total = max(r["steps"] for r in runs)
            # bins no narrower than the compacted curves' windows (else every other one is empty)
            n_bins = max(1, min(bins, total // CURVE_WINDOW))
            edges = np.linspace(0, total, n_bins + 1)
            centres = 0.5 * (edges[1:] + edges[:-1])
            per_seed = []
            for r in runs:
                # per-episode [step, return] or compacted [step, mean, episodes] rows
                curve = np.asarray([(*p, 1) if len(p) == 2 else p for p in r["curve"]], float)
                t, ret, count = curve.T
                idx = np.clip(np.digitize(t, edges, right=True) - 1, 0, n_bins - 1)
                means = [
                    np.average(ret[idx == b], weights=count[idx == b])
                    if np.any(idx == b)
                    else np.nan
                    for b in range(n_bins)
                ]
                per_seed.append(means)
            arr = np.asarray(per_seed)
            label = f"N = {n}: {len(runs)} seed{'s' * (len(runs) > 1)}, {total:,} steps"
            ax.plot(centres, np.nanmean(arr, 0), color=colour, label=label)
            ax.fill_between(centres, np.nanmin(arr, 0), np.nanmax(arr, 0), color=colour, alpha=0.2)
            ax.axhline(GREEDY[(env, n)], color=colour, ls="--", lw=0.8)
            rnd = [r for r in results if r["kind"] == "random" and r["env"] == env]
            for r in rnd:
                if r["eval_nodes"] == n:
                    ax.axhline(float(np.mean(r["returns"])), color=colour, ls=":", lw=0.8)
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.ticklabel_format(axis="x", style="sci", scilimits=(3, 3))
    axes[0].set_ylabel("training episode return")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        "Graph agent: training-episode return (line: mean over seeds, band: min-max; "
        "dashed: greedy, dotted: random, deterministic evaluation)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_settings(gamma: list[str], reward_scaling: list[str]) -> dict[str, dict]:
    """``env_settings`` from the CLI's ``ENV=VALUE`` / ``ENV=on|off`` overrides."""

    def pairs(items: list[str], option: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in items:
            env, sep, value = item.partition("=")
            if not sep or not value:
                raise ValueError(f"{option} expects ENV=VALUE, got {item!r}")
            out[env.strip()] = value.strip()
        return out

    gammas: dict[str, float] = {}
    for env, value in pairs(gamma, "--gamma").items():
        try:
            gammas[env] = float(value)
        except ValueError:
            raise ValueError(f"--gamma {env}: {value!r} is not a number") from None
    scaling: dict[str, bool] = {}
    for env, value in pairs(reward_scaling, "--reward-scaling").items():
        if value.lower() not in ("on", "off"):
            raise ValueError(f"--reward-scaling {env}: expected on or off, got {value!r}")
        scaling[env] = value.lower() == "on"
    return env_settings(gammas, scaling)


def train_jobs(args: argparse.Namespace, settings: dict[str, dict]) -> list[tuple]:
    """One ``train_job`` per env, size and seed, with the env's (possibly overridden) settings."""
    jobs: list[tuple] = []
    for env_id in args.envs:
        s = settings[SHORT[env_id]]
        first_50 = args.first_seed if args.first_seed_50 is None else args.first_seed_50
        for n, first, count in ((50, first_50, args.seeds_50), (20, args.first_seed, args.seeds)):
            jobs += [
                (train_job, env_id, n, seed, args.steps, args.episodes, str(args.out_dir))
                + (s["gamma"], s["reward_scaling"])
                for seed in range(first, first + count)
            ]
    return jobs


def _env_id(name: str) -> str:
    """An env id from an id or its short name ("RGC" -> "graphenv/RGC-v0")."""
    by_short = {short: env_id for env_id, short in SHORT.items()}
    if name in SHORT:
        return name
    if name.upper() in by_short:
        return by_short[name.upper()]
    raise argparse.ArgumentTypeError(
        f"unknown env {name!r}; choose from {', '.join(by_short)} (or their ids)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run every job, then write the table, the raw results and the figure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--envs",
        nargs="*",
        type=_env_id,
        default=list(ENVS),
        help="envs by id or short name (RGC, OD, SAR, CF); default: all four",
    )
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per training run")
    parser.add_argument(
        "--no-random",
        action="store_true",
        help="skip the random-policy jobs (e.g. when merging with an earlier run's via --from-raw)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="training seeds at N = 20")
    parser.add_argument("--seeds-50", type=int, default=2, help="training seeds at N = 50")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="first training seed at every size (e.g. 1 to add seeds to an earlier run's seed 0, "
        "or 101 for new seeds)",
    )
    parser.add_argument(
        "--first-seed-50",
        type=int,
        default=None,
        help="first training seed at N = 50 only (default: --first-seed)",
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--throughput-steps", type=int, default=4096)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument(
        "--from-raw",
        nargs="*",
        type=Path,
        default=None,
        help="no runs: write the table, the figure and one merged raw.jsonl (training curves "
        "compacted to 1,024-step windows) from these raw.jsonl files (runs split over several "
        "processes, e.g. one per pair of envs)",
    )
    parser.add_argument(
        "--gamma",
        action="append",
        default=[],
        metavar="ENV=VALUE",
        help="override an env's discount for this run's training (e.g. OD=0.99; repeatable; "
        "ENV is RGC, OD, SAR or CF); recorded in the raw rows",
    )
    parser.add_argument(
        "--reward-scaling",
        action="append",
        default=[],
        metavar="ENV=on|off",
        help="override whether an env's rewards are scaled by VecNormalize (e.g. OD=on; "
        "repeatable); recorded in the raw rows",
    )
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.gamma, args.reward_scaling)
    except ValueError as err:
        parser.error(str(err))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.from_raw is not None:
        results = [json.loads(line) for f in args.from_raw for line in f.read_text().splitlines()]
        for r in results:
            if r.get("curve"):
                r["curve"] = compact_curve(r["curve"])
        # the merged results, curves compacted (what the repository keeps)
        with (args.out_dir / "raw.jsonl").open("w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in results)
        steps = max((r.get("steps", 0) for r in results if r["kind"] == "train"), default=0)
        report = format_report(results, steps or args.steps, args.episodes)
        print(report)
        (args.out_dir / "table.md").write_text(report + "\n")
        plot_curves(results, args.out_dir / "learning_curves.png")
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    jobs = train_jobs(args, settings)
    for env_id in args.envs:
        if args.throughput_steps:
            jobs += [(throughput_job, env_id, p, args.throughput_steps) for p in ("mlp", "graph")]
        if not args.no_random:
            jobs += [(random_job, env_id, n, args.episodes) for n in (20, 50)]

    results: list[dict] = []
    start = time.perf_counter()
    raw = args.out_dir / "raw.jsonl"
    raw.write_text("")
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(fn, *rest): (fn.__name__, rest[:3]) for fn, *rest in jobs}
        for future in as_completed(futures):
            out = future.result()["results"]
            results += out
            with raw.open("a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in out)
            name, what = futures[future]
            print(
                f"[{time.perf_counter() - start:7.1f}s] {name} {what}", file=sys.stderr, flush=True
            )
    report = format_report(results, args.steps, args.episodes)
    print(report)
    (args.out_dir / "table.md").write_text(report + "\n")
    plot_curves(results, args.out_dir / "learning_curves.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
