"""Benchmark of the baselines (Vanilla GWM, EA-GWM, G-RSSM) with the OD presets.

Measures, per model and in a fresh subprocess (so that the peak RSS is the model's own):

* one-step imagination of 30 samples on a 1000-node graph (seconds, peak RSS);
* training iterations/s at the paper's default batch (8 windows of 20 transitions, graphs of
  15-25 nodes).

Speed is reported as a ratio against a reference measured in the same run: one dense batched
matrix product (30, 1000, 1000) @ (30, 1000, 128), the core O(N^2) operation of a step.

Usage::

    uv run python packages/gdm-models/benchmarks/bench_baselines.py [--models g-rssm ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
import torch

SCHEMA = {  # OD-like: one continuous and one binary node feature, one graph feature
    "node_continuous": ["opinion"],
    "node_categorical": {"active": 2},
    "graph_continuous": ["share"],
    "graph_categorical": {},
}
MODELS = ("vanilla-gwm", "ea-gwm", "g-rssm")


def episode(n: int, T: int, rng: np.random.Generator) -> dict:
    adj = np.triu((rng.random((T + 1, n, n)) < 4.0 / n).astype(np.int8), 1)
    adj = adj | adj.transpose(0, 2, 1)
    an = np.zeros((T, n), np.int8)
    an[np.arange(T), rng.integers(0, n, T)] = 1
    return {
        "adjacency": adj,
        "node_continuous": rng.random((T + 1, n, 1)).astype(np.float32),
        "node_categorical": rng.integers(0, 2, (T + 1, n, 1)),
        "graph_continuous": rng.random((T + 1, 1)).astype(np.float32),
        "graph_categorical": np.zeros((T + 1, 0), np.int64),
        "action_mask": np.ones((T + 1, n), np.int8),
        "action_nodes": an,
        "reward": rng.normal(size=T).astype(np.float32),
        "terminated": np.zeros(T, bool),
        "truncated": np.r_[np.zeros(T - 1, bool), True],
    }


def reference_seconds(repeats: int = 3) -> float:
    a, b = torch.rand(30, 1000, 1000), torch.rand(30, 1000, 128)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.bmm(a, b)
        best = min(best, time.perf_counter() - t0)
    return best


def run_one(name: str, train_steps: int) -> dict:
    from gdm_models import EpisodeDataset, FeatureScaler, get_preset, make_model
    from gdm_models.data import OBS_KEYS
    from gdm_models.trainer import train

    rng = np.random.default_rng(0)
    preset = get_preset(name, "OD")
    eps = [episode(int(n), 30, rng) for n in rng.choice([15, 18, 20, 23, 25], 16)]
    sc = FeatureScaler.fit(eps, SCHEMA)
    torch.manual_seed(0)
    model = make_model(name, SCHEMA, sc, **preset["model"])
    big = episode(1000, 1, rng)
    obs = {k: big[k][:1] for k in OBS_KEYS}
    latent = model.observe(obs, None, generator=0)
    model.imagine(latent, big["action_nodes"][0], 2, generator=0)  # warm-up
    t0 = time.perf_counter()
    model.imagine(latent, big["action_nodes"][0], 30, generator=1)
    imagine_s = time.perf_counter() - t0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    ds = EpisodeDataset(eps, SCHEMA)
    train(model, ds, steps=2, progress=False)  # warm-up
    t0 = time.perf_counter()
    train(
        model,
        ds,
        steps=train_steps,
        progress=False,
        **{k: preset["train"][k] for k in ("batch_size", "seq_len")},
    )
    its = train_steps / (time.perf_counter() - t0)
    return {"model": name, "imagine_s": imagine_s, "peak_rss_gib": peak_gib, "train_it_s": its}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--train-steps", type=int, default=10)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.train_steps)))
        return
    ref = reference_seconds()
    print(
        f"reference bmm (30,1000,1000)@(30,1000,128): {ref:.3f} s  "
        f"threads={torch.get_num_threads()}"
    )
    print(
        f"{'model':<12} {'imagine N=1000 S=30':>20} {'ratio':>8} {'peak RSS':>10} "
        f"{'train it/s':>11}"
    )
    for name in args.models:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--train-steps", str(args.train_steps)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{name:<12} {r['imagine_s']:>18.2f} s {r['imagine_s'] / ref:>8.1f} "
            f"{r['peak_rss_gib']:>8.2f} GiB {r['train_it_s']:>11.2f}"
        )


if __name__ == "__main__":
    main()
