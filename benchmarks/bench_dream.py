"""Throughput of the batched dream env against the real env through ``gym.make_vec``.

For every (B episodes, N nodes) it steps ``DreamVectorEnv`` (one batched forward pass of the
world model per step, autoreset from real start states) and the real env as a synchronous
Gymnasium vector env (``gym.make_vec``, same B and N), both under a random valid policy, and
prints env-steps per second (B x steps / seconds) and their ratio, measured in the same run.

    uv run python benchmarks/bench_dream.py            # B in {64, 1024} x N in {20, 100}
    uv run python benchmarks/bench_dream.py --quick    # B = 64, N = 20, a few steps
    uv run python benchmarks/bench_dream.py --device cuda

The model is untrained at the paper's preset size for the env (``get_hyperparameters(model, env)``),
which has the cost of a trained one; its continuation head is set to the real env's
episode-end rate measured in the same run (``--no-calibrate`` keeps the untrained head, which
ends half of all episodes every step). The target on a 2-core CPU is >= 1,000 dream steps/s
at B = 64, N = 20 (see docs/dream.md for measured numbers).
"""

from __future__ import annotations

import argparse
import time

import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import numpy as np
import torch

from graphwm.dream import DreamVectorEnv, real_start
from graphwm.envs import env_id, env_schema, make_env


def random_valid(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random valid node per row of (B, N) masks (any node if none is valid)."""
    scores = rng.random(masks.shape) + masks.astype(np.float64)
    return scores.argmax(axis=1)


def actions_from_nodes(space: gym.spaces.Space, nodes: np.ndarray, rng) -> np.ndarray:
    """Batched actions of a single-env space from one chosen node per row."""
    if isinstance(space, gym.spaces.Discrete):
        return nodes.astype(np.int64)
    k = len(space.nvec)  # MultiDiscrete([N] * k): the chosen node plus k - 1 random ones
    extra = rng.integers(space.nvec[0], size=(len(nodes), k - 1))
    return np.concatenate([nodes[:, None], extra], axis=1).astype(np.int64)


def time_loop(reset, step, space, min_steps: int, min_seconds: float) -> tuple[float, float]:
    """(env-steps per second, episodes ended per env-step) of a vector env under a random
    valid policy; ``step(actions) -> (obs, reward, terminated, truncated, info)``."""
    rng = np.random.default_rng(0)
    obs = reset()
    b = len(obs["action_mask"])
    for _ in range(2):  # warm-up
        obs = step(actions_from_nodes(space, random_valid(obs["action_mask"], rng), rng))[0]
    steps, ended, start = 0, 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < min_seconds:
        out = step(actions_from_nodes(space, random_valid(obs["action_mask"], rng), rng))
        obs = out[0]
        ended += int(np.sum(out[2] | out[3]))
        steps += 1
    return b * steps / (time.perf_counter() - start), ended / (b * steps)


def time_vec(vec, min_steps: int, min_seconds: float) -> tuple[float, float]:
    """:func:`time_loop` of a vector env (dream or real) reset with seed 0."""
    return time_loop(
        lambda: vec.reset(seed=0)[0], vec.step, vec.single_action_space, min_steps, min_seconds
    )


def calibrate_termination(model, rate: float) -> bool:
    """Give an untrained GDM the real env's per-step episode-end rate: its continuation head
    becomes the constant logit ``log((1 - rate) / rate)``, so the dream env autoresets as
    often as the real env (an untrained head ends about half of all episodes every step,
    which would time resets instead of imagination). Returns whether the model has the head."""
    head = getattr(getattr(model, "graph_heads", None), "continuation", None)
    if head is None or not 0.0 < rate < 1.0:
        return False
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(float(np.log((1.0 - rate) / rate)))
    return True


def bench_dream(
    model, env_name: str, b: int, n: int, min_steps: int, min_seconds: float, pool: int = 0
) -> tuple[float, float]:
    """Dream env (steps/s, end rate); ``pool > 0`` autoresets from that many stored real
    start states instead of a fresh real reset each time."""
    real = make_env(env_name, n)
    starts = [real_start(real, seed) for seed in range(pool)] if pool else None
    vec = DreamVectorEnv(model, real, b, seed=0, start_states=starts)
    return time_vec(vec, min_steps, min_seconds)


def bench_real(
    env_name: str, b: int, n: int, min_steps: int, min_seconds: float
) -> tuple[float, float]:
    """Real env (steps/s, end rate) through a synchronous ``gym.make_vec``."""
    vec = gym.make_vec(env_id(env_name), num_envs=b, vectorization_mode="sync", num_nodes=n)
    try:
        return time_vec(vec, min_steps, min_seconds)
    finally:
        vec.close()


def verify(model, env_name: str, n: int, steps: int = 5) -> None:
    """Check on the model's device that a one-episode dream rollout draws what the model's
    own ``observe`` + ``imagine_multi`` draw with the same generator (prints the largest
    differences: one step function, so zero up to float rounding)."""
    from gdm_models import predictions_to_numpy

    env = make_env(env_name, n)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = np.zeros((steps, n), np.int8)
    actions[np.arange(steps), rng.integers(n, size=steps)] = 1
    vec = DreamVectorEnv(model, env, 1)
    g = torch.Generator(device=model.device).manual_seed(3)
    expected = model.imagine_multi(model.observe(obs, None, generator=g), actions, 1, generator=g)
    g = torch.Generator(device=model.device).manual_seed(3)
    with torch.no_grad():
        state = model.start(vec.core.model_inputs([obs]), g)
        worst: dict[str, float] = {}
        for k in range(steps):
            a = torch.as_tensor(actions[k : k + 1], dtype=torch.float32, device=model.device)
            pred, state = model.step(state, a, g)
            got = predictions_to_numpy(pred)
            for key, value in expected[k].items():
                diff = float(np.abs(got[key].astype(float) - value.astype(float)).max(initial=0))
                worst[key] = max(worst.get(key, 0.0), diff)
    print("verify (max |dream - observe/imagine_multi|):", worst)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="SAR")
    parser.add_argument("--model", default="gdm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch default)")
    parser.add_argument("--quick", action="store_true", help="B = 64, N = 20, a few steps")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--verify", action="store_true", help="check against the model's API")
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="keep the untrained continuation head (else: the real env's episode-end rate)",
    )
    parser.add_argument(
        "--start-pool",
        type=int,
        default=0,
        help="also time autoresets from this many stored real start states (0: only live resets)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from gdm_models import get_hyperparameters, make_model

    torch.manual_seed(0)
    preset = get_hyperparameters(args.model, args.env)
    model = make_model(args.model, env_schema(args.env), None, **preset["model"]).to(args.device)
    model.eval()
    if args.verify:
        verify(model, args.env, 20)
    grid = [(64, 20)] if args.quick else [(b, n) for b in args.batches for n in args.sizes]
    min_steps, min_seconds = (5, 1.0) if args.quick else (10, 3.0)
    print(
        f"{args.model} ({args.env} preset) on {args.device}, torch threads "
        f"{torch.get_num_threads()}"
    )
    pool = args.start_pool
    head = f"{'B':>5} {'N':>4} {'dream steps/s':>14} {'real steps/s':>13} {'dream/real':>11}"
    head += f" {'ends/step real':>15} {'dream':>6}"
    print(head + (f" {'pooled dream/s':>15} {'pooled/real':>12}" if pool else ""))
    for b, n in grid:
        real, real_rate = bench_real(args.env, b, n, min_steps, min_seconds)
        if not args.no_calibrate and not calibrate_termination(model, real_rate):
            print("(the model has no GDM continuation head: not calibrated)")
        dream, dream_rate = bench_dream(model, args.env, b, n, min_steps, min_seconds)
        line = f"{b:>5} {n:>4} {dream:>14.0f} {real:>13.0f} {dream / real:>11.2f}"
        line += f" {real_rate:>15.3f} {dream_rate:>6.3f}"
        if pool:
            pooled, _ = bench_dream(model, args.env, b, n, min_steps, min_seconds, pool)
            line += f" {pooled:>15.0f} {pooled / real:>12.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
