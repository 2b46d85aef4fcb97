"""Vectorised Gram matrices of the GDD kernels (paper, section "Graph Distribution Distance").

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the backends call into this module, so import the protocol for typing only
    from .backend import Backend

__all__ = [
    "ComponentGrams",
    "pair_indices",
    "node_continuous_terms",
    "node_categorical_terms",
    "graph_continuous_terms",
    "graph_categorical_terms",
    "jaccard_gram",
    "jaccard_from_counts",
    "edge_counts",
    "symmetric_from_pairs",
    "upper_support",
    "component_grams",
]

# Bytes allowed for one (B, pairs, N) temporary; a handful of them live at once.
_CHUNK_BYTES = 2**20


@dataclass(frozen=True)
class ComponentGrams:
    """Gram matrices ``(B, T, T)`` of the four kernels whose MMDs make up GDD^2."""

    node: np.ndarray  # K_add^n
    graph: np.ndarray  # K_add^g
    edge: np.ndarray  # K_J
    joint: np.ndarray  # K_joint

    def total(self, weights: Sequence[float], epsilon: float) -> np.ndarray:
        """K = w_n K_add^n + w_g K_add^g + w_e K_J + eps K_joint (paper, factorised kernel)."""
        w_n, w_g, w_e = weights
        return w_n * self.node + w_g * self.graph + w_e * self.edge + epsilon * self.joint


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
        inv_var = 1.0 / float(sigma[f]) ** 2
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
        u *= 1.0 / float(sigma[f]) ** 2  # |g_f - g'_f|^2 / sigma_f^2
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


def jaccard_gram(
    adjacencies: Sequence[np.ndarray], supports: Sequence[np.ndarray], backend: Backend
) -> np.ndarray:
    """Jaccard kernel K_J over the pooled samples of one problem.

    Args:
        adjacencies: sample blocks (S_k, N, N), 0/1 symmetric, concatenated in order.
        supports: for each block, the (N, N) bool union of its non-zero pattern.
        backend: computes the intersection and edge counts of each column chunk.

    Returns:
        (T, T) with K_J = |E ∩ E'| / |E ∪ E'|, K_J(∅, ∅) = 1 and K_J(∅, E) = 0 for E ≠ ∅
        (paper). Edges are the strict upper triangle, so an undirected edge counts once;
        unions are |E| + |E'| - |E ∩ E'|.
    """
    t = sum(a.shape[0] for a in adjacencies)
    n = adjacencies[0].shape[1]
    if n == 0:
        return np.ones((t, t))
    flat = upper_support(supports, n)
    inter = np.zeros((t, t))
    sizes = np.zeros(t)
    # Column chunks of < 2**24 edges, so float32 products of 0/1 values count exactly.
    step = min(2**24 - 1, max(1, backend.chunk_bytes // (4 * t)))
    for start in range(0, flat.size, step):
        cols = flat[start : start + step]
        z = np.concatenate([a.reshape(a.shape[0], n * n)[:, cols] for a in adjacencies])
        chunk_inter, chunk_sizes = backend.edge_counts(z.astype(np.float32))
        inter += chunk_inter  # |E ∩ E'|
        sizes += chunk_sizes  # |E|
    return jaccard_from_counts(inter, sizes)


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


def component_grams(
    node_continuous: np.ndarray,
    node_categorical: np.ndarray,
    graph_continuous: np.ndarray,
    graph_categorical: np.ndarray,
    edge: np.ndarray,
    *,
    sigma_node: np.ndarray,
    sigma_graph: np.ndarray,
    lam_node: np.ndarray,
    lam_graph: np.ndarray,
    cards_node: Sequence[int],
    multipliers: np.ndarray,
    backend: Backend,
) -> ComponentGrams:
    """All four component Gram matrices of a pooled batch.

    Args:
        node_continuous: (B, T, N, Fnc); node_categorical: (B, T, N, Fnk);
        graph_continuous: (B, T, Fgc); graph_categorical: (B, T, Fgk);
        edge: (B, T, T) Jaccard Gram matrices from :func:`jaccard_gram`;
        the remaining arguments are the per-column bandwidths, weights and cardinalities;
        backend: runs the heavy per-node work (see :class:`gdd_metric.backend.Backend`).
    """
    b, t, n, f_nc = node_continuous.shape
    f_nk = node_categorical.shape[-1]
    f_gc = graph_continuous.shape[-1]
    f_gk = graph_categorical.shape[-1]
    add_nc, dist_nc = backend.node_continuous_terms(node_continuous, sigma_node, multipliers)
    add_nk, dist_nk = backend.node_categorical_terms(node_categorical, cards_node, lam_node)
    add_gc, dist_gc = graph_continuous_terms(graph_continuous, sigma_graph, multipliers)
    add_gk, dist_gk = graph_categorical_terms(graph_categorical, lam_graph)

    # K_add^n = 1/(|V| |F_n|) sum_v sum_f k_f ; 1 when |V| = 0 or F_n is empty (convention).
    if n > 0 and f_nc + f_nk > 0:
        k_add_n = (add_nc + add_nk) / (n * (f_nc + f_nk))
    else:
        k_add_n = np.ones((b, t, t))
    # K_add^g = 1/|F_g| sum_f k_f ; 1 when F_g is empty.
    k_add_g = (add_gc + add_gk) / (f_gc + f_gk) if f_gc + f_gk > 0 else np.ones((b, t, t))

    m = len(multipliers)
    # K_n^C = 1/|M| sum_r exp(-sum_v D^C(v) / (2 |V| r^2)); K_n^K = exp(-1/|V| sum_v D^K(v)).
    if n > 0 and f_nc > 0:
        k_n_c = sum(np.exp(dist_nc * (-0.5 / (n * float(r) ** 2))) for r in multipliers) / m
    else:
        k_n_c = 1.0
    k_n_k = np.exp(dist_nk * (-1.0 / n)) if n > 0 and f_nk > 0 else 1.0
    # K_g^C = 1/|M| sum_r exp(-D^C / (2 r^2)); K_g^K = exp(-D^K).
    k_g_c = sum(np.exp(dist_gc * (-0.5 / float(r) ** 2)) for r in multipliers) / m if f_gc else 1.0
    k_g_k = np.exp(-dist_gk) if f_gk else 1.0
    # K_joint = K_J K_n^C K_n^K K_g^C K_g^K (paper, eqn. joint_kernel)
    joint = edge * k_n_c * k_n_k * k_g_c * k_g_k
    return ComponentGrams(node=k_add_n, graph=k_add_g, edge=edge, joint=np.asarray(joint))
