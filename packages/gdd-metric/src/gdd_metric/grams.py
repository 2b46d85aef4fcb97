"""The four component Gram matrices of the GDD on a pooled batch, with the heavy per-node and
Jaccard work delegated to a :class:`~gdd_metric.backend.Backend` and the cheap (T, T)
graph-level terms and assembly in numpy (paper, section "Graph Distribution Distance")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .backend import Backend
from .kernels import (
    graph_categorical_terms,
    graph_continuous_terms,
    jaccard_from_counts,
    upper_support,
)

__all__ = ["ComponentGrams", "jaccard_gram", "component_grams"]


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


def compact_codes(x: np.ndarray, cardinalities: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """Relabel each categorical node feature whose cardinality exceeds the codes one pooled
    item has (``T * N`` of a ``(B, T, N, F)`` batch) by the distinct codes of each item, so
    that the one-hot products are sized by the data, never by the declared cardinality (a
    cardinality of 1e9 would otherwise allocate a one-hot block of N * 1e9 per sample).
    Matches (equal codes within an item) are unchanged, so the Gram matrices are the same."""
    cards = [int(c) for c in cardinalities]
    per_item = int(np.prod(x.shape[1:-1]))
    if not any(c > per_item for c in cards):
        return x, cards
    x = x.copy()
    for f, card in enumerate(cards):
        if card <= per_item:
            continue
        labels = 1
        for b in range(x.shape[0]):
            _, inverse = np.unique(x[b, ..., f], return_inverse=True)
            x[b, ..., f] = inverse.reshape(x.shape[1:-1])
            labels = max(labels, int(inverse.max(initial=0)) + 1)
        cards[f] = labels
    return x, cards


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
    node_categorical, cards_node = compact_codes(node_categorical, cards_node)
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
