"""Compiled CPU loops (numba) for the GDM's pairwise work in imagination.

On the CPU a pairwise step written as torch operations makes one pass over memory per
operation; these loops make one. They compute the same functions as the torch code they stand
for (``gdm_models.adjacency``), in the same float32 operations per element; where a loop sums
(the edge MLP's second layer) the order of the sum differs from a matrix product's, so the
results agree to float rounding (docs/models.md, "Imagination"). They are the ``"compiled"``
backend (:mod:`gdm_models.backends`, which alone decides where they run: without autograd, on
CPU float32 tensors); the torch code stays the path for autograd and other devices.
``tests/test_backends.py`` runs their Python source (``py_func``) in whole rollouts against
the torch backend, so coverage sees every line.

numba compiles each loop on first use in a process (a few seconds; ``cache=True`` keeps the
machine code on disk for the next process).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

__all__ = [
    "pair_logits",
    "symmetrise_",
    "mirror_upper_",
    "open_xor_",
    "upper_draw_",
    "gcn_normalised",
    "Neighbours",
]

#: side of the square tiles of the transposing loops (two 64 x 64 float32 tiles stay in L1)
TILE = 64


# error_model="numpy": a float division without Python's zero check, so the inner loop
# vectorises (the division is IEEE: x / 0 never occurs here, 1 + e^-P e^-Q >= 1)
@njit(cache=True, error_model="numpy", nogil=True)
def _pair_logits(pc, q, qt, ep, eq, eqt, w_a, epa, w2, b2, a, graphs, out):
    n, h = pc.shape[1], pc.shape[2]
    one = np.float32(1.0)
    acc = np.empty(n, np.float32)
    for s in graphs:
        for i in range(n):
            acc[:] = np.float32(0.0)
            for k in range(h):
                p, e, w = pc[s, i, k], ep[s, i, k], w2[k]
                for j in range(n):
                    # silu(P_i + Q_j) = (P_i + Q_j) / (1 + e^-P_i e^-Q_j), times w_2
                    acc[j] += w * ((p + qt[s, k, j]) / (one + e * eqt[s, k, j]))
            for j in range(n):
                if a[s, i, j] != 0:  # an edge of A_{t-1}: + w_A in the first layer
                    t = np.float32(0.0)
                    for k in range(h):
                        x = (pc[s, i, k] + q[s, j, k]) + w_a[k]
                        t += w2[k] * (x / (one + epa[s, i, k] * eq[s, j, k]))
                    out[s, i, j] = t + b2
                else:
                    out[s, i, j] = acc[j] + b2


@njit(cache=True, nogil=True)
def _symmetrise(f, tile):
    n = f.shape[1]
    half = np.float32(0.5)
    for s in range(f.shape[0]):
        for i0 in range(0, n, tile):
            for j0 in range(i0, n, tile):
                for i in range(i0, min(n, i0 + tile)):
                    for j in range(max(j0, i), min(n, j0 + tile)):
                        v = half * (f[s, i, j] + f[s, j, i])
                        f[s, i, j] = v
                        f[s, j, i] = v


@njit(cache=True, nogil=True)
def _mirror_upper(u, tile):
    n = u.shape[1]
    for s in range(u.shape[0]):
        for i0 in range(0, n, tile):
            for j0 in range(i0, n, tile):
                for i in range(i0, min(n, i0 + tile)):
                    for j in range(max(j0, i + 1), min(n, j0 + tile)):
                        u[s, j, i] = u[s, i, j]
        for i in range(n):
            u[s, i, i] = 0.5


@njit(cache=True, nogil=True)
def _open_xor(thr, u, a_prev, pm, lo, hi, below):
    for s in range(thr.shape[0]):
        sm = s if pm.shape[0] > 1 else 0
        for i in range(thr.shape[1]):
            for j in range(thr.shape[2]):
                if below:  # the Bernoulli gate: u < sigmoid(l)
                    event = u[s, i, j] < thr[s, i, j]
                else:  # Hard Concrete: clamp(u) > sigmoid(-l)
                    event = min(max(u[s, i, j], lo), hi) > thr[s, i, j]
                toggle = pm[sm, i, j] and event
                thr[s, i, j] = np.float32(toggle != (a_prev[s, i, j] != 0))


@njit(cache=True, nogil=True)
def _upper_draw(p, u, node_mask, tile):
    n = p.shape[1]
    for s in range(p.shape[0]):
        for i0 in range(0, n, tile):
            for j0 in range(i0, n, tile):
                for i in range(i0, min(n, i0 + tile)):
                    for j in range(max(j0, i + 1), min(n, j0 + tile)):
                        draw = u[s, i, j] < p[s, i, j] and node_mask[s, i] and node_mask[s, j]
                        p[s, i, j] = np.float32(draw)
                        p[s, j, i] = np.float32(draw)
        for i in range(n):
            p[s, i, i] = 0.0


@njit(cache=True, nogil=True)
def _gcn_degrees(adj, m, self_loops, deg):
    """deg of the masked A (+ I); False as soon as an entry is not 0 or 1."""
    for s in range(adj.shape[0]):
        for i in range(adj.shape[1]):
            acc = np.float32(0.0)
            for j in range(adj.shape[2]):
                v = adj[s, i, j]
                if v != 0 and v != 1:
                    return False
                if (i == j and self_loops and m[s, i]) or (i != j and v and m[s, i] and m[s, j]):
                    acc += np.float32(1.0)
            deg[s, i] = acc
    return True


@njit(cache=True, nogil=True)
def _gcn_normalise(adj, m, self_loops, d, out):
    for s in range(adj.shape[0]):
        for i in range(adj.shape[1]):
            for j in range(adj.shape[2]):
                if i == j:
                    edge = self_loops and m[s, i]
                else:
                    edge = adj[s, i, j] != 0 and m[s, i] and m[s, j]
                out[s, i, j] = d[s, i] * d[s, j] if edge else np.float32(0.0)


@njit(cache=True, nogil=True)
def _neighbours(a):
    """Row pointers and column indices of the non-zeros of (B, N, N), rows (s, i) in order."""
    b, n = a.shape[0], a.shape[1]
    ptr = np.zeros(b * n + 1, np.int64)
    for s in range(b):
        for i in range(n):
            c = 0
            for j in range(n):
                if a[s, i, j] != 0:
                    c += 1
            ptr[s * n + i + 1] = ptr[s * n + i] + c
    idx = np.empty(ptr[-1], np.int32)
    for s in range(b):
        for i in range(n):
            p = ptr[s * n + i]
            for j in range(n):
                if a[s, i, j] != 0:
                    idx[p] = j
                    p += 1
    return ptr, idx


@njit(cache=True, nogil=True)
def _neighbour_mean(ptr, idx, x, out):
    b, n, h = x.shape
    for s in range(b):
        for i in range(n):
            r = s * n + i
            out[s, i, :] = np.float32(0.0)
            deg = ptr[r + 1] - ptr[r]
            if deg == 0:
                continue
            w = np.float32(1.0) / np.float32(deg)  # alpha_ij = 1 / deg(i)
            for p in range(ptr[r], ptr[r + 1]):
                j = idx[p]
                for k in range(h):
                    out[s, i, k] += w * x[s, j, k]


def _f32(x: torch.Tensor, name: str) -> np.ndarray:
    if x.dtype != torch.float32 or x.device.type != "cpu" or not x.is_contiguous():
        raise ValueError(f"{name}: a contiguous float32 CPU tensor is needed, got {x.dtype}")
    return x.numpy()


def pair_logits(
    pc: torch.Tensor,
    q: torch.Tensor,
    w_a: torch.Tensor,
    w2: torch.Tensor,
    b2: float,
    a_prev: torch.Tensor,
    graphs: list[int],
    out: torch.Tensor,
) -> None:
    """out[s, i, j] = sum_k w2_k silu(P_sik + Q_sjk + w_Ak A_sij) + b2 for each graph s in
    ``graphs``, written into ``out`` (B, N, N); the other graphs of ``out`` are left as they
    are.

    ``pc``, ``q`` (B, N, H): the first layer's per-node projections P (bias and graph term
    included) and Q; ``w_a`` (H,) the first layer's weight of A_{t-1}(i, j); ``a_prev``
    (B, N, N) 0/1. The SiLU from the per-node exponentials, silu(x) = x / (1 + e^-P e^-Q)
    (:func:`gdm_models.backends.exp_split`): the caller keeps |P|, |P + w_A|
    and |Q| within :data:`gdm_models.adjacency.EXP_SPLIT_BOUND`.
    """
    b, n, h = pc.shape
    if q.shape != (b, n, h) or w_a.shape != (h,) or w2.shape != (h,):
        raise ValueError(
            f"pair_logits: P {tuple(pc.shape)}, Q {tuple(q.shape)}, w_A {tuple(w_a.shape)}, "
            f"w2 {tuple(w2.shape)} do not match"
        )
    if a_prev.shape != (b, n, n) or out.shape != (b, n, n):
        raise ValueError(f"pair_logits: A {tuple(a_prev.shape)}, out {tuple(out.shape)}")
    pc, q = pc.contiguous(), q.contiguous()
    eq = torch.exp(-q)
    _pair_logits(
        _f32(pc, "P"),
        _f32(q, "Q"),
        _f32(q.transpose(1, 2).contiguous(), "Q"),  # (B, H, N): the inner loop runs over j
        _f32(torch.exp(-pc), "e^-P"),
        _f32(eq, "e^-Q"),
        _f32(eq.transpose(1, 2).contiguous(), "e^-Q"),
        _f32(w_a.contiguous(), "w_A"),
        _f32(torch.exp(-(pc + w_a)), "e^-(P + w_A)"),
        _f32(w2.contiguous(), "w2"),
        np.float32(b2),
        _f32(a_prev.contiguous(), "A"),
        np.asarray(graphs, dtype=np.int64),
        _f32(out, "out"),
    )


def symmetrise_(f: torch.Tensor) -> torch.Tensor:
    """In place, f_ij = f_ji = (f_ij + f_ji) / 2 over (B, N, N): bit for bit
    ``0.5 * (f + f.transpose(-1, -2))``, in one pass."""
    if f.dim() != 3 or f.shape[1] != f.shape[2]:
        raise ValueError(f"symmetrise_: (B, N, N) needed, got {tuple(f.shape)}")
    _symmetrise(_f32(f, "f"), TILE)
    return f


def mirror_upper_(u: torch.Tensor) -> torch.Tensor:
    """In place, u_ji = u_ij for i < j and u_ii = 0.5 over (B, N, N): bit for bit
    ``triu(u, 1) + triu(u, 1).T + 0.5 I`` (one draw per unordered pair), in one pass."""
    if u.dim() != 3 or u.shape[1] != u.shape[2]:
        raise ValueError(f"mirror_upper_: (B, N, N) needed, got {tuple(u.shape)}")
    _mirror_upper(_f32(u, "u"), TILE)
    return u


def open_xor_(
    threshold: torch.Tensor,
    u: torch.Tensor,
    a_prev: torch.Tensor,
    pair_mask: torch.Tensor,
    eps: float,
    below: bool = False,
) -> torch.Tensor:
    """A_t = A_{t-1} xor (pair_mask and clamp(u, eps, 1 - eps) > threshold) as 0/1 floats,
    written over ``threshold`` = sigmoid(-l) (B, N, N) and returned: the no-autograd gate
    and XOR of :meth:`gdm_models.gdm.parts.AdjacencyPart.sample` in one pass (the event
    :func:`gdm_models.adjacency.hard_concrete_open`). ``below``: the Bernoulli gate's event
    u < threshold = sigmoid(l) instead (no clamp). ``pair_mask`` (1 or B, N, N) bool."""
    b, n = threshold.shape[0], threshold.shape[-1]
    if threshold.dim() != 3 or u.shape != threshold.shape or a_prev.shape != threshold.shape:
        raise ValueError(
            f"open_xor_: threshold {tuple(threshold.shape)}, u {tuple(u.shape)}, "
            f"A {tuple(a_prev.shape)} must be one (B, N, N)"
        )
    if pair_mask.dtype != torch.bool or pair_mask.shape not in ((1, n, n), (b, n, n)):
        raise ValueError(f"open_xor_: pair mask {tuple(pair_mask.shape)} {pair_mask.dtype}")
    lo, hi = np.float32(eps), np.float32(1.0) - np.float32(eps)  # 1 - eps rounded as torch's
    _open_xor(
        _f32(threshold, "threshold"),
        _f32(u.contiguous(), "u"),
        _f32(a_prev.contiguous(), "A"),
        pair_mask.contiguous().numpy(),
        lo,
        hi,
        below,
    )
    return threshold


def upper_draw_(p: torch.Tensor, u: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    """A symmetric 0/1 adjacency with zero diagonal written over the probabilities ``p``
    (B, N, N) and returned: for i < j, A_ij = A_ji = 1[u_ij < p_ij] on real nodes
    (``node_mask`` (B, N) bool); the lower triangle of ``p`` and ``u`` is not read. Bit for
    bit the draw of :func:`gdm_models.baselines.common.sample_symmetric_bernoulli`, in one
    pass."""
    if p.dim() != 3 or u.shape != p.shape or node_mask.shape != p.shape[:2]:
        raise ValueError(
            f"upper_draw_: p {tuple(p.shape)}, u {tuple(u.shape)}, node mask "
            f"{tuple(node_mask.shape)} do not match"
        )
    if node_mask.dtype != torch.bool:
        raise ValueError(f"upper_draw_: node mask must be bool, got {node_mask.dtype}")
    _upper_draw(_f32(p, "p"), _f32(u.contiguous(), "u"), node_mask.contiguous().numpy(), TILE)
    return p


def gcn_normalised(
    adjacency: torch.Tensor, node_mask: torch.Tensor, self_loops: bool
) -> torch.Tensor | None:
    """D^-1/2 (A + I) D^-1/2 of a 0/1 adjacency (B, N, N) over real nodes (``node_mask``
    (B, N) bool) in two compiled passes, bit for bit
    :func:`gdm_models.baselines.ea_losses.normalized_adjacency` (its degrees are integers, so
    their sum is exact in any order; d = D^-1/2 by the same torch operations); ``None`` when
    an entry is not 0 or 1 (edge probabilities: the caller's torch operations then)."""
    if adjacency.dim() != 3 or node_mask.shape != adjacency.shape[:2]:
        raise ValueError(
            f"gcn_normalised: adjacency {tuple(adjacency.shape)}, node mask "
            f"{tuple(node_mask.shape)} do not match"
        )
    if node_mask.dtype != torch.bool:
        raise ValueError(f"gcn_normalised: node mask must be bool, got {node_mask.dtype}")
    adj, m = _f32(adjacency.contiguous(), "adjacency"), node_mask.contiguous().numpy()
    deg = torch.empty(adjacency.shape[:2])
    if not _gcn_degrees(adj, m, self_loops, deg.numpy()):
        return None
    d = torch.where(deg > 0, deg.clamp_min(1e-12).rsqrt(), torch.zeros_like(deg))
    out = torch.empty_like(adjacency)
    _gcn_normalise(adj, m, self_loops, _f32(d, "d"), out.numpy())
    return out


class Neighbours:
    """The neighbour lists of a hard 0/1 adjacency (B, N, N), made in one compiled pass, for
    the mean over neighbours of message passing on a sampled graph (alpha_ij = 1 / deg(i)):
    the sparse backend's sum (torch_geometric's, over the same edges in the same order),
    without per-edge message tensors."""

    def __init__(self, adjacency: torch.Tensor) -> None:
        if adjacency.dim() != 3 or adjacency.shape[1] != adjacency.shape[2]:
            raise ValueError(f"Neighbours: (B, N, N) needed, got {tuple(adjacency.shape)}")
        self.shape = tuple(adjacency.shape[:2])
        self.ptr, self.idx = _neighbours(_f32(adjacency.contiguous(), "adjacency"))

    @property
    def num_edges(self) -> int:
        """Non-zeros of the adjacency (ordered pairs)."""
        return int(self.ptr[-1])

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """sum_j alpha_ij x_j over each node's neighbours, x (B, N, H) -> (B, N, H); 0 for a
        node without neighbours."""
        if tuple(x.shape[:2]) != self.shape or x.dim() != 3:
            raise ValueError(f"Neighbours.mean: x {tuple(x.shape)} on graphs {self.shape}")
        out = torch.empty_like(x)
        _neighbour_mean(self.ptr, self.idx, _f32(x.contiguous(), "x"), out.numpy())
        return out
