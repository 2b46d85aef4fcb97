"""Vectorised kernel terms of the GDD (paper, section "Graph Distribution Distance"): the
numpy primitives that :mod:`gdd_metric.grams` assembles into Gram matrices.

Every function works on a *pooled* batch: ``B`` independent problems (transitions), each with
``T`` samples (pred and true concatenated), and returns ``(B, T, T)`` matrices. No Python loop
runs over sample pairs:

* continuous features use exact differences ``x - x'`` (no ``|x|^2 + |y|^2 - 2xy`` round-off),
  evaluated once per unordered pair ``i < j`` and mirrored, so every Gram matrix is exactly
  symmetric and GDD(X, X) is exactly 0;
* categorical matches (Hamming) are one-hot matrix products;
* Jaccard intersections are matrix products of the flattened strict upper triangles (each
  undirected edge counted once), restricted to the union of the edge supports.

Conventions where the paper leaves a value undefined (documented in docs/gdd-metric.md):
no features of a type => distance 0 (paper) => that kernel is 1; ``|V| = 0`` => the empty sum
over nodes is 0 => node kernels are 1; an additive kernel over an empty feature set is 1;
``K_J(emptyset, emptyset) = 1`` (paper). All kernels equal 1 on the diagonal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "pair_indices",
    "node_continuous_terms",
    "node_categorical_terms",
    "graph_continuous_terms",
    "graph_categorical_terms",
    "jaccard_from_counts",
    "edge_counts",
    "symmetric_from_pairs",
    "upper_support",
]

# Bytes allowed for one (B, pairs, N) temporary; a handful of them live at once.
_CHUNK_BYTES = 2**20


def pair_indices(t: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays (I, J) of the unordered pairs i < j of ``t`` samples."""
    return np.triu_indices(t, k=1)


def symmetric_from_pairs(values: np.ndarray, t: int, diagonal: float) -> np.ndarray:
    """Scatter per-pair values (B, P), pairs ordered as :func:`pair_indices`, into symmetric
    (B, T, T) matrices with ``diagonal`` on the diagonal."""
    i, j = pair_indices(t)
    out = np.empty((values.shape[0], t, t), dtype=np.float64)
    out[:, i, j] = values
    out[:, j, i] = values
    idx = np.arange(t)
    out[:, idx, idx] = diagonal
    return out


def node_continuous_terms(
    x: np.ndarray, sigma: np.ndarray, multipliers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair sums for continuous node features.

    Args:
        x: (B, T, N, F) feature values; sigma: (F,) bandwidths; multipliers: the set M.

    Returns:
        ``add``: (B, T, T), sum_f sum_v k_f^C(x_f(v), x'_f(v)) with
        k_f^C = 1/|M| sum_r exp(-|x - x'|^2 / (2 r^2 sigma_f^2));
        ``dist``: (B, T, T), sum_v D^C_{F_n^C}(x(v), x'(v)) with
        D^C_I = 1/|I| sum_f |x_f - x'_f|^2 / sigma_f^2.
    """
    b, t, n, f_count = x.shape
    if f_count == 0 or n == 0:
        z = np.zeros((b, t, t))
        return z, z
    i_all, j_all = pair_indices(t)
    p = i_all.size
    add = np.zeros((b, p))
    dist = np.zeros((b, p))
    xt = np.ascontiguousarray(np.moveaxis(x, 3, 1))  # (B, F, T, N)
    scales = [-0.5 / float(r) ** 2 for r in multipliers]
    step = max(1, _CHUNK_BYTES // (8 * b * n))
    for f in range(f_count):
        xf = xt[:, f]
        inv_var = (1.0 / float(sigma[f])) ** 2  # never overflows: sigma <= max float
        for start in range(0, p, step):
            sl = slice(start, start + step)
            u = xf[:, i_all[sl]] - xf[:, j_all[sl]]  # (B, chunk, N) exact differences
            np.multiply(u, u, out=u)
            u *= inv_var  # |x_f - x'_f|^2 / sigma_f^2
            dist[:, sl] += u.sum(axis=-1)
            acc = np.zeros(u.shape[:2])
            tmp = np.empty_like(u)
            for scale in scales:
                np.multiply(u, scale, out=tmp)
                acc += np.exp(tmp, out=tmp).sum(axis=-1)
            add[:, sl] += acc / len(scales)
    # Diagonal: identical graphs, every k_f = 1 (sum over nodes = N per feature), distance 0.
    return (
        symmetric_from_pairs(add, t, float(n * f_count)),
        symmetric_from_pairs(dist / f_count, t, 0.0),
    )


def _one_hot(x: np.ndarray, cardinality: int) -> np.ndarray:
    """(B, T, N) integer codes -> (B, T, N * cardinality) float64 one-hot."""
    oh = np.zeros((*x.shape, cardinality), dtype=np.float64)
    np.put_along_axis(oh, x[..., None], 1.0, axis=-1)
    return oh.reshape(x.shape[0], x.shape[1], -1)


def node_categorical_terms(
    x: np.ndarray, cardinalities: Sequence[int], lam: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair sums for categorical node features.

    Args:
        x: (B, T, N, F) integer codes; cardinalities: (F,); lam: (F,) weights lambda_f.

    Returns:
        ``add``: sum_f sum_v exp(-lambda_f 1[x_f(v) != x'_f(v)]);
        ``dist``: sum_v D^K_{F_n^K}(x(v), x'(v)) with D^K_I = 1/|I| sum_f lambda_f 1[x_f != x'_f].
        Matches M_f = #{v : x_f(v) = x'_f(v)} come from one-hot matrix products.
    """
    b, t, n, f_count = x.shape
    add = np.zeros((b, t, t))
    dist = np.zeros((b, t, t))
    if f_count == 0 or n == 0:
        return add, dist
    for f in range(f_count):
        oh = _one_hot(x[..., f], int(cardinalities[f]))
        matches = oh @ oh.transpose(0, 2, 1)  # exact integer counts
        mismatches = n - matches
        add += matches + mismatches * np.exp(-float(lam[f]))
        dist += float(lam[f]) * mismatches
    return add, dist / f_count


def _graph_terms(
    g: np.ndarray, per_feature: Callable[[int], tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Sum the per-feature (kernel, distance) pairs (B, T, T) of graph features g: (B, T, F);
    the distance is averaged over the features (0 when there are none)."""
    b, t, f_count = g.shape
    add = np.zeros((b, t, t))
    dist = np.zeros((b, t, t))
    for f in range(f_count):
        k_f, d_f = per_feature(f)
        add += k_f
        dist += d_f
    return add, dist / max(f_count, 1)


def graph_continuous_terms(
    g: np.ndarray, sigma: np.ndarray, multipliers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair terms for continuous graph features, g: (B, T, F).

    Returns ``add`` = sum_f k_f^C(g_f, g'_f) and ``dist`` = D^C_{F_g^C}(g, g')."""

    def feature(f: int) -> tuple[np.ndarray, np.ndarray]:
        d = g[:, :, None, f] - g[:, None, :, f]
        u = d * d
        u *= (1.0 / float(sigma[f])) ** 2  # |g_f - g'_f|^2 / sigma_f^2 (never overflows)
        acc = np.zeros_like(u)
        for r in multipliers:
            acc += np.exp(u * (-0.5 / float(r) ** 2))
        return acc / len(multipliers), u

    return _graph_terms(g, feature)


def graph_categorical_terms(g: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair terms for categorical graph features, g: (B, T, F) codes.

    Returns ``add`` = sum_f exp(-lambda_f 1[g_f != g'_f]) and ``dist`` = D^K_{F_g^K}(g, g')."""

    def feature(f: int) -> tuple[np.ndarray, np.ndarray]:
        differ = (g[:, :, None, f] != g[:, None, :, f]).astype(np.float64)
        return np.exp(-float(lam[f]) * differ), float(lam[f]) * differ

    return _graph_terms(g, feature)


def edge_counts(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intersection counts ``z @ z.T`` (T, T) and edge counts (T,) of a float32 0/1 chunk."""
    return (z @ z.T).astype(np.float64), z.sum(axis=1, dtype=np.float64)


def jaccard_from_counts(inter: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """K_J from intersection counts (T, T) and edge counts (T,); unions |E| + |E'| - |E ∩ E'|."""
    union = sizes[:, None] + sizes[None, :] - inter  # |E ∪ E'|
    # union = 0 only for two empty edge sets: K_J(empty, empty) = 1
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 1.0)


def upper_support(supports: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Flat indices i * N + j, i < j, of the union of the edge supports."""
    flat = np.flatnonzero(np.logical_or.reduce([np.asarray(s) for s in supports]))
    rows, cols = np.divmod(flat, n)
    return flat[rows < cols]  # strict upper triangle: each undirected edge once
