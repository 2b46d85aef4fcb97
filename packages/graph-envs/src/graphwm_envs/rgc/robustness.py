"""Robustness under targeted attack: the expected critical fraction (paper appendix, RGC).

Definition (following Darvariu et al. 2021, whose RGC env the paper uses):

* nodes are removed one at a time in descending order of their degree in the evaluated graph
  G (the *initial* degree: degrees are not recomputed during the attack); nodes of equal degree
  are removed in uniformly random order;
* the critical number m* is the smallest m in {1, ..., N - 2} such that the graph left after
  removing the first m nodes (N - m >= 2 nodes) has more than one connected component; if the
  graph stays connected until a single node is left, m* = N (as in the reference
  implementation, so a complete graph has robustness 1);
* the robustness is E[m*] / N, the expectation over the random tie-breaking orders. A
  disconnected G has robustness 0 (nothing needs to be removed).

The expectation is estimated with ``num_samples`` tie-breaking orders drawn from *fixed* keys
that depend only on (N, num_samples): the estimate is a deterministic, pure function of the
graph (identical across calls and processes), and graphs of the same size share the same
random numbers, so the difference of two robustness values (the RGC reward) carries far less
Monte-Carlo noise than with independent draws.

Algorithm: with ``pos(v)`` the removal position, the graph left after m removals is the
subgraph induced by ``{v : pos(v) >= m}``, whose edges are exactly those with
``min(pos(u), pos(v)) >= m``. A maximum spanning forest for the edge weight
``min(pos(u), pos(v))`` (Kruskal processes the nodes in reverse removal order) restricted to
edges of weight >= m spans that subgraph, so its number of components is
``(N - m) - #{forest edges of weight >= m}`` for every m at once. One scipy
``minimum_spanning_tree`` call on a block-diagonal graph of all sampled orders gives the
forest; the cost is O(K E log) per graph instead of O(K N E) for a removal-by-removal check.
"""

from __future__ import annotations

import functools
import math
import zlib

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import minimum_spanning_tree

MIN_SAMPLES, MAX_SAMPLES = 4, 32
# the tie-break stream keeps its historical key (the import package was `graph_envs`): renaming
# the package must not change RGC's robustness estimates
_KEY_SEED = zlib.crc32(b"graph_envs.rgc.robustness.tiebreak")


def default_num_samples(num_nodes: int) -> int:
    """Tie-breaking orders averaged for a graph of N nodes: 2**floor(log2(800 / N)) in [4, 32].

    Larger graphs have a smaller spread of m* / N over tie-breaking orders, so fewer orders
    reach a similar precision (and RGC at N = 200 stays well above 200 steps/s).
    """
    return int(min(MAX_SAMPLES, max(MIN_SAMPLES, 2 ** math.floor(math.log2(800 / num_nodes)))))


@functools.lru_cache(maxsize=64)
def tiebreak_keys(num_nodes: int, num_samples: int) -> np.ndarray:
    """Fixed (num_samples, N) keys in [0, 1) that order nodes of equal degree (read-only).

    Latin-hypercube keys: within each row the keys are i.i.d. U[0, 1) (so each row's tie-breaking
    order is uniformly random), while each node's keys cover the K strata [j/K, (j+1)/K) once,
    so every node is early and late in its degree class equally often across the rows; this
    lowers the variance of the average at no cost.
    """
    rng = np.random.default_rng([_KEY_SEED, num_nodes, num_samples])
    strata = rng.permuted(np.tile(np.arange(num_samples)[:, None], (1, num_nodes)), axis=0)
    keys = (strata + rng.random((num_samples, num_nodes))) / num_samples
    keys.setflags(write=False)
    return keys


def _check_adjacency(adjacency: np.ndarray) -> np.ndarray:
    adj = np.asarray(adjacency)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise ValueError(f"adjacency must be a square (N, N) array, got shape {adj.shape}")
    if adj.shape[0] < 2:
        raise ValueError(f"robustness needs at least 2 nodes, got {adj.shape[0]}")
    if not np.isin(adj, (0, 1)).all():
        raise ValueError("adjacency must be 0/1")
    if not np.array_equal(adj, adj.T):
        raise ValueError("adjacency must be symmetric")
    if np.any(np.diagonal(adj)):
        raise ValueError("adjacency must have a zero diagonal")
    return adj


def removal_orders(adjacency: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(K, N) removal orders: descending degree, ties broken by ascending key (one row per key)."""
    degrees = np.asarray(adjacency).sum(axis=1, dtype=np.int64)
    # keys in [0, 1) scaled by 0.5 only reorder nodes of equal degree
    return np.argsort(-degrees[None, :] + 0.5 * np.asarray(keys), axis=1, kind="stable")


def critical_counts(adjacency: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """m* (see the module docstring) for each removal order: (K,) int64 in {0, ..., N}.

    ``orders`` is (K, N), each row a permutation of the nodes (first removed first). A
    disconnected graph gives 0 for every order.
    """
    adj = np.asarray(adjacency)
    orders = np.asarray(orders)
    n = adj.shape[0]
    k = orders.shape[0]
    total = n * k
    # rank = N - 1 - pos: Kruskal on weight rank + 1 processes the last-removed nodes first.
    rank = np.empty((k, n), dtype=np.int32)
    np.put_along_axis(rank, orders, np.arange(n - 1, -1, -1, dtype=np.int32)[None, :], axis=1)
    r, c = np.nonzero(adj)
    upper = r < c
    r, c = r[upper], c[upper]
    ra, rb = rank[:, r], rank[:, c]
    hi = np.maximum(ra, rb)  # = N - 1 - min(pos(u), pos(v))
    lo = np.minimum(ra, rb, out=ra)
    # Interleave the K copies (node (copy, rank) -> rank * K + copy) and store each edge in the
    # row of its higher-rank end: CSR order is then weight order, so scipy's internal stable
    # sort of the weights is linear.
    copy = np.arange(k, dtype=np.int32)[:, None]
    hi *= k
    hi += copy
    lo *= k
    lo += copy
    rows, cols = hi.ravel(), lo.ravel()
    order = np.argsort(rows.astype(np.int16) if total < 2**15 else rows, kind="stable")
    rows, cols = rows[order], cols[order]
    row_counts = np.bincount(rows, minlength=total)
    indptr = np.zeros(total + 1, dtype=np.int32)
    np.cumsum(row_counts, out=indptr[1:])
    # weight of row (rank, copy) = rank + 1 >= 1 (scipy reads a 0 weight as no edge)
    data = np.repeat(np.repeat(np.arange(1, n + 1, dtype=np.float64), k), row_counts)
    graph = csr_array((data, cols, indptr), shape=(total, total))
    forest = minimum_spanning_tree(graph).tocoo()
    f_copy = np.asarray(forest.row) % k
    f_minpos = n - np.asarray(forest.data).astype(np.int64)  # min(pos(u), pos(v)) per edge
    counts = np.zeros((k, n + 1), dtype=np.int64)
    np.add.at(counts, (f_copy, f_minpos), 1)
    # forest edges with min pos >= m, for m = 0..N-1
    at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1][:, :n]
    components = (n - np.arange(n))[None, :] - at_least  # components after m removals
    # m = 1..N-2 (at least 2 nodes left); a False column pads N = 2
    disconnected = np.zeros((k, n), dtype=bool)
    disconnected[:, 1 : n - 1] = components[:, 1 : n - 1] > 1
    m_star = np.where(disconnected.any(axis=1), disconnected.argmax(axis=1), n)
    return np.where(components[:, 0] > 1, 0, m_star)


def targeted_robustness(adjacency: np.ndarray, num_samples: int | None = None) -> float:
    """Expected critical fraction under targeted (descending-degree) node removal.

    A pure function of the graph: ties in degree are broken by ``num_samples`` fixed orders
    (:func:`tiebreak_keys`; default :func:`default_num_samples`), and the critical fractions
    are averaged. Raises ``ValueError`` for
    an adjacency that is not a square, symmetric 0/1 matrix with zero diagonal and N >= 2.
    """
    adj = _check_adjacency(adjacency)
    if num_samples is None:
        num_samples = default_num_samples(adj.shape[0])
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    return _robustness(adj, num_samples)


def _robustness(adj: np.ndarray, num_samples: int) -> float:
    """:func:`targeted_robustness` without input validation (the env's hot path)."""
    n = adj.shape[0]
    orders = removal_orders(adj, tiebreak_keys(n, num_samples))
    return float(critical_counts(adj, orders).mean() / n)
