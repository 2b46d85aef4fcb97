"""GDM speed/memory benchmark (issue 5).

1. One-step imagination of 30 samples on a 1000-node graph with the OD preset (dim h = 128):
   wall time and peak resident memory (targets: < 20 s, < 6 GiB on a 2-core CPU).
2. Ratio of one-step imagination time with the naive concatenate-all-pairs edge MLP against
   the factorised/chunked one, at N = 200 (same run, same inputs).
3. Training iterations/s at the default batch (B = 8, L = 20) on 15-25-node graphs.

Run:  uv run python packages/gdm-models/benchmarks/bench_gdm.py [--device cpu|cuda] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import torch
from gdm_models import EpisodeDataset, FeatureScaler, get_preset, make_model
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode, random_graph


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)


def _rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def _observation(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ep = random_episode(n, 1, rng)
    ep["adjacency"][0] = random_graph(n, 4.0 / n, rng)  # sparse, mean degree ~4
    return {
        k: ep[k][:1]
        for k in (
            "adjacency",
            "node_continuous",
            "node_categorical",
            "graph_continuous",
            "graph_categorical",
            "action_mask",
        )
    }


def _imagine_time(model, n: int, samples: int, seed: int, repeats: int = 1) -> float:
    rng = np.random.default_rng(seed)
    obs = _observation(n, rng)
    latent = model.observe(obs, None, generator=seed)
    action = np.zeros(n, np.int8)
    action[rng.integers(0, n, size=2)] = 1
    best = float("inf")
    for r in range(repeats):
        t0 = time.perf_counter()
        out = model.imagine(latent, action, samples, generator=seed + r)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    assert out["adjacency"].shape == (samples, n, n)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    ap.add_argument("--train-steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    print(f"device={dev} threads={torch.get_num_threads()} torch={torch.__version__}")

    preset = get_preset("gdm", "OD")
    rng = np.random.default_rng(0)
    train_eps = [random_episode(int(rng.choice([15, 18, 20, 23, 25])), 30, rng) for _ in range(16)]
    scaler = FeatureScaler.fit(train_eps, SYNTHETIC_SCHEMA)
    torch.manual_seed(0)
    model = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **preset["model"]).to(dev).eval()
    n_big = 200 if args.quick else 1000

    # ---- 1. one-step imagination, 30 samples, N = 1000
    _imagine_time(model, 50, 30, seed=1)  # warm-up
    rss0 = _rss_gib()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_big = _imagine_time(model, n_big, 30, seed=2)
    peak = _peak_rss_gib()
    print(f"[imagine] N={n_big} S=30 one step: {t_big:.2f} s (target < 20 s)")
    print(f"[imagine] peak RSS {peak:.2f} GiB (RSS before {rss0:.2f} GiB; target < 6 GiB)")
    if dev.type == "cuda":
        print(f"[imagine] peak CUDA memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    # ---- 2. factorised/chunked vs naive concatenate-all-pairs edge MLP, N = 200
    n_cmp = 100 if args.quick else 200
    t_fast = _imagine_time(model, n_cmp, 30, seed=3, repeats=3)
    model.edge_mlp.impl = "naive"
    t_naive = _imagine_time(model, n_cmp, 30, seed=3, repeats=3)
    model.edge_mlp.impl = "auto"
    print(
        f"[imagine] N={n_cmp} S=30: factorised {t_fast:.3f} s, naive {t_naive:.3f} s, "
        f"speed-up x{t_naive / t_fast:.1f}"
    )

    # ---- 3. training iterations/s at the default batch
    model.train()
    ds = EpisodeDataset(train_eps, SYNTHETIC_SCHEMA)
    opt = torch.optim.Adam(model.parameters(), lr=preset["train"]["lr"])
    gen = torch.Generator(device=dev).manual_seed(0)
    brng = np.random.default_rng(0)
    steps = 3 if args.quick else args.train_steps
    for i in range(steps + 2):
        if i == 2:
            t0 = time.perf_counter()
        batch = ds.sample_batch(8, brng, seq_len=20).to(dev)
        loss, _ = model.loss(batch, gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
        opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"[train] B=8 L=20 N in 15..25, OD preset: {steps / dt:.2f} it/s")


if __name__ == "__main__":
    main()
