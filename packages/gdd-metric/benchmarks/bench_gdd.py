"""Benchmark of gdd_metric.gdd against the per-pair reference (issue 4, "Speed").

S = 30 vs 30 samples at N in {20, 100, 1000} with SAR-like and CF-like schemas (each extended
with reward, continuation and action mask, as the experiment layer scores them). Prints the
time of the vectorised gdd(), the time of the per-pair reference (a Python double loop over
sample pairs calling a kernel function) measured in the same run, their ratio, the peak
memory the gdd() call allocates (tracemalloc, numpy allocations included) and a batched
gdd_many() timing. Where the reference would take long, it is timed on a random subset of
the n^2 + m^2 + nm pairs it evaluates and extrapolated (marked "extrapolated").

Targets: N = 1000, 30 vs 30: gdd() < 0.3 s, >= 50x faster than the reference, < 1 GiB.

Run:  uv run python packages/gdd-metric/benchmarks/bench_gdd.py [--quick]
"""

from __future__ import annotations

import argparse
import functools
import time
import timeit
import tracemalloc

import numpy as np
from gdd_metric import Bandwidths, gdd, gdd_many, normalise_schema, validate_samples
from gdd_metric.reference import graph_at, pair_kernels, reference_gdd

SCHEMAS = {
    "SAR-like": {
        "node_continuous": ["stability"],
        "node_categorical": {
            "survivor_present": 2,
            "exit_node": 2,
            "current_location": 2,
            "action_mask": 2,
        },
        "graph_continuous": ["k", "reward"],
        "graph_categorical": {"escorting": 2, "continuation": 2},
    },
    "CF-like": {
        "node_continuous": ["load", "capacity"],
        "node_categorical": {"action_mask": 2},
        "graph_continuous": ["k", "reward"],
        "graph_categorical": {"continuation": 2},
    },
}


def make_sets(schema: dict, n_nodes: int, s: int, rng: np.random.Generator):
    """Two sample sets around one sparse base graph (about 3 N edges, like a Delaunay graph)."""
    sch = normalise_schema(schema)
    m_edges = 3 * n_nodes
    u = rng.integers(0, n_nodes, m_edges)
    v = rng.integers(0, n_nodes, m_edges)
    keep = u != v
    u, v = np.minimum(u[keep], v[keep]), np.maximum(u[keep], v[keep])
    base_nc = rng.random((n_nodes, len(sch.node_continuous)))
    base_nk = np.stack([rng.integers(0, c, n_nodes) for _, c in sch.node_categorical], -1)

    def one_set(shift: float):
        adj = np.zeros((s, n_nodes, n_nodes), dtype=np.int8)
        for k in range(s):
            alive = rng.random(u.size) > 0.05 + shift
            adj[k, u[alive], v[alive]] = 1
            adj[k, v[alive], u[alive]] = 1
        nc = base_nc + rng.normal(0, 0.05, (s, *base_nc.shape)) + shift
        flip = rng.random((s, *base_nk.shape)) < 0.05
        nk = np.where(flip, 0, base_nk)
        gc = rng.normal(shift, 1.0, (s, len(sch.graph_continuous)))
        gk = rng.integers(0, 2, (s, len(sch.graph_categorical)))
        return {
            "adjacency": adj,
            "node_continuous": nc.astype(np.float32),
            "node_categorical": nk.astype(np.int64),
            "graph_continuous": gc.astype(np.float32),
            "graph_categorical": gk.astype(np.int64),
        }

    return one_set(0.0), one_set(0.02)


def bandwidths_for(schema: dict) -> Bandwidths:
    sch = normalise_schema(schema)
    return Bandwidths(
        sigma={f: 0.1 for f in sch.continuous_names},
        lam={f: 2.0 for f in sch.categorical_names},
    )


def best_time(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls, in seconds (the garbage collector left on)."""
    return min(timeit.repeat(fn, setup="gc.enable()", repeat=repeats, number=1))


def reference_time(pred, true, schema, bw, budget_pairs: int, rng) -> tuple[float, bool]:
    """Time of the full per-pair reference; extrapolated from a pair subset when large."""
    sch = normalise_schema(schema)
    p = validate_samples(pred, sch, "pred")
    t = validate_samples(true, sch, "true")
    n, m = p.num_samples, t.num_samples
    pairs_total = n * n + m * m + n * m
    if pairs_total <= budget_pairs:
        t0 = time.perf_counter()
        reference_gdd(pred, true, schema, bw)
        return time.perf_counter() - t0, False
    graphs = [graph_at(p, k) for k in range(n)] + [graph_at(t, k) for k in range(m)]
    idx = rng.integers(0, n + m, (budget_pairs, 2))
    t0 = time.perf_counter()
    for i, j in idx:
        pair_kernels(graphs[i], graphs[j], sch, bw, (0.1, 0.5, 1.0, 2.0, 16.0))
    per_pair = (time.perf_counter() - t0) / budget_pairs
    return per_pair * pairs_total, True


def peak_memory(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N in {20, 100} only")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sizes = (20, 100) if args.quick else (20, 100, 1000)
    s = args.samples
    header = (
        f"{'schema':9} {'N':>5} {'gdd [s]':>9} {'reference [s]':>14} {'ratio':>8} "
        f"{'peak MiB':>9} {'gdd_many/trans [s]':>19}  note"
    )
    print(f"S = {s} vs {s}")
    print(header)
    print("-" * len(header))
    failures = []
    for name, schema in SCHEMAS.items():
        bw = bandwidths_for(schema)
        for n_nodes in sizes:
            pred, true = make_sets(schema, n_nodes, s, rng)
            run = functools.partial(gdd, pred, true, schema, bw)
            fast = best_time(run, 3)
            budget = 4000 if n_nodes <= 100 else 60
            ref, extrapolated = reference_time(pred, true, schema, bw, budget, rng)
            peak = peak_memory(run)
            batch = [(pred, true)] * (20 if n_nodes <= 100 else 4)
            many = best_time(functools.partial(gdd_many, batch, schema, bw), 2) / len(batch)
            ratio = ref / fast
            note = "reference extrapolated from a pair subset" if extrapolated else ""
            print(
                f"{name:9} {n_nodes:5d} {fast:9.4f} {ref:14.3f} {ratio:7.0f}x "
                f"{peak / 2**20:9.1f} {many:19.5f}  {note}"
            )
            if n_nodes == 1000:
                if fast >= 0.3:
                    failures.append(f"{name} N=1000: {fast:.3f} s >= 0.3 s")
                if ratio < 50:
                    failures.append(f"{name} N=1000: only {ratio:.0f}x faster than the reference")
                if peak >= 2**30:
                    failures.append(f"{name} N=1000: peak memory {peak / 2**20:.0f} MiB >= 1 GiB")
    print()
    print("targets (N=1000, 30 vs 30): < 0.3 s, >= 50x vs reference, < 1 GiB peak")
    print("all targets met" if not failures else "MISSED: " + "; ".join(failures))


if __name__ == "__main__":
    main()
