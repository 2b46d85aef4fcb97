"""Slow per-pair reference implementation of the GDD, written straight from the paper.

A Python double loop over sample pairs calls :func:`pair_kernels`, which evaluates each
kernel of section "Graph Distribution Distance" for one pair of graphs. It shares no kernel
code with the vectorised implementation and exists to test it and to benchmark against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Unpack

import numpy as np

from .bandwidths import Bandwidths, as_bandwidths
from .mmd import DEFAULT_MULTIPLIERS, GDDOptions, GDDResult, resolve_options, result_of
from .schema import SampleSet, Schema, check_same_nodes, normalise_schema, validate_samples

__all__ = ["pair_kernels", "reference_grams", "reference_gdd", "graph_at"]


def graph_at(samples: SampleSet, k: int) -> dict:
    """Sample ``k`` of a validated sample set as a single-graph dict."""
    return {
        "adjacency": samples.adjacency[k],
        "node_continuous": samples.node_continuous[k],
        "node_categorical": samples.node_categorical[k],
        "graph_continuous": samples.graph_continuous[k],
        "graph_categorical": samples.graph_categorical[k],
    }


def _rbf_mix(sq: np.ndarray, multipliers: Sequence[float]) -> np.ndarray:
    """1/|M| sum_r exp(-sq / (2 r^2)), elementwise."""
    return np.asarray(sum(np.exp(-sq / (2 * r**2)) for r in multipliers)) / len(multipliers)


def pair_kernels(
    g1: Mapping, g2: Mapping, schema: Schema, bandwidths: Bandwidths, multipliers: Sequence[float]
) -> dict[str, float]:
    """K_add^n, K_add^g, K_J and K_joint of one pair of single graphs (numpy over nodes)."""
    sc = np.array([bandwidths.sigma[f] for f in schema.node_continuous], dtype=float)
    lk = np.array([bandwidths.lam[f] for f, _ in schema.node_categorical], dtype=float)
    gsc = np.array([bandwidths.sigma[f] for f in schema.graph_continuous], dtype=float)
    glk = np.array([bandwidths.lam[f] for f, _ in schema.graph_categorical], dtype=float)
    n = g1["adjacency"].shape[0]
    mult = list(multipliers)

    # Scaled squared differences |x_f - x'_f|^2 / sigma_f^2 and weighted mismatches
    sq_n = (g1["node_continuous"] - g2["node_continuous"]) ** 2 / sc**2  # (N, Fnc)
    mis_n = lk * (g1["node_categorical"] != g2["node_categorical"])  # (N, Fnk)
    sq_g = (g1["graph_continuous"] - g2["graph_continuous"]) ** 2 / gsc**2  # (Fgc,)
    mis_g = glk * (g1["graph_categorical"] != g2["graph_categorical"])  # (Fgk,)

    # K_J over undirected edge sets (strict upper triangle); K_J(empty, empty) = 1
    u1 = np.triu(g1["adjacency"], 1) != 0
    u2 = np.triu(g2["adjacency"], 1) != 0
    union = np.count_nonzero(u1 | u2)
    k_j = np.count_nonzero(u1 & u2) / union if union else 1.0

    # D^C_I, D^K_I per node / graph; D = 0 when I is empty (paper)
    d_nc = sq_n.mean(axis=1) if sc.size else np.zeros(n)
    d_nk = mis_n.mean(axis=1) if lk.size else np.zeros(n)
    d_gc = sq_g.mean() if gsc.size else 0.0
    d_gk = mis_g.mean() if glk.size else 0.0
    if n > 0:
        k_n_c = float(np.mean([np.exp(-d_nc.sum() / (2 * n * r**2)) for r in mult]))
        k_n_k = float(np.exp(-d_nk.sum() / n))
    else:  # empty node set: empty sums, distance 0
        k_n_c = k_n_k = 1.0
    k_g_c = float(np.mean([np.exp(-d_gc / (2 * r**2)) for r in mult]))
    k_g_k = float(np.exp(-d_gk))
    joint = k_j * k_n_c * k_n_k * k_g_c * k_g_k

    # Additive kernels: averages of per-feature kernels k_f (1 for an empty average)
    f_n = sc.size + lk.size
    if n > 0 and f_n > 0:
        total = _rbf_mix(sq_n, mult).sum() + np.exp(-mis_n).sum()
        k_add_n = float(total / (n * f_n))
    else:
        k_add_n = 1.0
    f_g = gsc.size + glk.size
    if f_g > 0:
        k_add_g = float((_rbf_mix(sq_g, mult).sum() + np.exp(-mis_g).sum()) / f_g)
    else:
        k_add_g = 1.0
    return {"node": k_add_n, "graph": k_add_g, "edge": float(k_j), "joint": float(joint)}


def reference_grams(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    multipliers: Sequence[float] = DEFAULT_MULTIPLIERS,
) -> tuple[dict[str, np.ndarray], int]:
    """Gram matrices (T, T) of the four kernels over [pred; true], by a double loop."""
    sch = normalise_schema(schema)
    bw = as_bandwidths(bandwidths)
    bw.check(sch)
    p = validate_samples(pred, sch, "pred")
    t = validate_samples(true, sch, "true")
    check_same_nodes(p, t)
    graphs = [graph_at(p, k) for k in range(p.num_samples)]
    graphs += [graph_at(t, k) for k in range(t.num_samples)]
    size = len(graphs)
    grams = {c: np.zeros((size, size)) for c in ("node", "graph", "edge", "joint")}
    for i in range(size):
        for j in range(size):
            for c, v in pair_kernels(graphs[i], graphs[j], sch, bw, multipliers).items():
                grams[c][i, j] = v
    return grams, p.num_samples


def reference_gdd(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    **options: Unpack[GDDOptions],
) -> GDDResult:
    """GDD by the per-pair double loop and the MMD estimator written out with sums; the
    options and their defaults are :func:`gdd_metric.gdd`'s (``backend`` and ``device``
    are checked, then unused)."""
    # the arguments and the result record (the biased clamp) are gdd's; every sum is the oracle's
    opts = resolve_options(schema, bandwidths, **options)
    estimator = opts.estimator
    grams, n = reference_grams(pred, true, schema, bandwidths, opts.multipliers.tolist())
    size = grams["node"].shape[0]
    m = size - n

    def mmd2(k: np.ndarray) -> float:
        xs, ys = range(n), range(n, size)
        if estimator == "biased":  # paper, eqn. mmd_estimate
            sxx = sum(k[i, j] for i in xs for j in xs) / n**2
            syy = sum(k[i, j] for i in ys for j in ys) / m**2
        else:
            sxx = sum(k[i, j] for i in xs for j in xs if i != j) / (n * (n - 1))
            syy = sum(k[i, j] for i in ys for j in ys if i != j) / (m * (m - 1))
        sxy = sum(k[i, j] for i in xs for j in ys) / (n * m)
        return sxx + syy - 2 * sxy

    w_n, w_g, w_e = opts.weights
    comps = {c: float(mmd2(g)) for c, g in grams.items()}
    k_total = w_n * grams["node"] + w_g * grams["graph"] + w_e * grams["edge"]
    total = float(mmd2(k_total + opts.epsilon * grams["joint"]))
    return result_of(total, comps, n, m, opts)
