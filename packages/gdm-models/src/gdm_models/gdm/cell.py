"""The Graph Dynamics Model (paper, section "Graph Dynamics Model").

Per node v: deterministic state h(v) (LayerNorm-GRU) and categorical stochastic state z(v);
for the graph: h_g, z_g; plus the recurrent adjacency A_t. One time step (prior ``-``,
posterior ``+``):

1. h_t^-(v) = LN(GRU_n([z_{t-1}(v), a_t(v)] | h_{t-1}(v))),
   h_g,t^- = LN(GRU_g([z_g,t-1, Pool_v a_t(v)] | h_g,t-1))          (Pool = mean)
2. posterior only: h^+ = h^- + sigmoid(g) * dh, [dh || g] = MLP+_n(h^-, e_v, e_g) (graph:
   MLP+_g(h_g^-, e_g, Pool e_v))
3. z_g^- ~ p_g(. | h_g^-, Pool h^-);  z_g^+ ~ q_g(. | h_g^+, Pool h^+, e_g)
4. prior: l_ij = MLP_adj(h_i^-, h_j^-, h_g^-, z_g^-, A_{t-1}(i,j)); Hard Concrete gate c_ij;
   A_t = A_{t-1} xor 1[c > 0]; straight-through weights b_bar. Posterior: A_t and b teacher-
   forced to the observed adjacency.
5. m^(L) = SparseGAT-style message passing on A_t with [h_g, z_g] injected (m^(0) = h)
6. z^-(v) ~ p_n(. | m^(L)-(v), z_g^-);  z^+(v) ~ q_n(. | m^(L)+(v), z_g^+, e_v)
7. decoder D(h^-, z - E_p[z]) -> heads; adjacency passed through.

In training (``loss``) the recurrence runs on the posterior path (h^+, z^+, observed A), and
the prior quantities of every step are computed from the previous posterior latent. In
imagination the prior path is iterated. Time step 0 of a window (or of ``observe``) starts
from a zero latent, a zero action and an empty previous adjacency and only computes the
posterior; the losses are taken on the L transitions 1..L.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..adjacency import (
    EdgeUpdateMLP,
    bernoulli_gate,
    hard_concrete_gate,
    next_edge_signed_logit,
    symmetric_uniform,
    xor_update,
)
from ..decoder import GraphHeads, InnovationDecoder, NodeHeads, PairDotAdjacencyHead
from ..encoder import ActionEmbedding, FeatureEncoder, ObservedGraphEncoder
from ..layers import (
    EPS,
    MLP,
    CategoricalHead,
    LayerNormGRU,
    gru_from_split_gates,
    gumbel_from_uniform,
    sample_onehot_st,
)
from ..losses import (
    NodeMasks,
    Prediction,
    adjacency_kl,
    free_bits,
    h_alignment,
    kl_dyn_rep,
    masked_mean,
    prediction_loss,
)
from ..member_ops import (
    expand_rows,
    member_addmm,
    member_count,
    member_linear,
    member_mm,
)
from ..message_passing import GraphMessagePassing, SparseGATLayer
from ..scaling import FeatureScaler
from ..schema import Schema
from ..world_model import WorldModel
from .config import GDMConfig

__all__ = ["GDMCell", "GDMLatent", "Noise", "SPARSE_MAX_DENSITY", "permute_noise"]


@dataclass
class GDMLatent:
    """Latent state of B graphs with N nodes (B = 1 after ``observe``, S in imagination).

    ``h_n`` (B,N,H), ``z_n`` (B,N,Gn*Cn) one-hot, ``h_g`` (B,H) and ``z_g`` (B,Gg*Cg) (zero
    width without graph state), ``adjacency`` (B,N,N) float 0/1 (A_t).
    """

    h_n: torch.Tensor
    z_n: torch.Tensor
    h_g: torch.Tensor
    z_g: torch.Tensor
    adjacency: torch.Tensor

    @property
    def batch_size(self) -> int:
        """B."""
        return self.h_n.shape[0]

    @property
    def num_nodes(self) -> int:
        """N."""
        return self.h_n.shape[1]

    def expand(self, s: int) -> GDMLatent:
        """Repeat a B = 1 latent S times."""
        if self.batch_size == s:
            return self
        if self.batch_size != 1:
            raise ValueError(f"cannot expand a latent with batch {self.batch_size} to {s}")
        return GDMLatent(
            *(t.expand(s, *t.shape[1:]).contiguous() for t in dataclasses.astuple(self))
        )

    def detach(self) -> GDMLatent:
        """Detached copy."""
        return GDMLatent(*(t.detach() for t in dataclasses.astuple(self)))


class Noise:
    """Source of all uniforms of a forward pass, keyed by name (``"<t>/<what>"``).

    Draws from ``generator``; records every draw in ``record``; a ``replay`` dict supplies
    given tensors instead (used to test permutation equivariance with fixed randomness).
    """

    def __init__(
        self,
        generator: torch.Generator | None,
        device: torch.device,
        replay: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.generator, self.device = generator, device
        self.replay = dict(replay or {})
        self.record: dict[str, torch.Tensor] = {}

    def uniform(self, key: str, shape: tuple[int, ...], symmetric: bool = False) -> torch.Tensor:
        """Uniforms of ``shape`` ((..., N, N) with one draw per unordered pair if symmetric)."""
        if key in self.replay:
            u = self.replay[key]
            if tuple(u.shape) != tuple(shape):
                raise ValueError(f"replayed noise {key!r} has shape {tuple(u.shape)} != {shape}")
        elif symmetric:
            u = symmetric_uniform(shape, self.generator, self.device)
        else:
            u = torch.rand(shape, generator=self.generator, device=self.device)
        self.record[key] = u
        return u


#: largest edge density for which message passing uses the sparse (PyG) backend
SPARSE_MAX_DENSITY = 0.05

_NODE_AXIS_NOISE = ("zn_prior", "zn_post", "out_node_cat", "out_action_mask")


def permute_noise(
    record: Mapping[str, torch.Tensor], perm: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Permute the node axes of recorded noise: new node k takes old node ``perm[k]``."""
    out = {}
    for key, u in record.items():
        name = key.split("/", 1)[1]
        if name == "adj":
            out[key] = u[:, perm][:, :, perm]
        elif name.startswith(_NODE_AXIS_NOISE):
            out[key] = u[:, perm]
        else:
            out[key] = u
    return out


def _pool(x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    """Pool = mean over the real nodes: (B, N, D) -> (B, D)."""
    return masked_mean(x, node_mask[..., None], 1)


def _flat(z: torch.Tensor) -> torch.Tensor:
    return z.reshape(*z.shape[:-2], -1)


def _bcast(g: torch.Tensor, n: int) -> torch.Tensor:
    return g[:, None, :].expand(-1, n, -1)


def _steps(x: torch.Tensor, keep: int, members: int = 0) -> tuple[torch.Tensor, ...]:
    """(B, T, ..., *tail) -> T tensors (rows, *tail) with the ``keep`` trailing axes kept and
    the leading ones flattened (B first): one copy and one ``unbind`` instead of T slices.
    ``members`` > 0 (B holds that many members, member-major): T tensors (K, rows/K, *tail),
    the 3-d form of a member model's recurrence."""
    tail = x.shape[x.dim() - keep :]
    lead = (members, -1) if members else (-1,)
    return x.transpose(0, 1).reshape(x.shape[1], *lead, *tail).unbind(0)


def _loop_norm(norm: nn.Module) -> Any:
    """A LayerNorm module for a recurrence: the module itself, or for a member LayerNorm the
    same function with its gain and bias shaped [K, 1, d] once (not at every step); applied to
    (K, rows, d) states."""
    weight, bias = norm.weight, norm.bias
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    if weight.dim() == 1:
        return norm
    shape, eps = (weight.shape[-1],), float(getattr(norm, "eps", 1e-5))
    w3, b3 = weight.unsqueeze(1), bias.unsqueeze(1)
    return lambda x: F.layer_norm(x, shape, eps=eps) * w3 + b3


def _loop_bias(prod: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(weight, bias, ...)`` with a member bias [K, out] shaped [K, 1, out] once, for the
    products of a recurrence (:func:`~gdm_models.member_ops.member_mm`)."""
    bias = prod[1]
    if bias is None or bias.dim() != 2 or prod[0].dim() != 3:
        return prod
    return (prod[0], bias.unsqueeze(1), *prod[2:])


def _stacked(
    parts: list[tuple[torch.Tensor, torch.Tensor | None]],
) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
    """One (in, sum out) matrix of several transposed weights (in, out_k) that read the same
    input, their biases (zeros for ``None``; ``None`` if all are) and the output sizes."""
    sizes = [w.shape[-1] for w, _ in parts]
    weight = torch.cat([w for w, _ in parts], -1)
    if all(b is None for _, b in parts):
        return weight, None, sizes
    lead = weight.shape[:-2]  # (K,) for member-stacked weights
    bias = torch.cat(
        [weight.new_zeros(*lead, w.shape[-1]) if b is None else b for w, b in parts], -1
    )
    return weight, bias, sizes


def _product(
    prod: tuple[torch.Tensor, torch.Tensor | None, list[int]], x: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """x W_k^T + b_k of every part of a :func:`_stacked` matrix, by one product."""
    weight, bias, sizes = prod
    return member_mm(x, weight, bias).split(sizes, -1)


def _unimix(
    logits: torch.Tensor, unimix: float, uniforms: dict[tuple[torch.dtype, int], torch.Tensor]
) -> torch.Tensor:
    """:func:`~gdm_models.layers.unimix_probs` as one ``lerp`` towards the uniform probability:
    p + u (1/C - p) = (1 - u) p + u / C. ``uniforms`` caches the 0-d tensors 1/C per (dtype,
    C) (``lerp`` does not promote types, and autocast may change the probabilities' dtype)."""
    probs = torch.softmax(logits, dim=-1)
    if unimix <= 0:
        return probs
    key = (probs.dtype, probs.shape[-1])
    if key not in uniforms:
        uniforms[key] = probs.new_full((), 1.0 / probs.shape[-1])
    return torch.lerp(probs, uniforms[key], unimix)


def _gate_parts(cell: nn.GRUCell) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The hidden gates' map (W_hh^T, b_hh) of a GRU cell as its (r, z) and n blocks."""
    hid = cell.hidden_size
    w = cell.weight_hh.transpose(-1, -2).split([2 * hid, hid], -1)
    b = cell.bias_hh.split([2 * hid, hid], -1)
    return [(w[0], b[0]), (w[1], b[1])]


def _first_layer(mlp: MLP, sizes: list[int]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The first linear map of a one-hidden-layer MLP on a concatenated input: its weight's
    column blocks of the parts ``sizes`` (views of the parameter) and its bias."""
    first = mlp.net[0]
    assert len(mlp.net) == 4  # Linear, LayerNorm, SiLU, Linear (or their member versions)
    weight, bias = first.weight, first.bias
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    return weight.split(sizes, -1), bias


def _last_t(mlp: MLP) -> tuple[torch.Tensor, torch.Tensor]:
    """(W^T, b) of the last linear map of a one-hidden-layer MLP, transposed once per loop."""
    last = mlp.net[3]
    weight, bias = last.weight, last.bias
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    return weight.transpose(-1, -2), bias


def _mlp_tail(norm: Any, x: torch.Tensor, last: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The rest of a one-hidden-layer MLP after its first linear map: LayerNorm (``norm``, the
    MLP's ``net[1]`` or :func:`_loop_norm` of it), SiLU, Linear (2-d ``x``, or (K, rows, d) in
    a member model; ``last`` from :func:`_last_t`)."""
    return member_mm(F.silu(norm(x)), last[0], last[1])


def _block_addmm(rows: torch.Tensor, mat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``rows + mat @ x`` for a pooling or broadcasting matrix ``mat``; a 3-d ``mat`` [K, r,
    c] (a member model) multiplies each member's rows only (one ``baddbmm``)."""
    if mat.dim() == 2:
        return torch.addmm(rows, mat, x)
    k = mat.shape[0]
    r3 = rows if rows.dim() == 3 else rows.view(k, -1, rows.shape[-1])
    x3 = x if x.dim() == 3 else x.view(k, -1, x.shape[-1])
    y = torch.baddbmm(r3, mat, x3)
    return y if rows.dim() == 3 else y.view(rows.shape)


def _onehot_st(probs: torch.Tensor, gumbel: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """:func:`~gdm_models.layers.sample_onehot_st` given the Gumbel noise and ``arange(C)``."""
    idx = (torch.log(probs.clamp_min(EPS)) + gumbel).argmax(dim=-1)
    onehot = (idx[..., None] == classes).to(probs.dtype)
    return onehot + probs - probs.detach()


class GDMCell(WorldModel):
    """The GDM's network and its one-step computations, shared by every path: the
    step-by-step posterior of ``observe``, the batched stepping of ``start``/``step``, the
    time-vectorised training loss (:mod:`gdm_models.gdm.sequence_loss`) and the reference loss
    (:mod:`gdm_models.reference`). :class:`~gdm_models.gdm.model.GDM` adds the world-model
    API on top; this class is not a model by itself.
    """

    config: GDMConfig

    def __init__(
        self,
        schema: Mapping[str, Any] | Schema,
        scaler: FeatureScaler | None = None,
        config: GDMConfig | None = None,
    ) -> None:
        config = GDMConfig() if config is None else config
        super().__init__(schema, scaler, config)
        c = config
        H, E, M = c.hidden_dim, c.embed_dim, c.mlp_width
        self.zn_dim = c.node_latent_groups * c.node_latent_classes
        self.zg_dim = c.graph_latent_groups * c.graph_latent_classes if c.graph_state else 0
        self.hg_dim = H if c.graph_state else 0
        g_dim = self.hg_dim + self.zg_dim  # dim([h_g, z_g])

        self.encoder = FeatureEncoder(self.schema, self.scaler, E)
        self.action_embed = ActionEmbedding(E)
        self.gru_n = LayerNormGRU(self.zn_dim + E, H)
        if c.h_plus:
            self.post_h_n = MLP(H + 2 * E, M, 2 * H)
        if c.graph_state:
            self.gru_g = LayerNormGRU(self.zg_dim + E, H)
            if c.h_plus:
                self.post_h_g = MLP(H + 2 * E, M, 2 * H)
            gg, gc = c.graph_latent_groups, c.graph_latent_classes
            self.prior_g = CategoricalHead(2 * H, M, gg, gc, c.unimix)
            self.post_g = CategoricalHead(2 * H + E, M, gg, gc, c.unimix)
        if c.recurrent_adjacency:
            self.edge_mlp = EdgeUpdateMLP(H, g_dim, M)
        else:
            self.adj_head = PairDotAdjacencyHead(H, H)
            self.obs_graph = ObservedGraphEncoder(E, c.encoder_gnn_layers)
        self.mp = GraphMessagePassing(H, g_dim, c.mp_layers)
        ng, nc = c.node_latent_groups, c.node_latent_classes
        self.prior_n = CategoricalHead(H + self.zg_dim, M, ng, nc, c.unimix)
        self.post_n = CategoricalHead(H + self.zg_dim + E, M, ng, nc, c.unimix)
        self.dec_n = InnovationDecoder(H, self.zn_dim, M, H)
        if c.graph_state:
            self.dec_g = InnovationDecoder(H, self.zg_dim, M, H)
        self.node_heads = NodeHeads(self.schema, H)
        self.graph_heads = GraphHeads(self.schema, H)

    # ================================================================== building blocks
    def initial_latent(self, b: int, n: int) -> GDMLatent:
        """Zero latent (before the first observation) for B graphs of N nodes."""
        dev, H = self.device, self.config.hidden_dim
        return GDMLatent(
            torch.zeros(b, n, H, device=dev),
            torch.zeros(b, n, self.zn_dim, device=dev),
            torch.zeros(b, self.hg_dim, device=dev),
            torch.zeros(b, self.zg_dim, device=dev),
            torch.zeros(b, n, n, device=dev),
        )

    def transition(
        self, prev: GDMLatent, action: torch.Tensor, node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Deterministic prior states h^-, h_g^- (paper, recurrent dynamics)."""
        a = self.action_embed(action)
        h_n = self.gru_n(torch.cat([prev.z_n, a], -1), prev.h_n)
        if self.config.graph_state:
            h_g = self.gru_g(torch.cat([prev.z_g, _pool(a, node_mask)], -1), prev.h_g)
        else:
            h_g = prev.h_g
        return h_n, h_g

    def h_plus(
        self,
        h_n: torch.Tensor,
        h_g: torch.Tensor,
        e_v: torch.Tensor,
        e_g: torch.Tensor,
        node_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior-informed deterministic states h^+ = h^- + sigmoid(g) * dh."""
        if not self.config.h_plus:
            return h_n, h_g
        n = h_n.shape[1]
        dh, g = self.post_h_n(torch.cat([h_n, e_v, _bcast(e_g, n)], -1)).chunk(2, -1)
        h_n_p = h_n + torch.sigmoid(g) * dh
        if self.config.graph_state:
            dhg, gg = self.post_h_g(torch.cat([h_g, e_g, _pool(e_v, node_mask)], -1)).chunk(2, -1)
            h_g_p = h_g + torch.sigmoid(gg) * dhg
        else:
            h_g_p = h_g
        return h_n_p, h_g_p

    def graph_latent(
        self, head: str, inputs: list[torch.Tensor], u: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(probs (B,Gg,Cg), one-hot sample (B,Gg*Cg)); (None, zero-width) without graph state.

        ``u``: the uniforms of the sample (shape of probs); ``None`` without graph state.
        """
        b = inputs[0].shape[0]
        if not self.config.graph_state:
            return None, inputs[0].new_zeros(b, 0)
        assert u is not None  # with graph state the caller draws the uniforms
        probs = getattr(self, head)(torch.cat(inputs, -1))
        return probs, _flat(sample_onehot_st(probs, u))

    def node_latent(
        self, head: str, inputs: list[torch.Tensor], u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        probs = getattr(self, head)(torch.cat(inputs, -1))
        return probs, _flat(sample_onehot_st(probs, u))

    def zg_shape(self, *lead: int) -> tuple[int, ...]:
        return (*lead, self.config.graph_latent_groups, self.config.graph_latent_classes)

    def zn_shape(self, *lead: int) -> tuple[int, ...]:
        return (*lead, self.config.node_latent_groups, self.config.node_latent_classes)

    def draw_zg(self, noise: Noise, key: str, *lead: int) -> torch.Tensor | None:
        """Uniforms of a graph-latent sample (none without graph state)."""
        return noise.uniform(key, self.zg_shape(*lead)) if self.config.graph_state else None

    def sample_adjacency(
        self, logits: torch.Tensor, a_prev: torch.Tensor, pair_mask: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate, XOR update, straight-through weights: (A_t, b_bar); ``u`` symmetric uniforms."""
        c = self.config
        if c.adjacency_sampler == "hard_concrete":
            gate = hard_concrete_gate(logits, u, c.hc_beta, c.hc_gamma, c.hc_zeta)
        else:
            gate = bernoulli_gate(logits, u)
        gate = gate * pair_mask.to(gate.dtype)  # no gate on the diagonal / padding
        return xor_update(a_prev, gate)

    def message_passing(
        self,
        h_n: torch.Tensor,
        g: torch.Tensor,
        *,
        hard: torch.Tensor | None,
        weights: torch.Tensor | None,
    ) -> torch.Tensor:
        """Sparse PyG path for a constant hard adjacency, dense path otherwise."""
        if hard is not None and (weights is None or not weights.requires_grad):
            # sparse PyG path for sparse graphs; a batched dense product is cheaper (and far
            # smaller than per-edge messages) once the graph is dense
            if float(hard.sum()) <= SPARSE_MAX_DENSITY * hard.numel():
                return self.mp.forward_sparse(h_n, g, hard)
            return self.mp.forward_dense(h_n, g, hard)
        if weights is None:
            raise ValueError("message passing needs a hard adjacency or weights")
        return self.mp.forward_dense(h_n, g, weights)

    def decode(
        self,
        h_n_m: torch.Tensor,
        z_n: torch.Tensor,
        p_n: torch.Tensor,
        h_g_m: torch.Tensor,
        z_g: torch.Tensor,
        p_g: torch.Tensor | None,
        node_mask: torch.Tensor,
    ) -> tuple[dict[str, Any], dict[str, Any], torch.Tensor]:
        """Decoder (paper eq. decoder) + heads; returns (node_out, graph_out, node states)."""
        d_n = self.dec_n(h_n_m, z_n, _flat(p_n))  # E_p[z] = the prior probabilities
        if self.config.graph_state:
            assert p_g is not None  # the graph prior exists with graph state
            d_g = self.dec_g(h_g_m, z_g, _flat(p_g))
        else:
            d_g = _pool(d_n, node_mask)
        return self.node_heads(d_n), self.graph_heads(d_g), d_n

    # ================================================================== one step
    def prior_branch(
        self,
        prev: GDMLatent,
        h_n_m: torch.Tensor,
        h_g_m: torch.Tensor,
        node_mask: torch.Tensor,
        pair_mask: torch.Tensor,
        noise: Noise,
        t: int | str,
        edge_impl: str | None = None,
    ) -> dict[str, Any]:
        """Prior quantities given h^- (paper: p_g, edge logits, sampled A_t, m^-, p_n).

        ``edge_impl``: the edge MLP's implementation for this call (``None``: its default,
        see :attr:`~gdm_models.adjacency.EdgeUpdateMLP.impl`)."""
        b, n = h_n_m.shape[:2]
        u_zg = self.draw_zg(noise, f"{t}/zg_prior", b)
        u_adj = None
        if self.config.recurrent_adjacency:
            u_adj = noise.uniform(f"{t}/adj", (b, n, n), symmetric=True)
        u_zn = noise.uniform(f"{t}/zn_prior", self.zn_shape(b, n))
        return self.prior_core(
            h_n_m, h_g_m, prev.adjacency, node_mask, pair_mask, u_zg, u_adj, u_zn, edge_impl
        )

    def prior_core(
        self,
        h_n_m: torch.Tensor,
        h_g_m: torch.Tensor,
        a_prev: torch.Tensor,
        node_mask: torch.Tensor,
        pair_mask: torch.Tensor,
        u_zg: torch.Tensor | None,
        u_adj: torch.Tensor | None,
        u_zn: torch.Tensor,
        edge_impl: str | None = None,
    ) -> dict[str, Any]:
        """:meth:`prior_branch` on tensors only (the uniforms drawn by the caller)."""
        c = self.config
        p_g, z_g_m = self.graph_latent("prior_g", [h_g_m, _pool(h_n_m, node_mask)], u_zg)
        g = torch.cat([h_g_m, z_g_m], -1)
        out: dict[str, Any] = {"p_g": p_g, "z_g_m": z_g_m, "logits": None, "a_m": None}
        if c.recurrent_adjacency:
            assert u_adj is not None  # drawn whenever the adjacency is recurrent
            logits = self.edge_mlp(h_n_m, g, a_prev, c.edge_chunk_elems, impl=edge_impl)
            a_m, b_bar = self.sample_adjacency(logits, a_prev, pair_mask, u_adj)
            pm = pair_mask.to(logits.dtype)
            if c.message_passing == "all_pairs":
                # ablation: all pairs weighted by the next-edge probabilities p_ij
                w = torch.sigmoid(next_edge_signed_logit(logits, a_prev)) * pm
                m = self.message_passing(h_n_m, g, hard=None, weights=w)
            else:
                need_grad = torch.is_grad_enabled() and b_bar.requires_grad
                m = self.message_passing(
                    h_n_m, g, hard=a_m, weights=b_bar * pm if need_grad else None
                )
            out.update(logits=logits, a_m=a_m)
        else:
            w = pair_mask.to(h_n_m.dtype).expand(h_n_m.shape[0], -1, -1)
            m = self.message_passing(h_n_m, g, hard=None, weights=w)
        p_n, z_n_m = self.node_latent("prior_n", [m, _bcast(z_g_m, m.shape[1])], u_zn)
        out.update(p_n=p_n, z_n_m=z_n_m)
        return out

    def posterior_graph(
        self,
        h_n_m: torch.Tensor,
        h_g_m: torch.Tensor,
        e_v: torch.Tensor,
        e_g: torch.Tensor,
        node_mask: torch.Tensor,
        u_zg: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """h^+, h_g^+ and the graph posterior q_g, z_g^+ (steps 2-3 of the posterior)."""
        h_n_p, h_g_p = self.h_plus(h_n_m, h_g_m, e_v, e_g, node_mask)
        q_g, z_g_p = self.graph_latent("post_g", [h_g_p, _pool(h_n_p, node_mask), e_g], u_zg)
        return h_n_p, h_g_p, q_g, z_g_p

    def posterior_step(
        self,
        prev: GDMLatent,
        action: torch.Tensor,
        obs: Mapping[str, torch.Tensor],
        node_mask: torch.Tensor,
        pair_mask: torch.Tensor,
        noise: Noise,
        t: int,
        need_prior: bool,
    ) -> tuple[GDMLatent, dict[str, Any]]:
        """Posterior update with teacher-forced adjacency (+ the prior branch if requested).

        The step-by-step path of ``observe`` and of the reference loss
        (:mod:`gdm_models.reference`); training runs :meth:`posterior_sequence` inside the
        time-vectorised :func:`gdm_models.gdm.sequence_loss.sequence_loss_terms`.
        """
        c = self.config
        b, n = action.shape
        h_n_m, h_g_m = self.transition(prev, action, node_mask)
        e_v, e_g = self.encode(obs, node_mask)
        u_zg = self.draw_zg(noise, f"{t}/zg_post", b)
        u_zn = noise.uniform(f"{t}/zn_post", self.zn_shape(b, n))
        h_n_p, h_g_p, q_g, z_g_p = self.posterior_graph(h_n_m, h_g_m, e_v, e_g, node_mask, u_zg)
        g_p = torch.cat([h_g_p, z_g_p], -1)
        a_obs = obs["adjacency"]  # teacher forcing: A_t = observed adjacency, b = A_t
        if c.recurrent_adjacency:
            m_p = self.message_passing(h_n_p, g_p, hard=a_obs, weights=None)
        else:
            w = pair_mask.to(h_n_p.dtype).expand(h_n_p.shape[0], -1, -1)
            m_p = self.message_passing(h_n_p, g_p, hard=None, weights=w)
        q_n, z_n_p = self.node_latent("post_n", [m_p, _bcast(z_g_p, n), e_v], u_zn)
        out: dict[str, Any] = {
            "h_n_m": h_n_m,
            "h_g_m": h_g_m,
            "h_n_p": h_n_p,
            "h_g_p": h_g_p,
            "q_g": q_g,
            "z_g_p": z_g_p,
            "q_n": q_n,
            "z_n_p": z_n_p,
        }
        if need_prior:
            out.update(self.prior_branch(prev, h_n_m, h_g_m, node_mask, pair_mask, noise, t))
        return GDMLatent(h_n_p, z_n_p, h_g_p, z_g_p, a_obs), out

    def encode(
        self, obs: Mapping[str, torch.Tensor], node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Observation embeddings e_v (B,N,E), e_g (B,E); without the recurrent adjacency the
        observed topology enters here, through GNN layers on e_v (as in G-RSSM)."""
        e_v, e_g = self.encoder(obs)
        if not self.config.recurrent_adjacency:
            e_v = self.obs_graph(e_v, obs["adjacency"], node_mask)
        return e_v, e_g

    def loss_scales(self) -> dict[str, float]:
        """Weight of every logged per-transition term in the total (paper eq. loss):
        beta_pred on each L_pred part, beta_n beta_dyn / beta_n beta_rep on the node KLs,
        beta_g beta_dyn / beta_g beta_rep on the graph KLs, beta_adj, beta_h."""
        c = self.config
        pred = ("pred_node", "pred_graph", "pred_adj", "pred_action", "pred_reward", "pred_cont")
        return {
            **dict.fromkeys(pred, c.beta_pred),
            "kl_n_dyn": c.beta_n * c.beta_dyn,
            "kl_n_rep": c.beta_n * c.beta_rep,
            "kl_g_dyn": c.beta_g * c.beta_dyn,
            "kl_g_rep": c.beta_g * c.beta_rep,
            "kl_adj": c.beta_adj,
            "h": c.beta_h,
        }

    def _term_weights(
        self, keys: list[str], scale: Mapping[str, float], like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss weights of ``keys`` and their "pred_" indicator as tensors on ``like``'s
        device, made once per keys, device and dtype: a host-to-device copy at every step would
        block CUDA-graph capture (:mod:`gdm_models.capture`)."""
        cache: dict[Any, tuple[torch.Tensor, torch.Tensor]] = self.__dict__.setdefault(
            "_term_weight_cache", {}
        )
        key = (tuple(keys), tuple(scale[k] for k in keys), like.device, like.dtype)
        if key not in cache:
            cache[key] = (
                torch.tensor([scale[k] for k in keys], dtype=like.dtype, device=like.device),
                torch.tensor([k.startswith("pred_") for k in keys], device=like.device),
            )
        return cache[key]

    def combine_terms(
        self, per_step: Mapping[str, torch.Tensor], step_mask: torch.Tensor, members: int = 0
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Average (B, L) terms over the real transitions and weight them (paper eq. loss).
        ``members`` > 0: B holds that many members' windows (member-major); the averages are
        per member and the total and every term are (K,)."""
        scale = self.loss_scales()
        if set(scale) != set(per_step):
            raise RuntimeError(f"loss terms {sorted(per_step)} != scaled {sorted(scale)}")
        keys = list(per_step)
        # one stacked masked mean over (B, L) for all terms (fewer ops than one per term)
        stacked = torch.stack([per_step[k] for k in keys])  # (terms, B, L)
        m = step_mask.to(stacked.dtype)
        if members:  # (terms, K, B/K * L): one masked mean per member
            k = members
            stacked, m = stacked.view(len(keys), k, -1), m.view(k, -1)
            mean = (stacked * m).sum(2) / m.sum(1).clamp_min(1.0)
            weights, is_pred = self._term_weights(keys, scale, mean)
            total = (mean * weights[:, None]).sum(0)
            values = torch.cat([mean, (mean * is_pred[:, None]).sum(0)[None], total[None]])
            terms = dict(zip([*keys, "pred", "total"], values.detach().unbind(), strict=True))
            return total, terms
        mean = (stacked * m).sum((1, 2)) / m.sum().clamp_min(1.0)
        weights, is_pred = self._term_weights(keys, scale, mean)
        total = (mean * weights).sum()
        values = torch.cat([mean, (mean * is_pred).sum()[None], total[None]]).detach()
        terms = dict(zip([*keys, "pred", "total"], values.unbind(), strict=True))
        return total, terms

    def transition_terms(
        self,
        obs: Mapping[str, torch.Tensor],
        reward: torch.Tensor,
        continuation: torch.Tensor,
        a_prev: torch.Tensor,
        o: Mapping[str, Any],
        nm: torch.Tensor,
        pm: torch.Tensor,
        n_real: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Per-transition loss terms (B,) for any number B of transitions (one per graph)."""
        c, sc = self.config, self.scaler
        B = nm.shape[0]
        zeros = torch.zeros(B, device=self.device)
        node_out, graph_out, d_n = self.decode(
            o["h_n_m"], o["z_n_p"], o["p_n"], o["h_g_m"], o["z_g_p"], o["p_g"], nm
        )
        # ---- prediction loss (paper L_pred; the one shared by every model, losses.py)
        pred = Prediction(
            node_continuous=node_out["node_continuous"],
            node_categorical=node_out["node_categorical"],
            action_mask_logit=node_out["action_mask"],
            # without the recurrent adjacency a decoder head predicts A_t (BCE); with it the
            # decoder passes the teacher-forced A_t through (BCE(A_t, A_t) = 0) and topology is
            # learned through the adjacency KL below
            adjacency_logit=None if c.recurrent_adjacency else self.adj_head(d_n),
            graph_continuous=graph_out["graph_continuous"],
            graph_categorical=graph_out["graph_categorical"],
            reward=graph_out["reward"],
            continuation_logit=graph_out["continuation"],
        )
        target = {**obs, "reward": reward, "continuation": continuation}
        masks = NodeMasks.of(nm, pred.reward.dtype, pm)
        lp = prediction_loss(pred, target, masks, sc, adjacency_norm="nodes_squared")
        if c.recurrent_adjacency:
            kl_adj = adjacency_kl(
                obs["adjacency"], next_edge_signed_logit(o["logits"], a_prev), pm, n_real
            )
        else:
            kl_adj = zeros
        # ---- KL with dynamics/representation split and free bits
        dyn_n, rep_n = kl_dyn_rep(o["q_n"], o["p_n"])
        kl_n_dyn = free_bits(masked_mean(dyn_n, nm, 1), c.free_bits)
        kl_n_rep = free_bits(masked_mean(rep_n, nm, 1), c.free_bits)
        if c.graph_state:
            dyn_g, rep_g = kl_dyn_rep(o["q_g"], o["p_g"])
            kl_g_dyn, kl_g_rep = free_bits(dyn_g, c.free_bits), free_bits(rep_g, c.free_bits)
        else:
            kl_g_dyn = kl_g_rep = zeros
        # ---- h alignment L_h
        h = masked_mean(h_alignment(o["h_n_m"], o["h_n_p"]), nm, 1)
        if c.graph_state:
            h = h + h_alignment(o["h_g_m"], o["h_g_p"])
        return {
            "pred_node": lp["node"],
            "pred_graph": lp["graph"],
            "pred_adj": lp["adjacency"],
            "pred_action": lp["action_mask"],
            "pred_reward": lp["reward"],
            "pred_cont": lp["continuation"],
            "kl_n_dyn": kl_n_dyn,
            "kl_n_rep": kl_n_rep,
            "kl_g_dyn": kl_g_dyn,
            "kl_g_rep": kl_g_rep,
            "kl_adj": kl_adj,
            "h": h,
        }

    def sample_categoricals(
        self, logits: list[torch.Tensor], lead: tuple[int, ...], noise: Noise, key: str
    ) -> torch.Tensor:
        cols = []
        for i, lg in enumerate(logits):
            u = noise.uniform(f"{key}{i}", tuple(lg.shape))
            cols.append((torch.log_softmax(lg, -1) + gumbel_from_uniform(u)).argmax(-1))
        if not cols:
            return torch.zeros(*lead, 0, dtype=torch.long, device=self.device)
        return torch.stack(cols, -1)

    def posterior_sequence(
        self,
        a_emb: torch.Tensor,
        a_pool: torch.Tensor,
        e_v: torch.Tensor,
        e_g: torch.Tensor,
        alpha: torch.Tensor,
        node_mask: torch.Tensor,
        u_zg: torch.Tensor | None,
        u_zn: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """The posterior recurrence of a training window (paper, "Training": steps 1-3 and
        5-6 of the posterior path on h^+, z^+ and the teacher-forced adjacency) from a zero
        latent, T = L+1 steps: the math of :meth:`posterior_step`, with far fewer ops.

        Everything that depends only on observations, actions or noise runs once for all T
        steps before the loop: the action parts of the GRUs' input gates (x W_ih^T + b_ih),
        the observation parts of the first layers of MLP+_n, MLP+_g, q_g and q_n (a
        concatenated input's first linear map split by columns, [x, y] W^T = x W_x^T + y W_y^T,
        computed from slices of the existing weights: the parameters are unchanged) and the
        Gumbel noise of the samples. In the loop, node tensors stay flat ((B*N, D)); pooling
        over nodes and broadcasting graph vectors to nodes are products with a (B, B*N)
        pooling matrix and a (B*N, B) indicator; each message-passing layer's two linear maps
        run as one product with their stacked weights, its aggregation as one ``baddbmm``.

        Args: ``a_emb`` (B,T,N,E) action embeddings, ``a_pool`` (B,T,E) their pools, ``e_v``
        (B,T,N,E), ``e_g`` (B,T,E), ``alpha`` (B,T,N,N) normalised message-passing weights of
        the observed A_t (or (B,N,N), the same at every step), ``node_mask`` (B,N), ``u_zg``
        (B,T,Gg,Cg) (None without graph state), ``u_zn`` (B,T,N,Gn,Cn) uniforms.

        Returns ``(h_n^-, h_g^-, h_n^+, h_g^+, q_g, z_g^+, q_n, z_n^+)`` of steps 1..T-1, each
        (B, T-1, ...) (q_g is (B, T-1, 0, 0) without graph state).
        """
        c = self.config
        B, T, N, E = e_v.shape
        BN, H = B * N, c.hidden_dim
        gn, cn = c.node_latent_groups, c.node_latent_classes
        dev, dt = e_v.device, e_v.dtype
        # ---- before the loop: everything that depends on observations, actions or noise
        nmf = node_mask.to(dt)
        w_pool = nmf / nmf.sum(1, keepdim=True).clamp_min(1.0)  # Pool = mean over real nodes
        # a member model (K members folded into B) pools and broadcasts within each member's
        # rows (block-diagonal products): no member's numbers reach another's rows
        K = member_count(self)
        Bk = B // K if K else B
        eye = torch.eye(Bk, dtype=dt, device=dev)
        pool_mat = (eye[:, :, None] * w_pool.view(-1, 1, Bk, N)).reshape(-1, Bk, Bk * N)
        bcast_mat = eye[:, None, :].expand(Bk, N, Bk).reshape(Bk * N, Bk)  # row b*N+v: graph b
        if K:
            bcast_mat = bcast_mat.expand(K, Bk * N, Bk)
        else:
            pool_mat = pool_mat[0]  # Pool x = pool_mat @ x
        gru_n = self.gru_n.cell
        w_ih = gru_n.weight_ih.split([self.zn_dim, E], -1)
        # a member model's recurrence keeps its states as (K, rows, ...): no view per product
        rows_n, rows_g = ((K, BN // K), (K, Bk)) if K else ((BN,), (B,))
        gi_n = _steps(member_linear(a_emb, w_ih[1], gru_n.bias_ih), 1, K)  # action part of gates
        w_zn = w_ih[0].transpose(-1, -2)
        g_zn = _steps(gumbel_from_uniform(u_zn), 2, K)
        ar_n = torch.arange(cn, device=dev)
        uniforms: dict[tuple[torch.dtype, int], torch.Tensor] = {}  # 1/C for the unimix
        qn_w, qn_b = _first_layer(self.post_n.mlp, [H, self.zg_dim, E])
        pre_qn = _steps(member_linear(e_v, qn_w[2], qn_b), 1, K)
        qn_m, qn_last = qn_w[0].transpose(-1, -2), _loop_bias(_last_t(self.post_n.mlp))
        qn_norm = _loop_norm(self.post_n.mlp.net[1])
        mp_w = self._mp_weights(H)
        # each state is multiplied once by the stacked weights of every map that reads it
        # (their blocks are the existing weights): h^+ -> [message-passing layer 0 (node
        # rows) | GRU_n's hidden gates (r, z | n) of the next step | q_g's part of Pool h^+]
        hn_parts: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        if mp_w:
            hn_parts.append((mp_w[0][0], mp_w[0][3]))  # [W | W_root]^T, [0 | b_root]
        hn_parts += _gate_parts(gru_n)  # (r, z) and n blocks, no split in the loop
        if c.h_plus:
            hn_w, hn_b = _first_layer(self.post_h_n, [H, E, E])
            pre = member_linear(e_v, hn_w[1], hn_b)
            pre = pre + member_linear(e_g, hn_w[2])[:, :, None]
            pre_hn = _steps(pre, 1, K)
            hn_h, hn_last = hn_w[0].transpose(-1, -2), _loop_bias(_last_t(self.post_h_n))
            hn_norm = _loop_norm(self.post_h_n.net[1])
        if c.graph_state:
            gg, cg = c.graph_latent_groups, c.graph_latent_classes
            gru_g = self.gru_g.cell
            w_ih_g = gru_g.weight_ih.split([self.zg_dim, E], -1)
            gi_g = _steps(member_linear(a_pool, w_ih_g[1], gru_g.bias_ih), 1, K)
            assert u_zg is not None  # drawn whenever there is a graph state
            g_zg = _steps(gumbel_from_uniform(u_zg), 2, K)
            ar_g = torch.arange(cg, device=dev)
            qg_w, qg_b = _first_layer(self.post_g.mlp, [H, H, E])
            pre_qg = _steps(member_linear(e_g, qg_w[2], qg_b), 1, K)
            qg_last = _loop_bias(_last_t(self.post_g.mlp))
            qg_norm = _loop_norm(self.post_g.mlp.net[1])
            hn_parts.append((qg_w[1].transpose(-1, -2), None))
            # h_g^+ -> [q_g | message-passing layer 0 | GRU_g's hidden gates of the next step]
            hg_parts = [(qg_w[0].transpose(-1, -2), None)]
            hg_parts += [(mp_w[0][1], None)] if mp_w else []
            hg_prod = _loop_bias(_stacked([*hg_parts, *_gate_parts(gru_g)]))
            # z_g^+ -> [message-passing layer 0 | q_n | GRU_g's input gates of the next step]
            zg_parts: list[tuple[torch.Tensor, torch.Tensor | None]] = []
            zg_parts += [(mp_w[0][2], None)] if mp_w else []
            zg_parts += [(qn_w[1].transpose(-1, -2), None), (w_ih_g[0].transpose(-1, -2), None)]
            zg_prod = _loop_bias(_stacked(zg_parts))
            if c.h_plus:
                hg_w, hg_b = _first_layer(self.post_h_g, [H, E, E])
                e_v_pool = masked_mean(e_v, nmf[:, None, :, None], 2)
                pre = member_linear(e_g, hg_w[1], hg_b)
                pre = pre + member_linear(e_v_pool, hg_w[2])
                pre_hg = _steps(pre, 1, K)
                hg_h, hg_last = hg_w[0].transpose(-1, -2), _loop_bias(_last_t(self.post_h_g))
                hg_norm = _loop_norm(self.post_h_g.net[1])
        hn_prod = _loop_bias(_stacked(hn_parts))
        # per layer (W_h, b, W_hg, W_zg, its LayerNorm) for the loop
        mp_loop = [
            (*_loop_bias((w[0], w[3], w[1], w[2])), _loop_norm(layer.get_submodule("norm")))
            for w, layer in zip(mp_w, self.mp.layers, strict=True)
        ]
        norm_n = _loop_norm(self.gru_n.norm)
        norm_g = _loop_norm(self.gru_g.norm) if c.graph_state else None
        alphas = alpha.unbind(1) if alpha.dim() == 4 else (alpha,) * T
        # ---- the recurrence, from the zero latent (its products: the biases)
        h_n = e_v.new_zeros(*rows_n, H)
        gi_nz = gi_n[0]
        gh_n = expand_rows(gru_n.bias_hh, rows_n).split([2 * H, H], -1)
        h_g = z_g = h_g_m = h_g_p = e_v.new_zeros(*rows_g, 0)
        if c.graph_state:
            assert norm_g is not None
            h_g = e_v.new_zeros(*rows_g, H)
            gi_gz = gi_g[0]
            gh_g = expand_rows(gru_g.bias_hh, rows_g).split([2 * H, H], -1)
        q_g = e_v.new_zeros(*rows_g, 0, 0)
        steps = []
        for t in range(T):
            # 1. h^- = LN(GRU([z, a] | h)): the gates' action parts were computed above
            h_n_m = norm_n(gru_from_split_gates(gi_nz, h_n, *gh_n))
            if norm_g is not None:
                h_g_m = norm_g(gru_from_split_gates(gi_gz, h_g, *gh_g))
            # 2. h^+ = h^- + sigmoid(g) * dh, [dh || g] = MLP+(h^-, e_v, e_g)
            h_n_p, h_g_p = h_n_m, h_g_m
            if c.h_plus:
                x = member_addmm(pre_hn[t], h_n_m, hn_h)
                dh, g = _mlp_tail(hn_norm, x, hn_last).split([H, H], -1)
                h_n_p = h_n_m + torch.sigmoid(g) * dh
                if c.graph_state:
                    x = member_addmm(pre_hg[t], h_g_m, hg_h)
                    dh, g = _mlp_tail(hg_norm, x, hg_last).split([H, H], -1)
                    h_g_p = h_g_m + torch.sigmoid(g) * dh
            hn_y = _product(hn_prod, h_n_p)
            gh_n = hn_y[1:3] if mp_w else hn_y[0:2]
            # 3. z_g^+ ~ q_g(. | h_g^+, Pool h^+, e_g)
            if c.graph_state:
                hg_y = _product(hg_prod, h_g_p)
                gh_g = hg_y[-2:]
                x = _block_addmm(pre_qg[t] + hg_y[0], pool_mat, hn_y[-1])
                logits = _mlp_tail(qg_norm, x, qg_last).view(*rows_g, gg, cg)
                q_g = _unimix(logits, c.unimix, uniforms)
                z_g = _onehot_st(q_g, g_zg[t], ar_g).view(*rows_g, self.zg_dim)
                zg_y = _product(zg_prod, z_g)
                if t + 1 < T:
                    gi_gz = gi_g[t + 1] + zg_y[-1]
            # 5. m^(L)+ on the observed A_t, [h_g^+, z_g^+] injected (paper, eq. message passing)
            m = h_n_p
            if mp_w:
                y = hn_y[0]
                if c.graph_state:  # [h_g, z_g] W_g^T, the same for every node of a graph
                    y = _block_addmm(y, bcast_mat, hg_y[1] + zg_y[0])
                m = self._mp_flat(mp_loop, y, alphas[t], B, N, rows_n)
            # 6. z^+ ~ q_n(. | m^(L)+, z_g^+, e_v)
            x = member_addmm(pre_qn[t], m, qn_m)
            if c.graph_state:
                x = _block_addmm(x, bcast_mat, zg_y[-2])
            q_n = _unimix(_mlp_tail(qn_norm, x, qn_last).view(*rows_n, gn, cn), c.unimix, uniforms)
            z_n_p = _onehot_st(q_n, g_zn[t], ar_n).view(*rows_n, self.zn_dim)
            h_n, h_g = h_n_p, h_g_p
            if t + 1 < T:
                gi_nz = member_addmm(gi_n[t + 1], z_n_p, w_zn)
            if t > 0:  # step 0 only initialises the posterior; losses are on steps 1..L
                steps.append((h_n_m, h_g_m, h_n_p, h_g_p, q_g, z_g, q_n, z_n_p))
        out = []
        for k, parts in enumerate(zip(*steps, strict=True)):
            # (rows, T-1, ...); a member model's (K, rows/K, ...) states stacked on axis 2
            x = torch.stack(parts, 2).flatten(0, 1) if K else torch.stack(parts, 1)
            if k in (0, 2, 6, 7):  # node tensors: (B*N, T-1, ...) -> (B, T-1, N, ...)
                x = x.view(B, N, *x.shape[1:]).transpose(1, 2)
            out.append(x)
        return tuple(out)

    def _mp_weights(self, h: int) -> list[tuple[torch.Tensor, ...]]:
        """Per message-passing layer: its two linear maps stacked, [W | W_root]^T split into
        the node rows and the injected h_g and z_g rows (layer 0; empty after), and the bias
        [0 | b_root]."""
        out = []
        for k, layer in enumerate(self.mp.layers):
            assert isinstance(layer, SparseGATLayer)
            w = torch.cat([layer.lin.weight, layer.root.weight], -2)
            b = torch.cat([torch.zeros_like(layer.root.bias), layer.root.bias], -1)
            sizes = [h, self.hg_dim, self.zg_dim] if k == 0 else [h, 0, 0]
            out.append((*(p.transpose(-1, -2) for p in w.split(sizes, -1)), b))
        return out

    def _mp_flat(
        self,
        weights: list[tuple[Any, ...]],
        y: torch.Tensor,
        alpha: torch.Tensor,
        b: int,
        n: int,
        rows: tuple[int, ...],
    ) -> torch.Tensor:
        """:meth:`GraphMessagePassing.forward_normalised` on flat node states (B*N, H) given
        layer 0's products ``y`` = [W m | W_root m + b_root] ([h_g, z_g] included): layer l,
        m <- LayerNorm(W_root m + alpha (W m)) (paper, "Adjacency Prediction and Message
        Passing"). ``weights``: per layer (W_h, bias, W_hg, W_zg, its LayerNorm); ``rows``: the
        shape of the node rows, (B*N,), or (K, B*N/K) in a member model."""
        hid = y.shape[-1] // 2
        m = y
        for k, (w_h, bias, _, _, norm) in enumerate(weights):
            if k > 0:
                y = member_mm(m, w_h, bias)
            lin, root = y.view(b, n, 2 * hid).split([hid, hid], -1)
            agg = torch.baddbmm(root, alpha, lin)
            if len(rows) == 1:
                m = norm(agg).view(b * n, hid)
            else:  # a member model: the norm on the (K, rows, hid) view
                m = norm(agg.view(*rows, hid))
        return m

    def imagine_step(
        self,
        latent: GDMLatent,
        action: torch.Tensor,
        noise: Noise,
        key: str,
        edge_impl: str | None = None,
    ) -> tuple[dict[str, torch.Tensor], GDMLatent]:
        """One prior step of B graphs ((B, N) float actions): the sampled prediction tensors
        (environment units, the keys of :data:`~gdm_models.world_model.PREDICTION_KEYS`) and
        the next latent. ``key`` names this step's noise (``"<key>/<what>"``)."""
        c, sc = self.config, self.scaler
        S, N = action.shape
        dev = self.device
        nm = torch.ones(S, N, dtype=torch.bool, device=dev)
        pm = ~torch.eye(N, dtype=torch.bool, device=dev)[None]
        t = key
        h_n_m, h_g_m = self.transition(latent, action, nm)
        o = self.prior_branch(latent, h_n_m, h_g_m, nm, pm, noise, t, edge_impl)
        node_out, graph_out, d_n = self.decode(
            h_n_m, o["z_n_m"], o["p_n"], h_g_m, o["z_g_m"], o["p_g"], nm
        )
        if c.recurrent_adjacency:
            adj = o["a_m"]  # pass-through of the sampled recurrent adjacency
        else:
            logits = self.adj_head(d_n)
            u = noise.uniform(f"{t}/adj", (S, N, N), symmetric=True)
            adj = ((u < torch.sigmoid(logits)) & pm).to(logits.dtype)
        pred: dict[str, torch.Tensor] = {"adjacency": adj}
        pred["node_continuous"] = sc.unscale_node(node_out["node_continuous"])
        pred["node_categorical"] = self.sample_categoricals(
            node_out["node_categorical"], (S, N), noise, f"{t}/out_node_cat"
        )
        u = noise.uniform(f"{t}/out_action_mask", (S, N))
        pred["action_mask"] = (u < torch.sigmoid(node_out["action_mask"])).long()
        pred["graph_continuous"] = sc.unscale_graph(graph_out["graph_continuous"])
        pred["graph_categorical"] = self.sample_categoricals(
            graph_out["graph_categorical"], (S,), noise, f"{t}/out_graph_cat"
        )
        pred["reward"] = sc.unscale_reward(graph_out["reward"])
        u = noise.uniform(f"{t}/out_cont", (S,))
        pred["continuation"] = (u < torch.sigmoid(graph_out["continuation"])).long()
        return pred, GDMLatent(h_n_m, o["z_n_m"], h_g_m, o["z_g_m"], adj)
