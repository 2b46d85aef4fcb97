"""GDM speed/memory benchmark (issue 10): fast path next to the eager reference, same run.

1. Training step at the paper's OD hyperparameters (gdm_models.hyperparameters), B = 8 windows of
   L = 20 transitions on 15-25-node graphs: ms per step (forward, backward, clip, Adam) and,
   from torch.profiler, aten ops per step (CPU) or CUDA kernels per step and the GPU busy
   fraction (CUDA), for
   - ``reference``: the step-by-step eager path (``gdm_models.reference.gdm_loss_reference``),
   - ``fast``: the time-vectorised path (the default training loss),
   - ``fast+compile`` (with ``--compile``): the same through ``torch.compile``.
2. One-step imagination of 30 samples after 5 posterior steps at N in {200, 1000} on sparse
   graphs (mean degree 4): seconds and peak memory (peak RSS of a fresh process on the CPU,
   peak allocated CUDA memory on a GPU), for the budgeted edge-MLP chunks (default) and the
   former fixed 2**17-element row chunks (``reference``).

Run (CPU, < 2 min with --quick):
    uv run python packages/gdm-models/benchmarks/bench_gdm.py --device cpu --quick
GPU (torch with CUDA, no extra dependencies):
    python3 packages/gdm-models/benchmarks/bench_gdm.py --device cuda --compile
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch
from gdm_models import EpisodeDataset, FeatureScaler, TrainConfig, get_hyperparameters, make_model
from gdm_models.data import OBS_KEYS
from gdm_models.gdm import Noise
from gdm_models.reference import gdm_loss_tensors_reference
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode, random_graph
from gdm_models.training.step import train_step
from torch.profiler import ProfilerActivity, profile

#: the trainers' gradient-norm clipping (gdm_models.TrainConfig's default)
CLIP = TrainConfig().grad_clip

OBS = OBS_KEYS
#: the former fixed chunk size of the no-grad edge MLP (the imagination reference)
OLD_CHUNK_ELEMS = 1 << 17
#: CUDA runtime/driver calls that start work on the GPU
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _build(dev: torch.device, name: str = "gdm"):
    preset = get_hyperparameters("gdm", "OD")
    rng = np.random.default_rng(0)
    eps = [random_episode(int(rng.choice([15, 18, 20, 23, 25])), 30, rng) for _ in range(16)]
    scaler = FeatureScaler.fit(eps, SYNTHETIC_SCHEMA)
    torch.manual_seed(0)
    model = make_model(name, SYNTHETIC_SCHEMA, scaler, **preset["model"]).to(dev)
    return model, EpisodeDataset(eps, SYNTHETIC_SCHEMA), preset


# ------------------------------------------------------------------------------- training
def _train_stats(model, batches, dev, reference: bool, steps: int) -> dict[str, float]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    gen = torch.Generator(device=dev).manual_seed(0)

    params = list(model.parameters())

    def loss_fn(m, b, noise):
        return gdm_loss_tensors_reference(m, b, noise) if reference else m.loss_tensors(b, noise)

    def step(b):  # the trainer's step (loss, backward, clipping, Adam) on this loss
        train_step(lambda: loss_fn(model, b, Noise(gen, dev)), opt, params, CLIP, nullcontext())

    t0 = time.perf_counter()
    step(batches[0])  # warm-up (compilation happens here)
    step(batches[1])
    _sync(dev)
    warm = time.perf_counter() - t0
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(batches[i % len(batches)])
        _sync(dev)
        times.append(time.perf_counter() - t0)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        step(batches[0])
        _sync(dev)
        wall = time.perf_counter() - t0
    out = {"ms": 1000 * float(np.median(times)), "warmup_s": warm}
    events = prof.events()
    out["aten_ops"] = sum(1 for e in events if e.name.startswith("aten::"))
    if dev.type == "cuda":
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        launches = [e for e in events if e.name in LAUNCH_CALLS]
        busy = sum(e.device_time for e in kernels) / 1e6  # us -> s
        out.update(kernels=len(kernels), launches=len(launches), gpu_busy=busy / wall)
    return out


def bench_training(dev: torch.device, steps: int, compile_: bool) -> None:
    model, ds, preset = _build(dev)
    model.train()
    rng = np.random.default_rng(0)
    tc = preset["train"]
    batches = [
        ds.sample_batch(tc["batch_size"], rng, seq_len=tc["seq_len"]).to(dev) for _ in range(4)
    ]
    runs = {
        "reference": _train_stats(model, batches, dev, True, max(2, steps // 2)),
        "fast": _train_stats(model, batches, dev, False, steps),
    }
    if compile_:
        print(f"[train] compiled: {model.enable_compile()}", flush=True)
        runs["fast+compile"] = _train_stats(model, batches, dev, False, steps)
        model.disable_compile()
    ref = runs["reference"]
    for name, r in runs.items():
        line = (
            f"[train] {name:>12}: {r['ms']:8.1f} ms/step (x{ref['ms'] / r['ms']:.2f} vs "
            f"reference), {r['aten_ops']} aten ops/step"
        )
        if dev.type == "cuda":
            line += (
                f", {r['kernels']} CUDA kernels/step, {r['launches']} launch calls, "
                f"GPU busy {100 * r['gpu_busy']:.0f}%"
            )
        print(line + f" (warm-up {r['warmup_s']:.1f} s)", flush=True)


# ---------------------------------------------------------------------------- imagination
def _imagine_once(dev_name: str, n: int, chunk_elems: int, samples: int) -> dict[str, float]:
    dev = torch.device(dev_name)
    model, _, _ = _build(dev)
    model.eval()
    model.config.edge_chunk_elems = chunk_elems
    rng = np.random.default_rng(n)
    ep = random_episode(n, 5, rng)
    for t in range(6):
        ep["adjacency"][t] = random_graph(n, 4.0 / n, rng)
    latent = model.observe({k: ep[k] for k in OBS}, ep["action_nodes"][:5], generator=0)
    action = np.zeros(n, np.int8)
    action[:2] = 1
    model.imagine(latent, action, 2, generator=0)  # warm-up
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for r in range(2):
        _sync(dev)
        t0 = time.perf_counter()
        out = model.imagine(latent, action, samples, generator=r)
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    assert out["adjacency"].shape == (samples, n, n)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    return {"s": best, "peak_gib": peak}


def _worker(args, queue) -> None:
    torch.set_num_threads(args[-1])
    queue.put(_imagine_once(*args[:-1]))


def bench_imagination(dev: torch.device, sizes: list[int], samples: int, threads: int) -> None:
    ctx = mp.get_context("spawn")  # a fresh process per run: its own peak RSS
    for n in sizes:
        res = {}
        for name, chunk in (("budgeted", 0), ("reference", OLD_CHUNK_ELEMS)):
            q = ctx.Queue()
            p = ctx.Process(target=_worker, args=((dev.type, n, chunk, samples, threads), q))
            p.start()
            res[name] = q.get()
            p.join()
        new, old = res["budgeted"], res["reference"]
        mem = "peak CUDA alloc" if dev.type == "cuda" else "peak RSS"
        print(
            f"[imagine] N={n} S={samples}: budgeted chunks {new['s']:.2f} s ({mem} "
            f"{new['peak_gib']:.2f} GiB), reference 2**17-element rows {old['s']:.2f} s "
            f"({old['peak_gib']:.2f} GiB): x{old['s'] / new['s']:.1f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="fewer steps, N = 200 only")
    ap.add_argument("--train-steps", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="also time the compiled step")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-imagine", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    print(
        json.dumps(
            {"device": str(dev), "threads": torch.get_num_threads(), "torch": torch.__version__,
             "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else None}
        ),
        flush=True,
    )  # fmt: skip
    if not args.skip_train:
        bench_training(dev, 3 if args.quick else args.train_steps, args.compile)
    if not args.skip_imagine:
        bench_imagination(dev, [200] if args.quick else [200, 1000], 30, args.threads)


if __name__ == "__main__":
    sys.exit(main())
