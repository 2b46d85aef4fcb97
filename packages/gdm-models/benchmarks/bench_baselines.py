"""Training-step benchmark of the baselines (G-RSSM, EA-GWM, Vanilla GWM), fast vs reference.

For each model and environment (paper presets, OD- and SAR-like batches of B = 8 windows of
L = 20 transitions on 15-25-node graphs) one Adam training step (loss, backward, gradient
clipping, optimizer step) is timed twice in the same run, on the same batch and weights:

* ``fast``: the model's ``loss`` (the optimised path);
* ``ref``: the step-by-step eager reference of :mod:`gdm_models.reference` (the
  code before the optimisation).

Printed per path: ms per step (median of the timed steps), and from ``torch.profiler`` the
CUDA kernels launched per step (``--device cuda``) or the aten ops per step (``--device
cpu``), plus the fast/ref time ratio. Optionally (``--imagine``) one-step imagination of 30
samples at N = 1000 (seconds), and (``--compile MODE``) a third path, ``compiled``: the fast
path after ``model.enable_compile(mode=MODE)`` (the whole tensor-only loss compiled, batches
padded to a multiple of 8 nodes); its first (compiling) step is reported separately.

Usage::

    uv run python packages/gdm-models/benchmarks/bench_baselines.py --device cpu [--quick]
    python3 packages/gdm-models/benchmarks/bench_baselines.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np
import torch
from gdm_models import EpisodeDataset, FeatureScaler, TrainConfig, get_hyperparameters, make_model
from gdm_models.data import OBS_KEYS
from gdm_models.reference import grssm_loss_reference, gwm_loss_reference
from gdm_models.synthetic import ENV_SCHEMAS, schema_episode
from gdm_models.training.step import train_step

#: the trainers' gradient-norm clipping (gdm_models.TrainConfig's default)
CLIP = TrainConfig().grad_clip

SCHEMAS = {env: ENV_SCHEMAS[env] for env in ("OD", "SAR")}
MODELS = ("g-rssm", "ea-gwm", "vanilla-gwm")
SIZES = (15, 18, 20, 23, 25)  # paper preset's training graph sizes


def setup(name: str, env: str, device: torch.device, B: int = 8, L: int = 20):
    """Model with the paper preset of ``env`` and one padded batch (B windows of L steps)."""
    schema = SCHEMAS[env]
    rng = np.random.default_rng(0)
    # sparse graphs (mean degree ~4), as in the envs
    eps = [schema_episode(schema, int(n), L + 5, rng, edge_p=4.0 / n) for n in rng.choice(SIZES, B)]
    scaler = FeatureScaler.fit(eps, schema)
    torch.manual_seed(0)
    model = make_model(name, schema, scaler, **get_hyperparameters(name, env)["model"]).to(device)
    batch = EpisodeDataset(eps, schema).make_batch([(i, 0) for i in range(B)], seq_len=L)
    return model, batch.to(device)


def step_fn(model, batch, path: str, compile_mode: str | None = None) -> Callable[[], None]:
    """One training step (as in the trainer, without its logging) on the chosen path."""
    ref = grssm_loss_reference if model.model_name == "g-rssm" else gwm_loss_reference
    loss_fn = model.loss if path != "ref" else (lambda b, g: ref(model, b, g))
    if path == "compiled" and not model.enable_compile(mode=compile_mode):
        raise RuntimeError("torch.compile is unavailable")
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=model.device).manual_seed(0)

    params = list(model.parameters())

    def step() -> None:  # the trainer's step (loss, backward, clipping, Adam) on this loss
        train_step(lambda: loss_fn(batch, gen), opt, params, CLIP, nullcontext())

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_step(step: Callable[[], None], device: torch.device, warmup: int, reps: int) -> float:
    """Median ms per step."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def count_ops(step: Callable[[], None], device: torch.device) -> int:
    """CUDA kernels (cuda) or aten ops (cpu) of one step, from torch.profiler."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        step()
        _sync(device)
    events = prof.key_averages()
    if device.type == "cuda":
        return sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(e.count for e in events if e.key.startswith("aten::"))


def imagine_seconds(name: str, device: torch.device, n: int = 1000, samples: int = 30) -> float:
    """One-step imagination of ``samples`` samples on an n-node graph (OD preset)."""
    model, _ = setup(name, "OD", device)
    ep = schema_episode(SCHEMAS["OD"], n, 1, np.random.default_rng(1), edge_p=4.0 / n)
    latent = model.observe({k: ep[k][:1] for k in OBS_KEYS}, None, generator=0)
    model.imagine(latent, ep["action_nodes"][0], 2, generator=0)  # warm-up
    _sync(device)
    t0 = time.perf_counter()
    model.imagine(latent, ep["action_nodes"][0], samples, generator=1)
    _sync(device)
    return time.perf_counter() - t0


def print_compiled(
    name: str, env: str, device: torch.device, mode: str, warmup: int, reps: int, unit: str
) -> None:
    """Time the ``compiled`` path (see the module docstring); report failures, don't raise."""
    model, batch = setup(name, env, device)
    try:
        step = step_fn(model, batch, "compiled", None if mode == "default" else mode)
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        first = time.perf_counter() - t0
        ms = time_step(step, device, warmup, reps)
        ops = count_ops(step, device)
    except Exception as e:  # noqa: BLE001 - a benchmark reports what did not work
        print(f"{name:<12} {env:<4} compiled ({mode}) failed: {type(e).__name__}: {e}"[:400])
        return
    print(
        f"{name:<12} {env:<4} compiled ({mode}): {ms:.1f} ms/step, {ops} {unit}/step, "
        f"first step {first:.1f} s",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--envs", nargs="+", default=list(SCHEMAS), choices=list(SCHEMAS))
    ap.add_argument("--reps", type=int, default=None, help="timed steps per path")
    ap.add_argument("--quick", action="store_true", help="OD only, few steps (< 1 min on CPU)")
    ap.add_argument("--imagine", action="store_true", help="also time imagination at N=1000")
    ap.add_argument(
        "--compile",
        metavar="MODE",
        help="also time the fast path with its loss compiled "
        "(torch.compile mode: default, reduce-overhead, max-autotune-no-cudagraphs, ...)",
    )
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device available")
    envs = ["OD"] if args.quick else args.envs
    reps = args.reps or (2 if args.quick else (20 if device.type == "cuda" else 5))
    warmup = 1 if args.quick else 3
    unit = "kernels" if device.type == "cuda" else "aten ops"
    print(
        f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"B=8 L=20 N in {SIZES}; median of {reps} steps"
    )
    print(
        f"{'model':<12} {'env':<4} {'fast ms':>9} {'ref ms':>9} {'ref/fast':>9} "
        f"{'fast ' + unit:>14} {'ref ' + unit:>14}"
    )
    for name in args.models:
        for env in envs:
            row = {}
            for path in ("fast", "ref"):
                model, batch = setup(name, env, device)
                step = step_fn(model, batch, path)
                ms = time_step(step, device, warmup, reps)
                row[path] = (ms, count_ops(step, device))
            (f_ms, f_ops), (r_ms, r_ops) = row["fast"], row["ref"]
            print(
                f"{name:<12} {env:<4} {f_ms:>9.1f} {r_ms:>9.1f} {r_ms / f_ms:>9.2f} "
                f"{f_ops:>14d} {r_ops:>14d}",
                flush=True,
            )
            if args.compile:
                print_compiled(name, env, device, args.compile, warmup, reps, unit)
    if args.imagine and not args.quick:
        for name in args.models:
            print(f"{name:<12} imagine N=1000 S=30: {imagine_seconds(name, device):.2f} s")


if __name__ == "__main__":
    main()
