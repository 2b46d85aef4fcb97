"""SB3 ``VecEnv`` throughput: ``DreamSB3VecEnv`` (one batched model forward pass per step)
against B single ``DreamEnv`` copies in SB3's ``DummyVecEnv`` (B forward passes per step).

    uv run python benchmarks/bench_dream_sb3.py            # B = 32, N = 20, SAR, gdm preset
    uv run python benchmarks/bench_dream_sb3.py --envs 32 --nodes 20 --rounds 5 --threads 2

Both step under random valid actions through SB3's ``VecEnv.step``; the model is untrained at
the paper's preset size (the cost of a trained one). The two are timed in alternating rounds
of ``--seconds`` each (so load that comes and goes hits both alike); printed: each one's env
steps per second per round, and the median of the per-round ratios (target: >= 5x at B = 32).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from graphwm.dream import DreamEnv, DreamVectorEnv
from graphwm.dream.sb3_vec_env import DreamSB3VecEnv
from graphwm.envs import env_schema, make_env


def steps_per_second(vec, masks_of, seconds: float) -> float:
    """Env steps per second of ``vec`` under random valid actions (after one warm-up step)."""
    rng = np.random.default_rng(0)
    vec.seed(0)
    vec.reset()

    def act() -> np.ndarray:
        masks = masks_of(vec)
        return (rng.random(masks.shape) + masks).argmax(axis=1)

    vec.step(act())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        vec.step(act())
        steps += vec.num_envs
    return steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    """Print both rates and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="SAR")
    parser.add_argument("--model", default="gdm")
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from gdm_models import get_hyperparameters, make_model

    torch.manual_seed(0)
    preset = get_hyperparameters(args.model, args.env)
    model = make_model(args.model, env_schema(args.env), None, **preset["model"]).eval()
    b, n = args.envs, args.nodes
    same_step = DreamVectorEnv(model, make_env(args.env, n), b, autoreset_mode="SameStep")
    batched = DreamSB3VecEnv(same_step)
    singles = DummyVecEnv([lambda: DreamEnv(model, make_env(args.env, n)) for _ in range(b)])
    print(f"{args.model} ({args.env} preset), B = {b}, N = {n}, {args.threads} torch thread(s)")
    ratios = []
    for r in range(args.rounds):
        fast = steps_per_second(batched, lambda v: v.action_masks(), args.seconds)
        slow = steps_per_second(
            singles, lambda v: np.stack(v.env_method("action_masks")), args.seconds
        )
        ratios.append(fast / slow)
        print(
            f"round {r}: DreamSB3VecEnv {fast:6.0f} steps/s, DummyVecEnv of DreamEnv "
            f"{slow:5.0f} steps/s, ratio {fast / slow:.2f}x"
        )
    print(
        f"median ratio {statistics.median(ratios):.2f}x over {args.rounds} rounds "
        f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
    )


if __name__ == "__main__":
    main()
