"""The GDM's named parts (paper, section "Graph Dynamics Model", subsection "Architecture"),
each a module holding the networks of one paragraph of the paper, with its equations in their
plain form (concatenated inputs, whole modules). :class:`~gdm_models.gdm.cell.GDMCell`
composes them; the training recurrence (:mod:`gdm_models.gdm.step`) runs the same maps in a
fused form (:mod:`gdm_models.layers`), tested against these.

Parts, in the order of their parameters (which is the order of the parameters and of the
optimiser state of checkpoints written before the parts existed):

* :class:`Embeddings` - paragraph "Encoder" (e_v, e_g) and the action embedding a_t(v);
* :class:`DeterministicState` - "Recurrent Dynamics and Posterior-Informed Deterministic State":
  the transition h^- = LN(GRU([z, a] | h)) and the h-plus update h^+ = h^- + sigmoid(g) dh
  (one part, as one paragraph: their networks interleave in the parameter order);
* :class:`GraphLatent` - "Adjacency Prediction and Message Passing", p_g and q_g;
* :class:`AdjacencyPart` - the edge-update logits, Hard Concrete gate and XOR update (or, in
  the ``no-recurrent-adj`` ablation, the decoder's pair-dot head and the observed-graph GNN);
* message passing - :class:`~gdm_models.message_passing.GraphMessagePassing` itself;
* :class:`NodeLatent` - p_n and q_n;
* :class:`Decoder` - paragraph "Decoder" (eq. decoder) and the feature heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..adjacency import (
    EPS,
    EdgeUpdateMLP,
    bernoulli_gate,
    hard_concrete_gate,
    hard_concrete_open,
    xor_update,
)
from ..backends import compiled_loops, plain
from ..decoder import GraphHeads, InnovationDecoder, NodeHeads, PairDotAdjacencyHead
from ..encoder import ActionEmbedding, FeatureEncoder, ObservedGraphEncoder
from ..layers import MLP, CategoricalHead, LayerNormGRU, sample_onehot_st
from ..losses import masked_mean
from ..scaling import FeatureScaler
from ..schema import Schema
from .config import GDMConfig

__all__ = [
    "AdjacencyPart",
    "Decoder",
    "DeterministicState",
    "Embeddings",
    "GraphLatent",
    "NodeLatent",
    "pool",
    "bcast",
    "flat",
]


def pool(x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    """Pool = mean over the real nodes: (B, N, D) -> (B, D)."""
    return masked_mean(x, node_mask[..., None], 1)


def flat(z: torch.Tensor) -> torch.Tensor:
    """(..., groups, classes) -> (..., groups * classes)."""
    return z.reshape(*z.shape[:-2], -1)


def bcast(g: torch.Tensor, n: int) -> torch.Tensor:
    """A graph vector (B, D) for each of N nodes: (B, N, D)."""
    return g[:, None, :].expand(-1, n, -1)


class Embeddings(nn.Module):
    """Paper, "Encoder": node and graph embeddings e_v(o), e_g(o); and the action embedding
    a_t(v) ("Recurrent Dynamics": a linear map of the action set)."""

    def __init__(self, schema: Schema, scaler: FeatureScaler, embed_dim: int) -> None:
        super().__init__()
        self.encoder = FeatureEncoder(schema, scaler, embed_dim)
        self.action_embed = ActionEmbedding(embed_dim)


class DeterministicState(nn.Module):
    """Paper, "Recurrent Dynamics and Posterior-Informed Deterministic State":

    h^-_t(v) = LN(GRU_n([z_{t-1}(v), a_t(v)] | h_{t-1}(v))),
    h_g,t^- = LN(GRU_g([z_g,t-1, Pool_v a_t(v)] | h_g,t-1))          (Pool = mean);
    h^+ = h^- + sigmoid(g) * dh, [dh || g] = MLP+_n(h^-, e_v, e_g) (graph: MLP+_g(h_g^-, e_g,
    Pool e_v)). Without ``h_plus`` (ablation) h^+ = h^-; without graph state no h_g.
    """

    def __init__(self, c: GDMConfig, zn_dim: int, zg_dim: int) -> None:
        super().__init__()
        H, E, M = c.hidden_dim, c.embed_dim, c.mlp_width
        self.graph_state, self.has_h_plus = c.graph_state, c.h_plus
        self.gru_n = LayerNormGRU(zn_dim + E, H)
        if c.h_plus:
            self.post_h_n = MLP(H + 2 * E, M, 2 * H)
        if c.graph_state:
            self.gru_g = LayerNormGRU(zg_dim + E, H)
            if c.h_plus:
                self.post_h_g = MLP(H + 2 * E, M, 2 * H)

    def transition(
        self,
        h_n: torch.Tensor,
        z_n: torch.Tensor,
        h_g: torch.Tensor,
        z_g: torch.Tensor,
        a: torch.Tensor,
        node_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h^-, h_g^- from the previous latent and the action embeddings ``a`` (B, N, E)."""
        h_n_m = self.gru_n(torch.cat([z_n, a], -1), h_n)
        if not self.graph_state:
            return h_n_m, h_g
        return h_n_m, self.gru_g(torch.cat([z_g, pool(a, node_mask)], -1), h_g)

    def h_plus(
        self,
        h_n: torch.Tensor,
        h_g: torch.Tensor,
        e_v: torch.Tensor,
        e_g: torch.Tensor,
        node_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior-informed deterministic states h^+, h_g^+ from h^-, h_g^-."""
        if not self.has_h_plus:
            return h_n, h_g
        n = h_n.shape[1]
        dh, g = self.post_h_n(torch.cat([h_n, e_v, bcast(e_g, n)], -1)).chunk(2, -1)
        h_n_p = h_n + torch.sigmoid(g) * dh
        if not self.graph_state:
            return h_n_p, h_g
        dhg, gg = self.post_h_g(torch.cat([h_g, e_g, pool(e_v, node_mask)], -1)).chunk(2, -1)
        return h_n_p, h_g + torch.sigmoid(gg) * dhg


class GraphLatent(nn.Module):
    """Paper, "Adjacency Prediction and Message Passing": z_g^- ~ p_g(. | h_g^-, Pool h^-),
    z_g^+ ~ q_g(. | h_g^+, Pool h^+, e_g) (categorical with unimix, straight-through)."""

    def __init__(self, c: GDMConfig) -> None:
        super().__init__()
        H, E, M = c.hidden_dim, c.embed_dim, c.mlp_width
        gg, gc = c.graph_latent_groups, c.graph_latent_classes
        self.prior_g = CategoricalHead(2 * H, M, gg, gc, c.unimix)
        self.post_g = CategoricalHead(2 * H + E, M, gg, gc, c.unimix)

    def forward(
        self, head: str, inputs: list[torch.Tensor], u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(probs (B, Gg, Cg), one-hot sample (B, Gg*Cg)) of ``head`` ("prior_g" or "post_g")
        on the concatenated ``inputs``; ``u`` the sample's uniforms."""
        probs = getattr(self, head)(torch.cat(inputs, -1))
        return probs, flat(sample_onehot_st(probs, u))


class AdjacencyPart(nn.Module):
    """Paper, "Adjacency Prediction and Message Passing": the edge-update logits
    l_ij = MLP_adj(h_i, h_j, h_g, z_g, A_{t-1}(i,j)), the Hard Concrete (or Bernoulli) gate
    c_ij and A_t = A_{t-1} xor 1[c > 0] with straight-through weights b_bar.

    In the ``no-recurrent-adj`` ablation instead: the decoder's pair-dot head predicts A_t
    and the observed topology enters through GNN layers on e_v (as in G-RSSM).
    """

    def __init__(self, c: GDMConfig, g_dim: int) -> None:
        super().__init__()
        self.sampler = c.adjacency_sampler
        self.hc = (c.hc_beta, c.hc_gamma, c.hc_zeta)
        if c.recurrent_adjacency:
            self.edge_mlp = EdgeUpdateMLP(c.hidden_dim, g_dim, c.mlp_width)
        else:
            self.adj_head = PairDotAdjacencyHead(c.hidden_dim, c.hidden_dim)
            self.obs_graph = ObservedGraphEncoder(c.embed_dim, c.encoder_gnn_layers)

    def sample(
        self, logits: torch.Tensor, a_prev: torch.Tensor, pair_mask: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate, XOR update, straight-through weights: (A_t, b_bar); ``u`` symmetric uniforms."""
        autograd = torch.is_grad_enabled() and (logits.requires_grad or u.requires_grad)
        if not (autograd or plain()):
            # no autograd (imagination; not the reference backend): only 1[c > 0] is used,
            # and A_t is b_bar's forward value (xor_update); the event from one comparison
            a_t = _open_xor(logits, u, a_prev, pair_mask, self.sampler == "bernoulli")
            return a_t, a_t
        if self.sampler == "hard_concrete":
            gate = hard_concrete_gate(logits, u, *self.hc)
        else:
            gate = bernoulli_gate(logits, u)
        gate = gate * pair_mask.to(gate.dtype)  # no gate on the diagonal / padding
        return xor_update(a_prev, gate)


def _open_xor(
    logits: torch.Tensor,
    u: torch.Tensor,
    a_prev: torch.Tensor,
    pair_mask: torch.Tensor,
    bernoulli: bool,
) -> torch.Tensor:
    """A_t = A_{t-1} xor (pair_mask and 1[c > 0]) without autograd: the Hard Concrete gate's
    event (:func:`~gdm_models.adjacency.hard_concrete_open`) or, ``bernoulli``, the Bernoulli
    gate's u < sigmoid(l) (its forward value hard + p - p is > 0 exactly when hard = 1); on
    the CPU the comparison and the XOR in one compiled pass."""
    mask = pair_mask.expand(-1, *logits.shape[-2:]) if pair_mask.dim() == 3 else None
    if mask is not None and compiled_loops(logits, u):
        from ..cpu_kernels import open_xor_

        threshold = torch.sigmoid(logits) if bernoulli else torch.neg(logits).sigmoid_()
        a = a_prev.to(logits.dtype)
        return open_xor_(threshold, u, a, mask.contiguous(), EPS, below=bernoulli)
    event = u < torch.sigmoid(logits) if bernoulli else hard_concrete_open(logits, u)
    return (event & pair_mask).logical_xor_(a_prev != 0).to(logits.dtype)


class NodeLatent(nn.Module):
    """Paper, "Adjacency Prediction and Message Passing": z^-(v) ~ p_n(. | m^(L)-(v), z_g^-),
    z^+(v) ~ q_n(. | m^(L)+(v), z_g^+, e_v)."""

    def __init__(self, c: GDMConfig, zg_dim: int) -> None:
        super().__init__()
        H, E, M = c.hidden_dim, c.embed_dim, c.mlp_width
        ng, nc = c.node_latent_groups, c.node_latent_classes
        self.prior_n = CategoricalHead(H + zg_dim, M, ng, nc, c.unimix)
        self.post_n = CategoricalHead(H + zg_dim + E, M, ng, nc, c.unimix)

    def forward(
        self, head: str, inputs: list[torch.Tensor], u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(probs (B, N, Gn, Cn), one-hot sample (B, N, Gn*Cn)) of ``head``."""
        probs = getattr(self, head)(torch.cat(inputs, -1))
        return probs, flat(sample_onehot_st(probs, u))


class Decoder(nn.Module):
    """Paper, "Decoder" (eq. decoder): d = theta(h^-) + Innovation(h^-, z - E_p[z]) for nodes
    and (with graph state) the graph, then the feature heads; without graph state the graph
    heads read Pool d_n."""

    def __init__(self, c: GDMConfig, schema: Schema, zn_dim: int, zg_dim: int) -> None:
        super().__init__()
        H, M = c.hidden_dim, c.mlp_width
        self.dec_n = InnovationDecoder(H, zn_dim, M, H)
        if c.graph_state:
            self.dec_g = InnovationDecoder(H, zg_dim, M, H)
        self.node_heads = NodeHeads(schema, H)
        self.graph_heads = GraphHeads(schema, H)

    def forward(
        self,
        h_n_m: torch.Tensor,
        z_n: torch.Tensor,
        p_n: torch.Tensor,
        h_g_m: torch.Tensor,
        z_g: torch.Tensor,
        p_g: torch.Tensor | None,
        node_mask: torch.Tensor,
    ) -> tuple[dict[str, Any], dict[str, Any], torch.Tensor]:
        """(node head outputs, graph head outputs, node states d_n); E_p[z] = the prior
        probabilities ``p_n``, ``p_g``."""
        d_n = self.dec_n(h_n_m, z_n, flat(p_n))
        if hasattr(self, "dec_g"):
            assert p_g is not None  # the graph prior exists with graph state
            d_g = self.dec_g(h_g_m, z_g, flat(p_g))
        else:
            d_g = pool(d_n, node_mask)
        return self.node_heads(d_n), self.graph_heads(d_g), d_n
