"""The GDM cell: the named parts of the Graph Dynamics Model (:mod:`.parts`) and the steps
composed from them (paper, section "Graph Dynamics Model"). One time step (prior ``-``,
posterior ``+``):

1. transition: h_t^-(v) = LN(GRU_n([z_{t-1}(v), a_t(v)] | h_{t-1}(v))),
   h_g,t^- = LN(GRU_g([z_g,t-1, Pool_v a_t(v)] | h_g,t-1))          (Pool = mean)
2. posterior only, h-plus update: h^+ = h^- + sigmoid(g) * dh, [dh || g] = MLP+_n(h^-, e_v, e_g)
   (graph: MLP+_g(h_g^-, e_g, Pool e_v))
3. graph latent: z_g^- ~ p_g(. | h_g^-, Pool h^-);  z_g^+ ~ q_g(. | h_g^+, Pool h^+, e_g)
4. adjacency, prior: l_ij = MLP_adj(h_i^-, h_j^-, h_g^-, z_g^-, A_{t-1}(i,j)); Hard Concrete gate
   c_ij; A_t = A_{t-1} xor 1[c > 0]; straight-through weights b_bar. Posterior: A_t and b
   teacher-forced to the observed adjacency.
5. message passing: m^(L) = SparseGAT-style layers on A_t with [h_g, z_g] injected (m^(0) = h)
6. node latent: z^-(v) ~ p_n(. | m^(L)-(v), z_g^-);  z^+(v) ~ q_n(. | m^(L)+(v), z_g^+, e_v)
7. decoder D(h^-, z - E_p[z]) -> heads; adjacency passed through.

The posterior step (steps 1-3, 5, 6 on h^+, z^+ and the observed A_t) is
:class:`~gdm_models.gdm.step.PosteriorStep`; every posterior path is a scan of it
(:meth:`GDMCell.posterior`): the training loss, ``observe`` and ``start``. The prior step
(:meth:`GDMCell.imagine_step`: the same transition, then :meth:`GDMCell.prior` and the decoder)
is iterated in imagination; in training the prior quantities of every transition are computed
from h^-_t after the scan, for all steps at once (they never feed the recurrence). Time step 0
of a window (or of ``observe``) starts from a zero latent, a zero action and an empty previous
adjacency and only computes the posterior; the losses are taken on the L transitions 1..L.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..adjacency import next_edge_signed_logit, same_rows
from ..backends import compiled_loops, plain
from ..layers import gumbel_from_uniform
from ..message_passing import GraphMessagePassing, normalise_weights
from ..scaling import FeatureScaler
from ..schema import Schema
from .config import GDMConfig
from .latent import (
    NEIGHBOURS_MAX_DENSITY,
    SPARSE_MAX_DENSITY,
    GDMLatent,
    Noise,
    PosteriorSequence,
    PriorNoise,
)
from .parts import (
    AdjacencyPart,
    Decoder,
    DeterministicState,
    Embeddings,
    GraphLatent,
    NodeLatent,
    bcast,
    pool,
)
from .step import STEP_OUTPUTS, PosteriorStep, fused_transition, scan

__all__ = ["GDMCell", "PlainInputs", "PlainPosteriorStep"]


@dataclass
class PlainInputs:
    """One step's inputs of :class:`PlainPosteriorStep`: the action embeddings (B, N, E),
    e_v (B, N, E), e_g (B, E), the normalised weights alpha (B, N, N) of the observed A_t and
    the uniforms of the samples."""

    a: torch.Tensor
    e_v: torch.Tensor
    e_g: torch.Tensor
    alpha: torch.Tensor
    u_zg: torch.Tensor | None
    u_zn: torch.Tensor


class PlainPosteriorStep:
    """The posterior step in the plain form of the parts (:mod:`.parts`; the ``"reference"``
    backend, :mod:`gdm_models.backends`): the same interface and outputs as the fused
    :class:`~gdm_models.gdm.step.PosteriorStep`, whose function it defines. The carry is the
    posterior latent (h^+, z^+, h_g^+, z_g^+)."""

    def __init__(self, cell: GDMCell, node_mask: torch.Tensor, dtype: torch.dtype) -> None:
        if cell.member_count():
            raise ValueError("the reference backend runs ordinary models, not member models")
        self.cell, self.node_mask = cell, node_mask

    def inputs(self, seq: PosteriorSequence, split_time: bool = False) -> list[PlainInputs]:
        """The inputs of :meth:`PosteriorStep.inputs` cut into steps (each step's work is
        done in the step; ``a_pool`` is recomputed there, ``split_time`` has no effect)."""
        a_emb, _, e_v, e_g, alpha, u_zg, u_zn = seq.fields()
        T = e_v.shape[1]
        return [
            PlainInputs(
                a_emb[:, t],
                e_v[:, t],
                e_g[:, t],
                alpha[:, t] if alpha.dim() == 4 else alpha,
                None if u_zg is None else u_zg[:, t],
                u_zn[:, t],
            )
            for t in range(T)
        ]

    def initial(self, like: torch.Tensor) -> GDMLatent:
        """The zero latent."""
        b, n = self.node_mask.shape
        return self.cell.initial_latent(b, n)

    def step(self, prev: GDMLatent, x: PlainInputs) -> tuple[GDMLatent, dict[str, Any]]:
        """One posterior step: the posterior latent (A_t: the previous latent's, the caller
        knows the observed one) and the :data:`STEP_OUTPUTS` by name, (B, N, ...) node
        tensors. Paper, section "Graph Dynamics Model", subsection "Architecture"."""
        cell, nm = self.cell, self.node_mask
        c, d = cell.config, cell.deter
        b, n = nm.shape
        # 1. transition ("Recurrent Dynamics"): h^- = LN(GRU([z, a] | h))
        h_n_m, h_g_m = d.transition(prev.h_n, prev.z_n, prev.h_g, prev.z_g, x.a, nm)
        # 2. h-plus update ("Posterior-Informed Deterministic State")
        h_n_p, h_g_p = d.h_plus(h_n_m, h_g_m, x.e_v, x.e_g, nm)
        # 3. graph latent ("Adjacency Prediction and Message Passing"): z_g^+ ~ q_g
        q_g, z_g_p = h_g_p.new_zeros(b, 0, 0), h_g_p.new_zeros(b, 0)
        if c.graph_state:
            assert x.u_zg is not None  # drawn whenever there is a graph state
            q_g, z_g_p = cell.graph_latent("post_g", [h_g_p, pool(h_n_p, nm), x.e_g], x.u_zg)
        # 4. adjacency teacher-forced to the observed A_t ("Training"); 5. message passing
        m = cell.mp.forward_normalised(h_n_p, torch.cat([h_g_p, z_g_p], -1), x.alpha)
        # 6. node latent: z^+ ~ q_n(. | m^(L)+, z_g^+, e_v)
        q_n, z_n_p = cell.node_latent("post_n", [m, bcast(z_g_p, n), x.e_v], x.u_zn)
        nxt = GDMLatent(h_n_p, z_n_p, h_g_p, z_g_p, prev.adjacency)
        values = (h_n_m, h_g_m, h_n_p, h_g_p, q_g, z_g_p, q_n, z_n_p)
        return nxt, dict(zip(STEP_OUTPUTS, values, strict=True))

    def __call__(
        self, prev: GDMLatent, x: PlainInputs
    ) -> tuple[GDMLatent, tuple[torch.Tensor, ...]]:
        """:meth:`step` in the scan's layout: the outputs in order, node rows flat."""
        nxt, out = self.step(prev, x)
        flat = ("h_n_m", "h_n_p", "q_n", "z_n_p")
        return nxt, tuple(v.reshape(-1, *v.shape[2:]) if k in flat else v for k, v in out.items())


class GDMCell(nn.Module):
    """The GDM's network as its named parts (:mod:`.parts`, in the paper's order) and its
    steps: :meth:`posterior` (a scan of the posterior step), :meth:`prior` and
    :meth:`imagine_step`. :class:`~gdm_models.gdm.model.GDM` holds one and adds the world-model
    API and the loss."""

    def __init__(self, schema: Schema, scaler: FeatureScaler, config: GDMConfig) -> None:
        super().__init__()
        c = self.config = config
        H = c.hidden_dim
        self.zn_dim = c.node_latent_groups * c.node_latent_classes
        self.zg_dim = c.graph_latent_groups * c.graph_latent_classes if c.graph_state else 0
        self.hg_dim = H if c.graph_state else 0
        g_dim = self.hg_dim + self.zg_dim  # dim([h_g, z_g])
        # built in this order: the order of the parameters (and of the random initialisation)
        self.embed = Embeddings(schema, scaler, c.embed_dim)
        self.deter = DeterministicState(c, self.zn_dim, self.zg_dim)
        if c.graph_state:
            self.graph_latent = GraphLatent(c)
        self.adjacency = AdjacencyPart(c, g_dim)
        self.mp = GraphMessagePassing(H, g_dim, c.mp_layers)
        self.node_latent = NodeLatent(c, self.zg_dim)
        self.decoder = Decoder(c, schema, self.zn_dim, self.zg_dim)

    def member_count(self) -> int:
        """K of a member model (:func:`~gdm_models.member_layers.stack_members`: its weights
        carry a leading member axis); 0 for an ordinary model."""
        w = self.deter.gru_n.cell.weight_hh
        return int(w.shape[0]) if w.dim() == 3 else 0

    @property
    def device(self) -> torch.device:
        return self.deter.gru_n.cell.weight_hh.device

    # ================================================================== latents and noise
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

    def zg_shape(self, *lead: int) -> tuple[int, ...]:
        return (*lead, self.config.graph_latent_groups, self.config.graph_latent_classes)

    def zn_shape(self, *lead: int) -> tuple[int, ...]:
        return (*lead, self.config.node_latent_groups, self.config.node_latent_classes)

    def draw_zg(self, noise: Noise, key: str, *lead: int) -> torch.Tensor | None:
        """Uniforms of a graph-latent sample (none without graph state)."""
        return noise.uniform(key, self.zg_shape(*lead)) if self.config.graph_state else None

    def encode(
        self, obs: Mapping[str, torch.Tensor], node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Observation embeddings e_v (B,N,E), e_g (B,E); without the recurrent adjacency the
        observed topology enters here, through GNN layers on e_v (as in G-RSSM)."""
        e_v, e_g = self.embed.encoder(obs)
        if not self.config.recurrent_adjacency:
            e_v = self.adjacency.obs_graph(e_v, obs["adjacency"], node_mask)
        return e_v, e_g

    # ================================================================== posterior
    def posterior(
        self, seq: PosteriorSequence, node_mask: torch.Tensor, split_time: bool = False
    ) -> tuple[Any, list[tuple[torch.Tensor, ...]]]:
        """The posterior pass over T steps from the zero latent (``split_time``: see
        :meth:`PosteriorStep.inputs`): the observation-only work of all steps at once, then a
        scan of the posterior step. Returns the last carry and each step's outputs
        (:data:`~gdm_models.gdm.step.STEP_OUTPUTS`, node rows flat)."""
        # the backend's posterior step (gdm_models.backends): plain parts or fused maps
        dtype = seq.e_v.dtype
        step: Any = (PlainPosteriorStep if plain() else PosteriorStep)(self, node_mask, dtype)
        xs = step.inputs(seq, split_time)  # before initial: the first step's action gates
        return scan(step, step.initial(seq.e_v), xs)

    def posterior_latents(
        self, obs: Mapping[str, torch.Tensor], actions: torch.Tensor, noise: Noise
    ) -> list[GDMLatent]:
        """The posterior latents after each of T steps of B trajectories (``observe``,
        ``start``): ``obs`` (B, T, ...) tensors, ``actions`` (B, T, N) (the action before
        each observation, zero at step 0); noise keys ``"<t>/zg_post"``, ``"<t>/zn_post"``."""
        B, T, N = actions.shape
        dev, H = self.device, self.config.hidden_dim
        nm = torch.ones(B, N, dtype=torch.bool, device=dev)
        u_zg, u_zn = [], []
        for t in range(T):  # drawn step by step: the draws of a step-by-step pass
            u_zg.append(self.draw_zg(noise, f"{t}/zg_post", B))
            u_zn.append(noise.uniform(f"{t}/zn_post", self.zn_shape(B, N)))
        zg = torch.stack(u_zg, 1) if self.config.graph_state else None  # type: ignore[arg-type]
        # the observation-only work step by step (see PosteriorStep.inputs' split_time)
        enc = [self.encode({k: v[:, t] for k, v in obs.items()}, nm) for t in range(T)]
        e_v, e_g = (torch.stack(x, 1) for x in zip(*enc, strict=True))
        a_emb = torch.stack([self.embed.action_embed(actions[:, t]) for t in range(T)], 1)
        a_pool = torch.stack([pool(a_emb[:, t], nm) for t in range(T)], 1)
        if self.config.recurrent_adjacency:  # teacher forcing: b = the observed A_t
            alpha = normalise_weights(obs["adjacency"])
        else:
            pm = ~torch.eye(N, dtype=torch.bool, device=dev)
            alpha = normalise_weights(pm.to(a_emb.dtype)).expand(B, N, N)
        seq = PosteriorSequence(a_emb, a_pool, e_v, e_g, alpha, zg, torch.stack(u_zn, 1))
        _, ys = self.posterior(seq, nm, split_time=True)
        return [
            GDMLatent(y[2].view(B, N, H), y[7].view(B, N, -1), y[3], y[5], obs["adjacency"][:, t])
            for t, y in enumerate(ys)
        ]

    # ================================================================== prior
    def transition(
        self, prev: GDMLatent, a_emb: torch.Tensor, node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h^-, h_g^- of a prior step: the posterior step's transition (step 1) on a latent.

        Without autograd, rows equal bit for bit (imagination's first step: S copies of one
        latent with one action; in a batch of latents, S copies of each) are computed once
        per distinct row, each alone, and repeated: the same function with S times fewer
        products, and a row's result does not depend on its batch."""
        if plain():  # the reference backend: the part as written
            return self.deter.transition(prev.h_n, prev.z_n, prev.h_g, prev.z_g, a_emb, node_mask)
        b = prev.batch_size
        if b > 1 and not torch.is_grad_enabled():
            xs = [x for x in (*prev.tensors()[:4], a_emb, node_mask.to(a_emb.dtype)) if x.numel()]
            first = same_rows(*xs)
            distinct = sorted(set(first))
            if len(distinct) < b:
                parts = [
                    self._transition(
                        GDMLatent(*(t[r : r + 1] for t in prev.tensors())),
                        a_emb[r : r + 1],
                        node_mask[r : r + 1],
                    )
                    for r in distinct
                ]
                at = {r: k for k, r in enumerate(distinct)}
                rows = torch.tensor([at[f] for f in first], device=a_emb.device)
                h_n = torch.cat([p[0] for p in parts])[rows]
                return h_n, torch.cat([p[1] for p in parts])[rows]
        return self._transition(prev, a_emb, node_mask)

    def _transition(
        self, prev: GDMLatent, a_emb: torch.Tensor, node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`transition` on every row, in the fused backend's form (the posterior step's
        products, :func:`~gdm_models.gdm.step.fused_transition`)."""
        d = self.deter
        h_n = fused_transition(d.gru_n, prev.z_n, a_emb, prev.h_n)
        if not self.config.graph_state:
            return h_n, prev.h_g
        return h_n, fused_transition(d.gru_g, prev.z_g, pool(a_emb, node_mask), prev.h_g)

    def message_passing(
        self,
        h_n: torch.Tensor,
        g: torch.Tensor,
        *,
        hard: torch.Tensor | None,
        weights: torch.Tensor | None,
    ) -> torch.Tensor:
        """Step 5: the sparse PyG path for a constant hard adjacency, dense otherwise (always
        dense in the reference backend)."""
        if plain():
            w = weights if weights is not None else hard
            if w is None:
                raise ValueError("message passing needs a hard adjacency or weights")
            return self.mp.forward_dense(h_n, g, w)
        if hard is not None and (weights is None or not weights.requires_grad):
            # sparse PyG path for sparse graphs; a batched dense product is cheaper (and far
            # smaller than per-edge messages) once the graph is dense
            if compiled_loops(hard, h_n, g):
                return self._message_passing_cpu(h_n, g, hard)
            limit = SPARSE_MAX_DENSITY.get(hard.device.type, SPARSE_MAX_DENSITY["other"])
            if float(hard.sum()) <= limit * hard.numel():
                return self.mp.forward_sparse(h_n, g, hard)
            return self.mp.forward_dense(h_n, g, hard)
        if weights is None:
            raise ValueError("message passing needs a hard adjacency or weights")
        return self.mp.forward_dense(h_n, g, weights)

    def _message_passing_cpu(
        self, h_n: torch.Tensor, g: torch.Tensor, hard: torch.Tensor
    ) -> torch.Tensor:
        """CPU inference: each graph at most NEIGHBOURS_MAX_DENSITY dense takes the compiled
        neighbour lists (the sparse backend's numbers), a denser one the dense product;
        chosen per graph, so a graph's result does not depend on its batch."""
        n = hard.shape[-1]
        sparse = hard.sum((1, 2)) <= NEIGHBOURS_MAX_DENSITY * n * n
        if bool(sparse.all()):
            return self.mp.forward_neighbours(h_n, g, hard)
        if not bool(sparse.any()):
            return self.mp.forward_dense(h_n, g, hard)
        dense = ~sparse
        out = self.mp.forward_neighbours(h_n[sparse], g[sparse], hard[sparse])
        m = out.new_empty(h_n.shape[0], *out.shape[1:])
        m[sparse] = out
        m[dense] = self.mp.forward_dense(h_n[dense], g[dense], hard[dense])
        return m

    def prior(
        self,
        h_n_m: torch.Tensor,
        h_g_m: torch.Tensor,
        a_prev: torch.Tensor,
        node_mask: torch.Tensor,
        pair_mask: torch.Tensor,
        u: PriorNoise,
    ) -> dict[str, Any]:
        """The prior given h^- (steps 3-6: p_g, edge logits, sampled A_t, m^-, p_n), for any
        batch of graphs; the uniforms ``u`` drawn by the caller (:meth:`prior_noise`)."""
        c = self.config
        u_zg, u_adj, u_zn = u
        if c.graph_state:
            assert u_zg is not None  # with graph state the caller draws the uniforms
            p_g, z_g_m = self.graph_latent("prior_g", [h_g_m, pool(h_n_m, node_mask)], u_zg)
        else:
            p_g, z_g_m = None, h_g_m.new_zeros(h_g_m.shape[0], 0)
        g = torch.cat([h_g_m, z_g_m], -1)
        out: dict[str, Any] = {"p_g": p_g, "z_g_m": z_g_m, "logits": None, "a_m": None}
        if c.recurrent_adjacency:
            assert u_adj is not None  # drawn whenever the adjacency is recurrent
            adj = self.adjacency
            logits = adj.edge_mlp(h_n_m, g, a_prev, c.edge_chunk_elems)
            a_m, b_bar = adj.sample(logits, a_prev, pair_mask, u_adj)
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
        p_n, z_n_m = self.node_latent("prior_n", [m, bcast(z_g_m, m.shape[1])], u_zn)
        out.update(p_n=p_n, z_n_m=z_n_m)
        return out

    def prior_noise(self, noise: Noise, t: int | str, b: int, n: int) -> PriorNoise:
        """The uniforms of one prior step of B graphs (keys ``"<t>/zg_prior"``, ``"<t>/adj"``,
        ``"<t>/zn_prior"``, drawn in that order)."""
        u_zg = self.draw_zg(noise, f"{t}/zg_prior", b)
        u_adj = None
        if self.config.recurrent_adjacency:
            u_adj = noise.uniform(f"{t}/adj", (b, n, n), symmetric=True)
        return PriorNoise(u_zg, u_adj, noise.uniform(f"{t}/zn_prior", self.zn_shape(b, n)))

    def imagine_step(
        self, latent: GDMLatent, action: torch.Tensor, noise: Noise, key: str
    ) -> tuple[dict[str, Any], dict[str, Any], GDMLatent]:
        """One prior step of S graphs ((S, N) float actions): the node and graph heads'
        outputs and the next latent; ``key`` names the step's noise (``"<key>/<what>"``)."""
        S, N = action.shape
        nm = torch.ones(S, N, dtype=torch.bool, device=self.device)
        pm = ~torch.eye(N, dtype=torch.bool, device=self.device)[None]
        h_n_m, h_g_m = self.transition(latent, self.embed.action_embed(action), nm)
        u_prior = self.prior_noise(noise, key, S, N)
        o = self.prior(h_n_m, h_g_m, latent.adjacency, nm, pm, u_prior)
        node_out, graph_out, d_n = self.decoder(
            h_n_m, o["z_n_m"], o["p_n"], h_g_m, o["z_g_m"], o["p_g"], nm
        )
        if self.config.recurrent_adjacency:
            adj = o["a_m"]  # pass-through of the sampled recurrent adjacency
        else:
            logits = self.adjacency.adj_head(d_n)
            u = noise.uniform(f"{key}/adj", (S, N, N), symmetric=True)
            adj = ((u < torch.sigmoid(logits)) & pm).to(logits.dtype)
        return node_out, graph_out, GDMLatent(h_n_m, o["z_n_m"], h_g_m, o["z_g_m"], adj)


def sample_categoricals(
    logits: list[torch.Tensor], lead: tuple[int, ...], noise: Noise, key: str, dev: torch.device
) -> torch.Tensor:
    """One Gumbel-max sample of each categorical feature's logits: (*lead, features) long."""
    cols = []
    for i, lg in enumerate(logits):
        u = noise.uniform(f"{key}{i}", tuple(lg.shape))
        cols.append((torch.log_softmax(lg, -1) + gumbel_from_uniform(u)).argmax(-1))
    if not cols:
        return torch.zeros(*lead, 0, dtype=torch.long, device=dev)
    return torch.stack(cols, -1)
