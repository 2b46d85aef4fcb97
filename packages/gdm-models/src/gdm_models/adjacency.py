"""Recurrent adjacency: edge-update logits, Hard Concrete gates, XOR update
(paper, "Adjacency Prediction and Message Passing").

Symmetry (undirected graphs; docs/architecture.md, contract 8): the edge MLP is evaluated on both
ordered pairs and the logits are symmetrised, l_ij = (f(i, j) + f(j, i)) / 2; one uniform is
drawn per unordered pair (u_ji = u_ij), so gates, toggles and the sampled adjacency are
symmetric. The diagonal (and any padded node) never gets a gate (c = 0), so A_t keeps a zero
diagonal.

Cost: the first layer of MLP_adj is affine in its concatenated input, so
W [h_i, h_j, h_g, z_g, A] + b = P_i + Q_j + (W_g [h_g, z_g] + b) + w_A A_ij with per-node
projections P = h W_i, Q = h W_j. :meth:`EdgeUpdateMLP.forward_dense` uses this by
broadcasting (in checkpointed blocks of graphs beyond a memory budget);
:meth:`EdgeUpdateMLP.forward_chunked` (no autograd; for imagination on large graphs) walks over
blocks sized by a per-device memory budget and adds w_A only on existing edges;
:meth:`EdgeUpdateMLP.forward_plain` concatenates all pairs (the plain form, the reference backend).
All three compute the same function.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import backends
from .backends import compiled_loops
from .member_ops import expand_like, member_apply

__all__ = [
    "HC_BETA",
    "HC_GAMMA",
    "HC_ZETA",
    "EDGE_CHUNK_BYTES",
    "EXP_SPLIT_BOUND",
    "DENSE_BLOCK_BYTES",
    "DENSE_CHECKPOINT_BYTES",
    "EdgeUpdateMLP",
    "same_rows",
    "symmetric_uniform",
    "hard_concrete_gate",
    "hard_concrete_prob_open",
    "hard_concrete_open",
    "xor_update",
    "bernoulli_gate",
    "next_edge_signed_logit",
]

HC_BETA = 2.0 / 3.0
HC_GAMMA = -0.1
HC_ZETA = 1.1
EPS = 1e-6
INIT_UPDATE_LOGIT = -4.0
#: largest |P|, |Q| (first-layer projections) for which :meth:`EdgeUpdateMLP.forward_chunked`
#: splits the SiLU's exponential: e^40 e^40 = 5.5e34 and e^-80 = 1.8e-35 stay normal float32
EXP_SPLIT_BOUND = 40.0

#: block budget (bytes) of the no-grad pairwise edge MLP per device type: cache sized on the
#: CPU (the block is reused and stays in cache), hundreds of MB on a GPU (few, large launches)
EDGE_CHUNK_BYTES: dict[str, int] = {"cpu": 4 << 20, "cuda": 256 << 20, "other": 64 << 20}
#: block budget (bytes) of the differentiable dense edge MLP (training): small on the CPU
#: (allocator- and cache-friendly; 6 MB takes 4 fewer blocks than 4 MB at the paper's sizes at
#: the same step time, docs/models.md), unlimited on a GPU (fewest launches)
DENSE_BLOCK_BYTES: dict[str, int] = {"cpu": 6 << 20, "cuda": 1 << 62, "other": 1 << 62}
#: total activation size (bytes) beyond which the dense blocks are checkpointed (large N)
DENSE_CHECKPOINT_BYTES: dict[str, int] = {"cpu": 1 << 30, "cuda": 4 << 30, "other": 1 << 30}


def _budget(table: dict[str, int], device: torch.device) -> int:
    """Budget in float32 elements for ``device``."""
    return table.get(device.type, table["other"]) // 4


def symmetric_uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    """Uniforms (..., N, N) with one draw per unordered pair (u_ij = u_ji); diagonal 0.5.

    The upper triangle of one (..., N, N) draw mirrored: on the CPU without autograd
    (imagination) in one compiled pass (:func:`gdm_models.cpu_kernels.mirror_upper_`), else
    by torch operations; the same tensor bit for bit."""
    u = torch.rand(shape, generator=generator, device=device)
    n = shape[-1]
    if u.numel() and compiled_loops(u):  # the training step keeps torch's operations
        from .cpu_kernels import mirror_upper_

        mirror_upper_(u.view(-1, n, n))
        return u
    return _mirror_torch(u, n)


def _mirror_torch(u: torch.Tensor, n: int) -> torch.Tensor:
    upper = torch.triu(u, diagonal=1)
    eye = torch.eye(n, device=u.device, dtype=u.dtype)
    return upper + upper.transpose(-1, -2) + 0.5 * eye


def hard_concrete_gate(
    logits: torch.Tensor,
    u: torch.Tensor,
    beta: float = HC_BETA,
    gamma: float = HC_GAMMA,
    zeta: float = HC_ZETA,
) -> torch.Tensor:
    """Hard Concrete gate c in [0, 1] (Louizos et al. 2018) for edge-update logits l.

    l~ = l + beta log(-gamma / zeta);  s = sigmoid((log u - log(1 - u) + l~) / beta);
    c = clip_[0,1](s (zeta - gamma) + gamma).  With the shift, P(c > 0) = sigmoid(l).
    """
    if torch.is_grad_enabled() and (logits.requires_grad or u.requires_grad):
        u = u.clamp(EPS, 1.0 - EPS)
        l_tilde = logits + beta * math.log(-gamma / zeta)  # paper: shifted logit
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + l_tilde) / beta)
        return torch.clamp(s * (zeta - gamma) + gamma, 0.0, 1.0)
    # without autograd: the same operations in the order above, in place on two buffers
    # (imagination at large N: each fresh (S, N, N) buffer costs page faults)
    x = u.clamp(EPS, 1.0 - EPS)
    l_tilde = torch.log1p(torch.neg(x))
    x.log_().sub_(l_tilde)
    torch.add(logits, beta * math.log(-gamma / zeta), out=l_tilde)
    x.add_(l_tilde).div_(beta).sigmoid_()
    return x.mul_(zeta - gamma).add_(gamma).clamp_(0.0, 1.0)


def hard_concrete_prob_open(
    logits: torch.Tensor,
    beta: float = HC_BETA,
    gamma: float = HC_GAMMA,
    zeta: float = HC_ZETA,
    shifted: bool = False,
) -> torch.Tensor:
    """Closed-form P(c > 0).

    For the shifted logit l~ it is sigmoid(l~ - beta log(-gamma / zeta)); for the raw
    edge-update logit l (``shifted=False``) this equals sigmoid(l).
    """
    l_tilde = logits if shifted else logits + beta * math.log(-gamma / zeta)
    return torch.sigmoid(l_tilde - beta * math.log(-gamma / zeta))


def hard_concrete_open(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """1[c > 0] of :func:`hard_concrete_gate` (bool), without the gate's value.

    c > 0 <=> s > -gamma / (zeta - gamma) <=> (logit(u) + l~) / beta > log(-gamma / zeta)
    <=> logit(u) + l > 0 (the shift beta log(-gamma / zeta) of l~ cancels the stretch's
    threshold; any beta > 0, gamma < 0, zeta > 1) <=> u > sigmoid(-l), with u clamped as the
    gate clamps it. The same event up to float rounding at the boundary; two passes over the
    pairs instead of a dozen (imagination, where only A_t = A_{t-1} xor 1[c > 0] is used).
    """
    return u.clamp(EPS, 1.0 - EPS) > torch.neg(logits).sigmoid_()


def bernoulli_gate(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Ablation "bernoulli-adj": straight-through Bernoulli gate.

    Forward: 1[u < sigmoid(l)] (so P(gate > 0) = sigmoid(l), as for Hard Concrete);
    backward: the gradient of sigmoid(l).
    """
    p = torch.sigmoid(logits)
    hard = (u < p).to(p.dtype)
    return hard + p - p.detach()


def xor_update(a_prev: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """XOR update and straight-through next-edge weights.

    A_t = A_{t-1} xor 1[c > 0];  b = (1 - A_{t-1}) c + A_{t-1} (1 - c);
    b_bar = b + sg(A_t - b)  (forward = A_t, gradient = that of b).
    Returns ``(A_t, b_bar)`` as float tensors.
    """
    toggle = (gate > 0).to(gate.dtype)
    a_t = a_prev + toggle - 2.0 * a_prev * toggle  # xor on {0, 1}
    if not (torch.is_grad_enabled() and gate.requires_grad):
        return a_t, a_t  # no autograd: b_bar's forward value is A_t
    b = (1.0 - a_prev) * gate + a_prev * (1.0 - gate)
    b_bar = b + (a_t - b).detach()
    return a_t, b_bar


def next_edge_signed_logit(logits: torch.Tensor, a_prev: torch.Tensor) -> torch.Tensor:
    """lambda with sigmoid(lambda) = p_ij = P(A_t(i,j) = 1) (paper, adjacency KL).

    p_ij = sigmoid(l) if A_{t-1}(i,j) = 0, else 1 - sigmoid(l) = sigmoid(-l).
    """
    return logits * (1.0 - 2.0 * a_prev)


def same_rows(*xs: torch.Tensor) -> list[int]:
    """For each index s of the leading axis, the first index whose slices of every tensor in
    ``xs`` are bitwise equal to those of s (s itself when none before it is).

    Imagination from one latent starts all kappa samples from the same node states, so their
    per-node projections of the edge MLP coincide exactly where their graph latents do (always
    without a graph state): their pairwise blocks, the cost of the GDM's imagination at large
    N, are then computed once. Bitwise comparison (of the bit patterns), so a copied result is
    exactly the one the graph would have computed."""
    b = xs[0].shape[0]
    bits = [x.contiguous().view(b, -1).view(torch.int32) for x in xs]  # float32 bit patterns
    # a cheap key per graph first; equal keys are then compared in full
    keys = torch.stack([x.sum(1, dtype=torch.int64) for x in bits], 1).tolist()
    first: list[int] = []
    seen: dict[tuple[int, ...], list[int]] = {}
    for s, key in enumerate(keys):
        same = next(
            (r for r in seen.get(tuple(key), []) if all(torch.equal(x[r], x[s]) for x in bits)),
            s,
        )
        if same == s:
            seen.setdefault(tuple(key), []).append(s)
        first.append(same)
    return first


def _pair_block(
    pq: tuple[torch.Tensor, torch.Tensor],
    epq: tuple[torch.Tensor, torch.Tensor] | None,
    w2: torch.Tensor,
    out: torch.Tensor,
    buf: torch.Tensor,
    den: torch.Tensor,
) -> None:
    """out = silu(P + Q) @ w2 for one block of pairs, written into ``out``; ``buf`` (and
    ``den``) the block's buffers. With ``epq = (e^-P, e^-Q)``, silu(P + Q) = (P + Q) /
    (1 + e^-P e^-Q), no exponential per pair (:func:`gdm_models.backends.exp_split`)."""
    torch.add(*pq, out=buf)
    if epq is None:
        F.silu(buf, inplace=True)
    else:
        torch.mul(*epq, out=den)
        buf.div_(den.add_(1.0))
    torch.matmul(buf, w2, out=out)


class EdgeUpdateMLP(nn.Module):
    """MLP_adj(h_i, h_j, h_g, z_g, A_{t-1}(i,j)): Linear -> SiLU -> Linear (one hidden layer).

    Args:
        node_dim: dim(h) of the node states. graph_dim: dim([h_g, z_g]) (0 = no graph state).
        hidden: width of the hidden layer.
    """

    def __init__(self, node_dim: int, graph_dim: int, hidden: int) -> None:
        super().__init__()
        self.node_dim, self.graph_dim, self.hidden = node_dim, graph_dim, hidden
        self.w_i = nn.Linear(node_dim, hidden, bias=False)
        self.w_j = nn.Linear(node_dim, hidden, bias=False)
        self.w_g = nn.Linear(graph_dim, hidden, bias=False) if graph_dim else None
        self.b1 = nn.Parameter(torch.zeros(hidden))  # first-layer bias
        self.w_a = nn.Parameter(torch.randn(hidden) / math.sqrt(hidden))
        self.out = nn.Linear(hidden, 1)
        # initial edge-update probability sigmoid(-4) ~ 1.8%: the model starts from the
        # paper's "incremental changes" assumption instead of toggling half of all pairs
        nn.init.constant_(self.out.bias, INIT_UPDATE_LOGIT)

    # ---------------------------------------------------------------- shared parts
    def _graph_term(self, g: torch.Tensor, batch: int, ref: torch.Tensor) -> torch.Tensor:
        if self.w_g is None:
            return member_apply(expand_like, g, self.b1, ndim=1)
        return member_apply(torch.add, self.w_g(g), self.b1, ndim=1)

    @staticmethod
    def symmetrise(f: torch.Tensor) -> torch.Tensor:
        """l_ij = (f_ij + f_ji) / 2."""
        return 0.5 * (f + f.transpose(-1, -2))

    # ---------------------------------------------------------------- implementations
    def forward_plain(self, h: torch.Tensor, g: torch.Tensor, a_prev: torch.Tensor) -> torch.Tensor:
        """The plain form (the ``"reference"`` backend): the first layer on the concatenated
        input [h_i, h_j, h_g, z_g, A_ij] of every ordered pair, what :meth:`forward_dense`
        and :meth:`forward_chunked` compute from per-node projections. (B, N, N)."""
        b, n, d = h.shape
        hi = h[:, :, None, :].expand(b, n, n, d)
        hj = h[:, None, :, :].expand(b, n, n, d)
        gg = g[:, None, None, :].expand(b, n, n, self.graph_dim)
        x = torch.cat([hi, hj, gg, a_prev[..., None]], dim=-1)
        wg = [self.w_g.weight] if self.w_g is not None else []
        w1 = torch.cat([self.w_i.weight, self.w_j.weight, *wg, self.w_a[:, None]], dim=1)
        f = self.out(F.silu(F.linear(x, w1, self.b1))).squeeze(-1)
        return self.symmetrise(f)

    def forward_dense(
        self, h: torch.Tensor, g: torch.Tensor, a_prev: torch.Tensor, block_elems: int = 0
    ) -> torch.Tensor:
        """Symmetric logits (B, N, N) by broadcasting per-node projections (differentiable).

        h: (B, N, node_dim); g: (B, graph_dim); a_prev: (B, N, N) float. Graphs are processed
        in blocks whose (graphs, N, N, hidden) activations fit :data:`DENSE_BLOCK_BYTES` of the
        device (or ``block_elems`` floats if > 0): on the CPU a few MB, which keeps them in
        the allocator's reused memory and in cache (one (160, 25, 25, 128) block is several
        times slower than eight-graph blocks, mostly fresh-page faults); on a GPU everything
        at once. Beyond :data:`DENSE_CHECKPOINT_BYTES` in total, with autograd on, each block
        is checkpointed (recomputed in the backward pass) so the memory held for the backward
        pass is bounded. The result is the same in every case.
        """
        b, n = h.shape[:2]
        per_graph = max(1, n * n * self.hidden)
        budget = block_elems if block_elems > 0 else _budget(DENSE_BLOCK_BYTES, h.device)
        k = max(1, budget // per_graph)
        # a member model (K members folded into b, member-major): a block takes the same k
        # graphs of every member (K times the bytes, the single run's number of blocks), so it
        # stays member-major ([K, k] graphs folded)
        members = self.b1.shape[0] if self.b1.dim() == 2 else 0
        per_member = b // members if members else b
        if k >= per_member:
            return self._dense_block(h, g, a_prev)
        ckpt = torch.is_grad_enabled() and b * per_graph > _budget(DENSE_CHECKPOINT_BYTES, h.device)
        parts = []
        for s in range(0, per_member, k):
            if members:
                args = tuple(
                    x.view(members, per_member, *x.shape[1:])[:, s : s + k].flatten(0, 1)
                    for x in (h, g, a_prev)
                )
            else:
                args = (h[s : s + k], g[s : s + k], a_prev[s : s + k])
            if ckpt:
                part = checkpoint(self._dense_block, *args, use_reentrant=False)
            else:
                part = self._dense_block(*args)
            parts.append(part.view(members, -1, n, n) if members else part)
        return torch.cat(parts, 1).view(b, n, n) if members else torch.cat(parts)

    def _dense_block(self, h: torch.Tensor, g: torch.Tensor, a_prev: torch.Tensor) -> torch.Tensor:
        pc = self.w_i(h) + self._graph_term(g, h.shape[0], h)[:, None, :]
        pre = pc[:, :, None, :] + self.w_j(h)[:, None, :, :]
        pre = member_apply(torch.addcmul, (pre, a_prev[..., None]), self.w_a, ndim=1)  # + w_A A_ij
        f = self.out(F.silu(pre)).squeeze(-1)
        return self.symmetrise(f)

    @torch.no_grad()
    def forward_chunked(
        self,
        h: torch.Tensor,
        g: torch.Tensor,
        a_prev: torch.Tensor,
        chunk_elems: int = 0,
    ) -> torch.Tensor:
        """Same function as :meth:`forward_dense` for a 0/1 ``a_prev``, without autograd.

        The (B, N, N, hidden) first-layer activations are computed in blocks of at most
        ``chunk_elems`` floats (``0``: the device's budget, :data:`EDGE_CHUNK_BYTES`: cache
        sized on the CPU, hundreds of MB on a GPU): whole graphs per block when a graph fits,
        else blocks of rows (at least one row) written into one reused buffer; a graph whose
        projections equal an earlier graph's bit for bit (:func:`same_rows`; the kappa samples
        of one imagination without a graph state, or with equal graph latents) copies that
        graph's result (:func:`gdm_models.backends.share_identical`). Pairs that are
        edges of ``a_prev`` (few in sparse graphs) are then recomputed with w_A added.
        Peak extra memory: one block plus the (B, N, N) output. On the CPU (float32, the
        split SiLU) one compiled loop per graph replaces the blocks
        (the backend's ``loops``, :func:`gdm_models.cpu_kernels.pair_logits`).
        """
        b, n, _ = h.shape
        hid = self.hidden
        budget = chunk_elems if chunk_elems > 0 else _budget(EDGE_CHUNK_BYTES, h.device)
        pc = self.w_i(h) + self._graph_term(g, b, h)[:, None, :]  # graph term, bias into P
        q = self.w_j(h)
        w2 = self.out.weight.reshape(-1)
        b2 = self.out.bias
        f = h.new_empty(b, n, n)
        # silu(x) = x / (1 + e^-x) and e^-(P_i + Q_j) = e^-P_i e^-Q_j: from the exponentials of
        # the per-node projections (2 N x hidden) the pairwise block needs no exponential (its
        # S N^2 hidden SiLUs are the cost of the GDM's imagination at large N); the same
        # function up to float rounding (a few ulp per unit, docs/models.md "Imagination").
        # Only while every |P|, |Q| <= EXP_SPLIT_BOUND (products finite and normal), else silu;
        # on the CPU only, where the exponential is the cost (a GPU's launches stay as they were).
        split = backends.exp_split(h.device) and bool(
            torch.maximum(pc.abs().amax(), q.abs().amax()) <= EXP_SPLIT_BOUND
        )
        if split and compiled_loops(h) and w2.numel() == hid:
            # CPU: one compiled pass per graph (gdm_models.cpu_kernels), existing edges
            # included; the same units, the sum over hidden units in another order
            if bool((pc + self.w_a).abs().amax() <= EXP_SPLIT_BOUND):
                from . import cpu_kernels

                first = same_rows(pc, q) if backends.share_identical() else list(range(b))
                for s in range(b):  # a copied graph also needs A_{t-1}: its edges are in it
                    if first[s] != s and not torch.equal(a_prev[s], a_prev[first[s]]):
                        first[s] = s
                own = [s for s in range(b) if first[s] == s]
                cpu_kernels.pair_logits(pc, q, self.w_a, w2, float(b2), a_prev, own, f)
                for s in range(b):
                    if first[s] != s:  # bitwise the inputs of an earlier graph: its result
                        f[s] = f[first[s]]
                return cpu_kernels.symmetrise_(f)  # bit for bit symmetrise(f), one pass
        epq = (torch.exp(-pc), torch.exp(-q)) if split else None
        self._pairwise_blocks(pc, q, epq, w2, f, budget)
        f += b2
        # existing edges: the first layer has + w_A (A_ij = 1)
        bi, ii, jj = torch.nonzero(a_prev, as_tuple=True)
        if bi.numel():
            f[bi, ii, jj] = torch.matmul(F.silu(pc[bi, ii] + q[bi, jj] + self.w_a), w2) + b2
        return self.symmetrise(f)

    def _pairwise_blocks(
        self,
        pc: torch.Tensor,
        q: torch.Tensor,
        epq: tuple[torch.Tensor, torch.Tensor] | None,
        w2: torch.Tensor,
        f: torch.Tensor,
        budget: int,
    ) -> None:
        """f = silu(P_i + Q_j) @ w2 by torch operations over blocks of at most ``budget``
        floats (whole graphs, or rows of one graph), bitwise-equal graphs once
        (the backend's ``share_identical``); ``epq = (e^-P, e^-Q)``: the SiLU without
        exponentials."""
        b, n, hid = pc.shape
        per_row = max(1, n * hid) * (2 if epq is not None else 1)  # one row of pairs' buffers
        rows = max(1, budget // per_row)
        if rows >= n:  # whole graphs per block
            k = min(b, rows // n)
            buf = pc.new_empty(k, n, n, hid)
            den = pc.new_empty(k, n, n, hid) if epq is not None else buf
            for s in range(0, b, k):
                e = min(b, s + k)
                _pair_block(
                    (pc[s:e, :, None, :], q[s:e, None, :, :]),
                    (epq[0][s:e, :, None, :], epq[1][s:e, None, :, :]) if epq else None,
                    w2, f[s:e], buf[: e - s], den[: e - s],
                )  # fmt: skip
            return
        buf = pc.new_empty(rows, n, hid)
        den = pc.new_empty(rows, n, hid) if epq is not None else buf
        first = same_rows(pc, q) if backends.share_identical() else list(range(b))
        for s in range(b):
            if first[s] != s:  # bitwise the inputs of an earlier graph: its result
                f[s] = f[first[s]]
                continue
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                _pair_block(
                    (pc[s, r0:r1, None, :], q[s, None, :, :]),
                    (epq[0][s, r0:r1, None, :], epq[1][s, None, :, :]) if epq else None,
                    w2, f[s, r0:r1], buf[: r1 - r0], den[: r1 - r0],
                )  # fmt: skip

    def forward(
        self, h: torch.Tensor, g: torch.Tensor, a_prev: torch.Tensor, chunk_elems: int = 0
    ) -> torch.Tensor:
        """Symmetric edge-update logits (B, N, N) in the form the backend picks
        (:func:`gdm_models.backends.edge_mlp_form`: plain, dense with autograd, chunked
        without). ``chunk_elems``: block size of the chunked path in floats (``0``: by the
        device's memory budget, :data:`EDGE_CHUNK_BYTES`)."""
        form = backends.edge_mlp_form()
        if form == "plain":
            return self.forward_plain(h, g, a_prev)
        if form == "dense":
            return self.forward_dense(h, g, a_prev)
        return self.forward_chunked(h, g, a_prev, chunk_elems)
