"""The GDM's posterior step, written once, and its scan (paper, "Training": the recurrence runs
on h^+, z^+ and the teacher-forced adjacency A_t).

:class:`PosteriorStep` is the step of every posterior path: the training loss
(:mod:`gdm_models.gdm.sequence_loss`), ``observe`` / ``observe_at`` and ``start``
(:class:`~gdm_models.gdm.cell.GDMCell`). Like dreamerv3's ``RSSM.observe`` (a scan of one
``_observe`` step), a posterior pass is two stages:

1. :meth:`PosteriorStep.inputs`: everything that depends only on observations, actions or noise,
   for all T steps at once (one product per map instead of T): the action parts of the GRUs'
   input gates (x W_ih^T + b_ih), the observation parts of the first layers of MLP+_n, MLP+_g,
   q_g and q_n (a concatenated input's first linear map split by columns, [x, y] W^T = x W_x^T
   + y W_y^T, from views of the existing weights) and the Gumbel noise of the samples;
2. :func:`scan` of :meth:`PosteriorStep.__call__` over the T steps, from the zero latent.

In the step, node tensors stay flat ((B*N, D), or (K, B*N/K, D) in a member model); pooling
over nodes and broadcasting graph vectors to nodes are products with a pooling matrix and an
indicator. Each state is multiplied once by the stacked weights of every map that reads it
(:class:`~gdm_models.layers.FusedLinear`; e.g. h^+ by message-passing layer 0, GRU_n's hidden
gates of the next step and q_g's Pool-h^+ part), so the carry between steps holds the posterior
state and its products with the next step's GRU weights. The layers' fused forms are tested
against their plain forms, the step against :mod:`gdm_models.reference`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..layers import (
    FusedLinear,
    LayerNormGRU,
    MLPTail,
    block_addmm,
    gru_from_split_gates,
    gru_hidden_blocks,
    gumbel_from_uniform,
    loop_norm,
    onehot_st_gumbel,
    split_first_layer,
    unimix_lerp,
)
from ..losses import masked_mean
from ..member_ops import expand_rows, member_addmm, member_linear
from ..message_passing import FlatMessagePassing
from .latent import PosteriorSequence

__all__ = [
    "Carry",
    "PosteriorStep",
    "fused_transition",
    "StepInputs",
    "scan",
    "stack_outputs",
    "STEP_OUTPUTS",
]

#: the fields a posterior step returns, in order (node tensors flat)
STEP_OUTPUTS = ("h_n_m", "h_g_m", "h_n_p", "h_g_p", "q_g", "z_g_p", "q_n", "z_n_p")


@dataclass
class StepInputs:
    """The observation-, action- and noise-only inputs of one posterior step (node rows flat):
    the GRUs' action gates of the *next* step (``None`` at the last step: their products with
    this step's samples are computed here, with the samples' other readers), the observation
    parts of MLP+_n / MLP+_g / q_g / q_n's first layers, the Gumbel noise and the normalised
    message-passing weights alpha of the observed A_t."""

    gi_n_next: torch.Tensor | None
    pre_hn: torch.Tensor | None
    pre_qn: torch.Tensor
    g_zn: torch.Tensor
    alpha: torch.Tensor
    gi_g_next: torch.Tensor | None = None
    pre_hg: torch.Tensor | None = None
    pre_qg: torch.Tensor | None = None
    g_zg: torch.Tensor | None = None


@dataclass
class Carry:
    """The posterior state entering a step and its products with the transition's weights:
    h, h_g, the GRUs' input gates (action part + z W_z^T) and hidden gates ((r, z) and n parts)."""

    h_n: torch.Tensor
    h_g: torch.Tensor
    gi_n: torch.Tensor
    gh_n: tuple[torch.Tensor, ...]
    gi_g: torch.Tensor | None = None
    gh_g: tuple[torch.Tensor, ...] | None = None


def _linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    return member_linear(x, weight, bias)


def _linear_per_step(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """:func:`~gdm_models.member_ops.member_linear` of each step of x (B, T, ...) on its own."""
    return torch.stack([member_linear(x[:, t], weight, bias) for t in range(x.shape[1])], 1)


def _steps(x: torch.Tensor, keep: int, members: int = 0) -> tuple[torch.Tensor, ...]:
    """(B, T, ..., *tail) -> T tensors (rows, *tail) with the ``keep`` trailing axes kept and
    the leading ones flattened (B first): one copy and one ``unbind`` instead of T slices.
    ``members`` > 0 (B holds that many members, member-major): T tensors (K, rows/K, *tail)."""
    tail = x.shape[x.dim() - keep :]
    lead = (members, -1) if members else (-1,)
    return x.transpose(0, 1).reshape(x.shape[1], *lead, *tail).unbind(0)


class PosteriorStep:
    """One posterior step of the GDM (paper, "Architecture", posterior path with teacher-forced
    A_t), with the cell's weights prepared for a recurrence over B graphs of N nodes (made once
    per pass: the weights change between training steps). ``node_mask`` (B, N)."""

    def __init__(self, cell: Any, node_mask: torch.Tensor, dtype: torch.dtype) -> None:
        c = cell.config
        self.cell, self.c = cell, c
        B, N = node_mask.shape
        H, E = c.hidden_dim, c.embed_dim
        self.B, self.N, self.H = B, N, H
        dev = node_mask.device
        K = self.K = cell.member_count()
        self.rows_n = (K, B * N // K) if K else (B * N,)
        self.rows_g = (K, B // K) if K else (B,)
        self._nmf = node_mask.to(dtype)
        self._pooling(self._nmf)
        deter, nl = cell.deter, cell.node_latent
        self.gru_n = deter.gru_n.cell
        self.w_ih = self.gru_n.weight_ih.split([cell.zn_dim, E], -1)
        self.w_zn = self.w_ih[0].transpose(-1, -2)
        self.norm_n = loop_norm(deter.gru_n.norm)
        self.classes_n = torch.arange(c.node_latent_classes, device=dev)
        self.uniforms: dict[tuple[torch.dtype, int], torch.Tensor] = {}  # 1/C of the unimix
        self.qn_w, self.qn_b = split_first_layer(nl.post_n.mlp, [H, cell.zg_dim, E])
        self.qn_m, self.qn_tail = self.qn_w[0].transpose(-1, -2), MLPTail(nl.post_n.mlp)
        self.mp = FlatMessagePassing(cell.mp, H, cell.hg_dim, cell.zg_dim)
        if c.h_plus:
            self.hn_w, self.hn_b = split_first_layer(deter.post_h_n, [H, E, E])
            self.hn_h, self.hn_tail = self.hn_w[0].transpose(-1, -2), MLPTail(deter.post_h_n)
        # h^+ -> [message-passing layer 0 | GRU_n's hidden gates (r, z | n) | q_g's Pool part]
        hn_blocks: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        hn_blocks += [self.mp.first] if self.mp else []
        hn_blocks += gru_hidden_blocks(self.gru_n)
        if c.graph_state:
            hn_blocks.append(self._graph_weights(cell))
        self.h_n_readers = FusedLinear(hn_blocks)

    def _pooling(self, nmf: torch.Tensor) -> None:
        """Pool (mean over real nodes) and broadcast (graph -> its nodes) as matrices; a member
        model pools and broadcasts within each member's rows (block-diagonal products)."""
        B, N, K = self.B, self.N, self.K
        w_pool = nmf / nmf.sum(1, keepdim=True).clamp_min(1.0)
        Bk = B // K if K else B
        eye = torch.eye(Bk, dtype=nmf.dtype, device=nmf.device)
        pool_mat = (eye[:, :, None] * w_pool.view(-1, 1, Bk, N)).reshape(-1, Bk, Bk * N)
        bcast_mat = eye[:, None, :].expand(Bk, N, Bk).reshape(Bk * N, Bk)  # row b*N+v: graph b
        if K:
            self.bcast_mat = bcast_mat.expand(K, Bk * N, Bk)
        else:
            self.bcast_mat, pool_mat = bcast_mat, pool_mat[0]  # Pool x = pool_mat @ x
        self.pool_mat = pool_mat

    def _graph_weights(self, cell: Any) -> tuple[torch.Tensor, None]:
        """The graph state's fused maps; returns q_g's Pool-h^+ block (a reader of h^+)."""
        c, H, E = self.c, self.H, self.c.embed_dim
        deter, gl = cell.deter, cell.graph_latent
        self.gru_g = deter.gru_g.cell
        self.w_ih_g = self.gru_g.weight_ih.split([cell.zg_dim, E], -1)
        self.norm_g = loop_norm(deter.gru_g.norm)
        self.classes_g = torch.arange(c.graph_latent_classes, device=self.classes_n.device)
        self.qg_w, self.qg_b = split_first_layer(gl.post_g.mlp, [H, H, E])
        self.qg_tail = MLPTail(gl.post_g.mlp)
        mp_g = self.mp.first_g
        # h_g^+ -> [q_g | message-passing layer 0 | GRU_g's hidden gates of the next step]
        hg_blocks: list[tuple[torch.Tensor, torch.Tensor | None]] = [
            (self.qg_w[0].transpose(-1, -2), None)
        ]
        hg_blocks += [(mp_g[0], None)] if mp_g else []
        self.h_g_readers = FusedLinear([*hg_blocks, *gru_hidden_blocks(self.gru_g)])
        # z_g^+ -> [message-passing layer 0 | q_n | GRU_g's input gates of the next step]
        zg_blocks: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        zg_blocks += [(mp_g[1], None)] if mp_g else []
        zg_blocks += [
            (self.qn_w[1].transpose(-1, -2), None),
            (self.w_ih_g[0].transpose(-1, -2), None),
        ]
        self.z_g_readers = FusedLinear(zg_blocks)
        if c.h_plus:
            self.hg_w, self.hg_b = split_first_layer(deter.post_h_g, [H, E, E])
            self.hg_h, self.hg_tail = self.hg_w[0].transpose(-1, -2), MLPTail(deter.post_h_g)
        return (self.qg_w[1].transpose(-1, -2), None)

    # ------------------------------------------------------------------ before the scan
    def inputs(self, seq: PosteriorSequence, split_time: bool = False) -> list[StepInputs]:
        """The observation-, action- and noise-only work of T steps at once
        (:class:`~gdm_models.gdm.latent.PosteriorSequence`). ``split_time``: each step's
        products on its own (``observe``: a latent then does not depend on how many steps
        were observed after it, as products of different row counts may round differently)."""
        a_emb, a_pool, e_v, e_g, alpha, u_zg, u_zn = seq.fields()
        c, K, T = self.c, self.K, e_v.shape[1]
        member_linear = _linear_per_step if split_time else _linear
        gi_n = _steps(member_linear(a_emb, self.w_ih[1], self.gru_n.bias_ih), 1, K)
        g_zn = _steps(gumbel_from_uniform(u_zn), 2, K)
        pre_qn = _steps(member_linear(e_v, self.qn_w[2], self.qn_b), 1, K)
        pre_hn: Sequence[torch.Tensor | None] = (None,) * T
        if c.h_plus:
            pre = member_linear(e_v, self.hn_w[1], self.hn_b)
            pre_hn = _steps(pre + member_linear(e_g, self.hn_w[2])[:, :, None], 1, K)
        alphas = alpha.unbind(1) if alpha.dim() == 4 else (alpha,) * T
        xs = [
            StepInputs(gi_n[t + 1] if t + 1 < T else None, pre_hn[t], pre_qn[t], g_zn[t], alphas[t])
            for t in range(T)
        ]
        self.gi_n0 = gi_n[0]
        if c.graph_state:
            gi_g = _steps(member_linear(a_pool, self.w_ih_g[1], self.gru_g.bias_ih), 1, K)
            assert u_zg is not None  # drawn whenever there is a graph state
            g_zg = _steps(gumbel_from_uniform(u_zg), 2, K)
            pre_qg = _steps(member_linear(e_g, self.qg_w[2], self.qg_b), 1, K)
            pre_hg: Sequence[torch.Tensor | None] = (None,) * T
            if c.h_plus:
                if split_time:
                    w = self._nmf[:, :, None]
                    e_v_pool = torch.stack([masked_mean(e_v[:, t], w, 1) for t in range(T)], 1)
                else:
                    e_v_pool = masked_mean(e_v, self._nmf[:, None, :, None], 2)
                pre = member_linear(e_g, self.hg_w[1], self.hg_b)
                pre_hg = _steps(pre + member_linear(e_v_pool, self.hg_w[2]), 1, K)
            for t, x in enumerate(xs):
                x.gi_g_next = gi_g[t + 1] if t + 1 < T else None
                x.pre_hg, x.pre_qg, x.g_zg = pre_hg[t], pre_qg[t], g_zg[t]
            self.gi_g0 = gi_g[0]
        return xs

    def initial(self, like: torch.Tensor) -> Carry:
        """The zero latent's carry (its products with the GRU weights: the biases), after
        :meth:`inputs` (the first step's action gates)."""
        H, rows_n, rows_g = self.H, self.rows_n, self.rows_g
        gh_n = expand_rows(self.gru_n.bias_hh, rows_n).split([2 * H, H], -1)
        carry = Carry(like.new_zeros(*rows_n, H), like.new_zeros(*rows_g, 0), self.gi_n0, gh_n)
        if not self.c.graph_state:  # the graph latent's zero-width outputs, made once
            self._no_graph = (like.new_zeros(*rows_g, 0, 0), carry.h_g)
        else:
            carry.h_g, carry.gi_g = like.new_zeros(*rows_g, H), self.gi_g0
            carry.gh_g = expand_rows(self.gru_g.bias_hh, rows_g).split([2 * H, H], -1)
        return carry

    # ------------------------------------------------------------------ the step
    def __call__(self, carry: Carry, x: StepInputs) -> tuple[Carry, tuple[torch.Tensor, ...]]:
        """One posterior step: (the next carry, the :data:`STEP_OUTPUTS` of this step)."""
        c = self.c
        # 1. transition (paper, "Recurrent Dynamics"): h^- = LN(GRU([z, a] | h)), carried gates
        h_n_m = self.norm_n(gru_from_split_gates(carry.gi_n, carry.h_n, *carry.gh_n))
        h_g_m = carry.h_g
        if c.graph_state:
            assert carry.gi_g is not None and carry.gh_g is not None
            h_g_m = self.norm_g(gru_from_split_gates(carry.gi_g, carry.h_g, *carry.gh_g))
        # 2. h-plus update ("Posterior-Informed Deterministic State"): h^+ = h^- + sigmoid(g) dh
        h_n_p, h_g_p = h_n_m, h_g_m
        if c.h_plus:
            assert x.pre_hn is not None
            h_n_p = _h_plus(h_n_m, member_addmm(x.pre_hn, h_n_m, self.hn_h), self.hn_tail)
            if c.graph_state:
                assert x.pre_hg is not None
                h_g_p = _h_plus(h_g_m, member_addmm(x.pre_hg, h_g_m, self.hg_h), self.hg_tail)
        hn_y = self.h_n_readers(h_n_p)
        gh_n = hn_y[1:3] if self.mp else hn_y[0:2]
        # 3. graph latent ("Adjacency Prediction and Message Passing"): z_g^+ ~ q_g(. | h_g^+,
        # Pool h^+, e_g)
        gi_g = gh_g = mp_g = None
        if not c.graph_state:
            q_g, z_g = self._no_graph
        else:
            q_g, z_g, hg_y, zg_y = self._graph_latent(h_g_p, hn_y[-1], x)
            gh_g = hg_y[-2:]
            if x.gi_g_next is not None:
                gi_g = x.gi_g_next + zg_y[-1]
            mp_g, qn_zg = (hg_y[1] + zg_y[0], zg_y[1]) if self.mp else (None, zg_y[0])
        # 4. adjacency: teacher-forced to the observed A_t ("Training"; alpha = its weights)
        # 5. message passing on A_t, [h_g^+, z_g^+] injected into layer 0 (SparseGAT-style)
        m = h_n_p
        if self.mp:
            y = hn_y[0] if mp_g is None else block_addmm(hn_y[0], self.bcast_mat, mp_g)
            m = self.mp(y, x.alpha, self.B, self.N, self.rows_n)
        # 6. node latent ("Adjacency Prediction and Message Passing"): z^+ ~ q_n(. | m^(L)+,
        # z_g^+, e_v)
        xq = member_addmm(x.pre_qn, m, self.qn_m)
        if c.graph_state:
            xq = block_addmm(xq, self.bcast_mat, qn_zg)
        gn, cn = c.node_latent_groups, c.node_latent_classes
        q_n = unimix_lerp(self.qn_tail(xq).view(*self.rows_n, gn, cn), c.unimix, self.uniforms)
        z_n_p = onehot_st_gumbel(q_n, x.g_zn, self.classes_n).view(*self.rows_n, -1)
        gi_n = carry.gi_n  # unused after the last step
        if x.gi_n_next is not None:
            gi_n = member_addmm(x.gi_n_next, z_n_p, self.w_zn)
        nxt = Carry(h_n_p, h_g_p, gi_n, tuple(gh_n), gi_g, None if gh_g is None else tuple(gh_g))
        return nxt, (h_n_m, h_g_m, h_n_p, h_g_p, q_g, z_g, q_n, z_n_p)

    def _graph_latent(
        self, h_g_p: torch.Tensor, hn_pool: torch.Tensor, x: StepInputs
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """q_g, z_g^+ and the products of h_g^+ and z_g^+ with their readers; ``hn_pool`` is
        h^+'s product with q_g's Pool part (per node, pooled here)."""
        c = self.c
        assert x.pre_qg is not None and x.g_zg is not None
        hg_y = self.h_g_readers(h_g_p)
        xq = block_addmm(x.pre_qg + hg_y[0], self.pool_mat, hn_pool)
        logits = self.qg_tail(xq).view(*self.rows_g, c.graph_latent_groups, -1)
        q_g = unimix_lerp(logits, c.unimix, self.uniforms)
        z_g = onehot_st_gumbel(q_g, x.g_zg, self.classes_g).view(*self.rows_g, -1)
        return q_g, z_g, hg_y, self.z_g_readers(z_g)


def fused_transition(
    gru: LayerNormGRU, z: torch.Tensor, a: torch.Tensor, h: torch.Tensor
) -> torch.Tensor:
    """The transition h^- = LN(GRU([z, a] | h)) (paper, "Recurrent Dynamics") in the fused
    backend's form, the prior step's (:meth:`GDMCell.transition
    <gdm_models.gdm.cell.GDMCell.transition>`): the input gates as a W_a^T + b + z W_z^T, the
    hidden gates by one product, then :func:`~gdm_models.layers.gru_from_split_gates`, as
    :class:`PosteriorStep` computes them; any leading axes. The plain form:
    :meth:`~gdm_models.gdm.parts.DeterministicState.transition`."""
    cell, hid = gru.cell, h.shape[-1]
    w_z, w_a = cell.weight_ih.split([z.shape[-1], a.shape[-1]], -1)
    gi = F.linear(a, w_a, cell.bias_ih).reshape(-1, 3 * hid)
    gi = torch.addmm(gi, z.reshape(-1, z.shape[-1]), w_z.transpose(-1, -2))
    h2 = h.reshape(-1, hid)
    gh = FusedLinear(gru_hidden_blocks(cell))(h2)
    return gru.norm(gru_from_split_gates(gi, h2, *gh)).reshape(h.shape)


def _h_plus(h_m: torch.Tensor, x: torch.Tensor, tail: MLPTail) -> torch.Tensor:
    """h^+ = h^- + sigmoid(g) * dh with [dh || g] = the MLP's tail on its first layer ``x``."""
    dh, g = tail(x).split([h_m.shape[-1]] * 2, -1)
    return h_m + torch.sigmoid(g) * dh


def scan(
    step: Callable[[Carry, StepInputs], tuple[Carry, tuple[torch.Tensor, ...]]],
    carry: Carry,
    xs: Sequence[StepInputs],
) -> tuple[Carry, list[tuple[torch.Tensor, ...]]]:
    """``carry, y_t = step(carry, x_t)`` for t = 0..T-1: (the last carry, [y_0, ..., y_T-1])."""
    ys = []
    for x in xs:
        carry, y = step(carry, x)
        ys.append(y)
    return carry, ys


def stack_outputs(
    ys: Sequence[tuple[torch.Tensor, ...]], b: int, n: int, members: int
) -> tuple[torch.Tensor, ...]:
    """The :data:`STEP_OUTPUTS` of T steps (flat rows) as (B, T, ...) tensors, node tensors
    (B, T, N, ...); a member model's (K, rows/K, ...) states stacked on axis 2."""
    out = []
    for k, parts in enumerate(zip(*ys, strict=True)):
        x = torch.stack(parts, 2).flatten(0, 1) if members else torch.stack(parts, 1)
        if STEP_OUTPUTS[k] in ("h_n_m", "h_n_p", "q_n", "z_n_p"):  # (B*N, T, ...) -> (B, T, N, ...)
            x = x.view(b, n, *x.shape[1:]).transpose(1, 2)
        out.append(x)
    return tuple(out)
