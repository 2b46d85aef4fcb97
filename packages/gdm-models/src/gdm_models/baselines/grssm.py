"""G-RSSM (Karacelebi et al. 2026), adapted to multimodal, variable-size graph environments
(paper, "Related Work" and appendix "Baseline Implementations").

Per-node RSSM latents: a deterministic state h(v) (GRU) and a categorical stochastic state z(v)
(``groups x classes`` one-hot, straight-through samples, 1% unimix) for every node v. One
recurrent step (paper, "Background")::

    x(v)      = SiLU(W_in [h_{t-1}(v), z_{t-1}(v), a_t(v)])      a_t(v): node-set action indicator
    x         <- LayerNorm(x + AllPairsAttention(x))            (L rounds, all node pairs)
    h_t(v)    = GRU(x(v) | h_{t-1}(v))
    prior     p(z_t(v) | h_t(v));   posterior  q(z_t(v) | h_t(v), e_v(o_t))

The latent update exchanges messages between *all* pairs of nodes (multi-head dot-product
attention over the real nodes, O(N^2), evaluated in blocks of query nodes); the observed
topology is used only by the observation encoder: per-feature linear embeddings of the node
features, the action mask and the graph features *broadcast to every node*, averaged, then
``encoder_layers`` dense GNN layers (mean aggregation over neighbours, root connection,
LayerNorm) on the observed adjacency.

Decoder: emb(v) = f_dec(h(v), z(v)) (shared MLP); node heads on emb(v); graph heads, reward and
continuation on Pool_v emb(v) (Pool = mean); the size-independent adjacency decoder
``logit(u, v) = (W_adj emb(u))^T (W_adj emb(v))`` (symmetric by construction; one Bernoulli
draw per unordered pair at imagination time). ``adj_bias=True`` (default; not in the paper)
adds a learned scalar to that logit: the Gram-matrix logit alone is positive semi-definite, so
two nodes with equal embeddings (structurally identical nodes) always get an edge probability
>= 0.5, and the mean logit over the pairs of a graph is >= -mean ||W emb||^2 / (N - 1), which
rules out sparse large graphs. ``adj_bias=False`` is the paper's exact form. Scalar heads predict
in standardised units (appendix "Feature Scaling").

Loss (standard RSSM)::

    beta_pred L_pred + beta_dyn [KL(sg(q) || p)]_FB + beta_rep [KL(q || sg(p))]_FB

with L_pred the reconstruction of every observation of the window from the posterior latents
(node and graph features, beta_adj x adjacency BCE, action mask) plus reward / continuation of
each transition; the node KL is averaged over the real nodes of a graph before the free-bits
floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..api import WorldModel, predictions_to_numpy
from ..data import OBS_KEYS, Batch
from ..losses import free_bits
from ..rssm import categorical_kl, sample_onehot_st, unimix_probs
from ..scaling import FeatureScaler
from ..schema import Schema
from .common import (
    FeatureHeads,
    FeatureSetEncoder,
    Prediction,
    masked_node_mean,
    prediction_losses,
    sampled_state,
    state_from_observation,
)

__all__ = ["GRSSMConfig", "GRSSM", "GRSSMLatent", "AllPairsAttention", "GRSSM_TERM_KEYS"]

GRSSM_TERM_KEYS: tuple[str, ...] = (
    "pred",
    "node",
    "graph",
    "adjacency",
    "action_mask",
    "reward",
    "continuation",
    "kl",
    "kl_dyn",
    "kl_rep",
)


@dataclass
class GRSSMConfig:
    """Hyperparameters of G-RSSM (paper, final hyperparameter table).

    Attributes:
        embed_dim: dim(e), observation-embedding width.
        hidden_dim: dim(h).
        latent_groups, latent_classes: dim(z) = groups x classes (8 x 8).
        mp_layers: L, rounds of all-pairs message passing in the recurrent update.
        encoder_layers: GNN layers of the observation encoder.
        attn_heads: attention heads (must divide hidden_dim).
        beta_adj, beta_dyn, beta_rep, beta_pred: loss weights; free_bits: KL floor (nats).
        unimix: uniform mixture of every latent categorical.
        adj_bias: add a learned scalar to the adjacency logit (see module docstring).
        attn_chunk: query block size of the all-pairs attention (memory bound O(chunk x N)).
    """

    embed_dim: int = 128
    hidden_dim: int = 128
    latent_groups: int = 8
    latent_classes: int = 8
    mp_layers: int = 1
    encoder_layers: int = 1
    attn_heads: int = 4
    beta_adj: float = 1.0
    beta_dyn: float = 1.0
    beta_rep: float = 0.1
    beta_pred: float = 1.0
    free_bits: float = 0.01
    unimix: float = 0.01
    adj_bias: bool = True
    attn_chunk: int = 256

    def __post_init__(self) -> None:
        for name in ("embed_dim", "hidden_dim", "latent_groups", "attn_heads", "attn_chunk"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.latent_classes < 2:
            raise ValueError("latent_classes must be >= 2")
        if self.mp_layers < 0 or self.encoder_layers < 0:
            raise ValueError("mp_layers and encoder_layers must be >= 0")
        if self.hidden_dim % self.attn_heads:
            raise ValueError(
                f"attn_heads={self.attn_heads} must divide hidden_dim={self.hidden_dim}"
            )
        for name in ("beta_adj", "beta_dyn", "beta_rep", "beta_pred", "free_bits"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not 0 <= self.unimix < 1:
            raise ValueError("unimix must be in [0, 1)")


@dataclass
class GRSSMLatent:
    """Posterior state after the last observation of a trajectory (one graph, N nodes).

    Attributes:
        h: (N, hidden_dim) deterministic state.
        posterior: (N, groups, classes) posterior probabilities of z at the last step;
            imagination draws one z per sample from it.
    """

    h: torch.Tensor
    posterior: torch.Tensor

    @property
    def num_nodes(self) -> int:
        """N."""
        return self.h.shape[0]


def _mlp(i: int, hidden: int, o: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(i, hidden), nn.LayerNorm(hidden), nn.SiLU(), nn.Linear(hidden, o)
    )


class AllPairsAttention(nn.Module):
    """Multi-head dot-product attention from every real node to every real node (incl. itself).

    Queries are processed in blocks of ``chunk`` nodes, so memory is O(B x heads x chunk x N).
    """

    def __init__(self, dim: int, heads: int, chunk: int) -> None:
        super().__init__()
        self.heads, self.chunk = heads, chunk
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """x (B,N,D), node_mask (B,N) bool -> (B,N,D)."""
        B, N, D = x.shape
        H = self.heads
        q, k, v = self.qkv(x).view(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
        allowed = node_mask[:, None, None, :]  # keys: real nodes only
        outs = [
            F.scaled_dot_product_attention(q[:, :, s : s + self.chunk], k, v, attn_mask=allowed)
            for s in range(0, N, self.chunk)
        ]
        o = torch.cat(outs, dim=2).transpose(1, 2).reshape(B, N, D)
        return self.out(o)


class DenseGNNLayer(nn.Module):
    """e <- LayerNorm(e + SiLU(W_root e + W_nb mean_{u in N(v)} e(u))) on a dense adjacency."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.root = nn.Linear(dim, dim)
        self.neigh = nn.Linear(dim, dim, bias=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, e: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        deg = adj.sum(-1, keepdim=True)
        agg = (adj @ e) / deg.clamp_min(1.0)
        return self.norm(e + F.silu(self.root(e) + self.neigh(agg)))


class GRSSM(WorldModel):
    """G-RSSM (see the module docstring).

    Args:
        schema: feature schema.
        scaler: fitted feature scaler (``None`` = identity).
        config: :class:`GRSSMConfig`.
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | Schema,
        scaler: FeatureScaler | None,
        config: GRSSMConfig,
    ) -> None:
        super().__init__(schema, scaler, config)
        s, c = self.schema, config
        E, H, Z = c.embed_dim, c.hidden_dim, c.latent_groups * c.latent_classes
        # observation encoder: node features + action mask + graph features broadcast to nodes
        self.obs_embed = FeatureSetEncoder(
            s.num_node_continuous + s.num_graph_continuous,
            s.node_cardinalities + s.graph_cardinalities,
            1,
            E,
        )
        self.encoder_gnn = nn.ModuleList([DenseGNNLayer(E) for _ in range(c.encoder_layers)])
        # recurrent transition with all-pairs message passing
        self.rec_in = nn.Linear(H + Z + 1, H)
        self.attention = nn.ModuleList(
            [AllPairsAttention(H, c.attn_heads, c.attn_chunk) for _ in range(c.mp_layers)]
        )
        self.attention_norm = nn.ModuleList([nn.LayerNorm(H) for _ in range(c.mp_layers)])
        self.gru = nn.GRUCell(H, H)
        self.prior_net = _mlp(H, H, Z)
        self.posterior_net = _mlp(H + E, H, Z)
        # decoder
        self.f_dec = nn.Sequential(_mlp(H + Z, H, H), nn.SiLU())
        self.W_adj = nn.Linear(H, H, bias=False)
        if c.adj_bias:
            self.adj_bias = nn.Parameter(torch.zeros(()))
        self.node_heads = FeatureHeads(H, s.num_node_continuous, s.node_cardinalities)
        self.action_mask_head = nn.Linear(H, 1)
        self.graph_mlp = nn.Sequential(nn.Linear(H, H), nn.SiLU())
        self.graph_heads = FeatureHeads(H, s.num_graph_continuous, s.graph_cardinalities)
        self.reward_head = nn.Linear(H, 1)
        self.continuation_head = nn.Linear(H, 1)

    # ------------------------------------------------------------------ components
    def encode(self, obs: Mapping[str, torch.Tensor], node_mask: torch.Tensor) -> torch.Tensor:
        """Observation tensors (B graphs) -> node embeddings e_v(o) (B,N,E)."""
        st = state_from_observation(obs, node_mask, self.schema, self.scaler)
        n = node_mask.shape[-1]
        m = node_mask.to(st.node_continuous.dtype)

        def bcast(t: torch.Tensor) -> torch.Tensor:  # graph features -> every node
            return t[..., None, :].expand(*t.shape[:-1], n, t.shape[-1])

        e = (
            self.obs_embed(
                torch.cat([st.node_continuous, bcast(st.graph_continuous)], dim=-1),
                st.node_categorical + [bcast(g) for g in st.graph_categorical],
                st.action_mask[..., None],
            )
            * m[..., None]
        )
        for layer in self.encoder_gnn:
            e = layer(e, st.adjacency) * m[..., None]
        return e

    def transition(
        self, h: torch.Tensor, z: torch.Tensor, action: torch.Tensor, node_mask: torch.Tensor
    ) -> torch.Tensor:
        """h_t = GRU(AllPairsMP(SiLU(W_in [h_{t-1}, z_{t-1}, a_t])) | h_{t-1}) per node."""
        m = node_mask.to(h.dtype)[..., None]
        x = F.silu(self.rec_in(torch.cat([h, z, action[..., None].to(h.dtype)], dim=-1)))
        for attn, norm in zip(self.attention, self.attention_norm, strict=True):
            x = norm(x + attn(x, node_mask))
        lead = h.shape[:-1]
        h_new = self.gru(x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1])).reshape(*lead, -1)
        return h_new * m

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        c = self.config
        return unimix_probs(
            logits.reshape(*logits.shape[:-1], c.latent_groups, c.latent_classes), c.unimix
        )

    def prior(self, h: torch.Tensor) -> torch.Tensor:
        """p(z | h) probabilities (..., groups, classes)."""
        return self._probs(self.prior_net(h))

    def posterior(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """q(z | h, e_v(o)) probabilities (..., groups, classes)."""
        return self._probs(self.posterior_net(torch.cat([h, e], dim=-1)))

    @staticmethod
    def sample_z(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Straight-through one-hot sample, flattened to (..., groups * classes)."""
        u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=probs.dtype)
        return sample_onehot_st(probs, u).flatten(-2)

    def decode(self, h: torch.Tensor, z: torch.Tensor, node_mask: torch.Tensor) -> Prediction:
        """Decoder heads from (h, z) of every node (B,N,.) (standardised scalars, logits)."""
        m = node_mask.to(h.dtype)
        emb = self.f_dec(torch.cat([h, z], dim=-1)) * m[..., None]  # emb(v) = f_dec(h(v), z(v))
        w = self.W_adj(emb)
        adj_logit = w @ w.transpose(-1, -2)  # (W emb(u))^T (W emb(v))
        if self.config.adj_bias:
            adj_logit = adj_logit + self.adj_bias
        node_cont, node_cat = self.node_heads(emb)
        g = self.graph_mlp(masked_node_mean(emb, node_mask))
        graph_cont, graph_cat = self.graph_heads(g)
        return Prediction(
            node_continuous=node_cont * m[..., None],
            node_categorical=node_cat,
            action_mask_logit=self.action_mask_head(emb).squeeze(-1),
            adjacency_logit=adj_logit,
            graph_continuous=graph_cont,
            graph_categorical=graph_cat,
            reward=self.reward_head(g).squeeze(-1),
            continuation_logit=self.continuation_head(g).squeeze(-1),
        )

    def _filter(
        self,
        obs: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        node_mask: torch.Tensor,
        generator: torch.Generator,
    ) -> dict[str, torch.Tensor]:
        """Posterior pass over T+1 observations (B,T+1,...) and T actions (B,T,N).

        The first step starts from h = 0, z = 0 and a zero action. Returns stacked (B,T+1,N,.)
        ``h``, ``z`` (straight-through samples), ``prior`` and ``posterior`` probabilities.
        """
        B, T1, N = obs["adjacency"].shape[:3]
        flat = {k: v.reshape(B * T1, *v.shape[2:]) for k, v in obs.items() if k in OBS_KEYS}
        mask_bt = node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
        enc = self.encode(flat, mask_bt).reshape(B, T1, N, -1)
        c = self.config
        dev, dt = enc.device, enc.dtype
        h = torch.zeros(B, N, c.hidden_dim, device=dev, dtype=dt)
        z = torch.zeros(B, N, c.latent_groups * c.latent_classes, device=dev, dtype=dt)
        hs, zs, priors, posts = [], [], [], []
        for t in range(T1):
            a = actions[:, t - 1] if t > 0 else torch.zeros(B, N, device=dev, dtype=dt)
            h = self.transition(h, z, a, node_mask)
            prior = self.prior(h)
            post = self.posterior(h, enc[:, t])
            z = self.sample_z(post, generator) * node_mask[..., None].to(dt)
            hs.append(h)
            zs.append(z)
            priors.append(prior)
            posts.append(post)
        return {
            "h": torch.stack(hs, 1),
            "z": torch.stack(zs, 1),
            "prior": torch.stack(priors, 1),
            "posterior": torch.stack(posts, 1),
        }

    # ------------------------------------------------------------------ training
    def loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """RSSM loss on a padded batch (see the module docstring); ``generator`` drives the
        latent samples (``None`` = a generator seeded with 0)."""
        c = self.config
        gen = self.make_generator(generator if generator is not None else 0)
        B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
        T1 = L + 1
        obs = {k: getattr(batch, k) for k in OBS_KEYS}
        out = self._filter(obs, batch.action_nodes, batch.node_mask, gen)
        dev = batch.adjacency.device
        mask_bt = batch.node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
        pred = self.decode(
            out["h"].reshape(B * T1, N, -1), out["z"].reshape(B * T1, N, -1), mask_bt
        )
        target = {k: v.reshape(B * T1, *v.shape[2:]) for k, v in obs.items()}
        # transition targets sit at the observation they lead to (t >= 1)
        target["reward"] = torch.cat([batch.reward.new_zeros(B, 1), batch.reward], 1).reshape(-1)
        target["continuation"] = torch.cat(
            [batch.continuation.new_ones(B, 1), batch.continuation], 1
        ).reshape(-1)
        parts = prediction_losses(pred, target, mask_bt, self.schema, self.scaler)
        true_col = torch.ones(B, 1, dtype=torch.bool, device=dev)
        obs_valid = torch.cat([true_col, batch.step_mask], 1).reshape(-1)
        trans_valid = torch.cat([~true_col, batch.step_mask], 1).reshape(-1)

        def vmean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
            v = valid.to(x.dtype)
            return (x * v).sum() / v.sum().clamp_min(1.0)

        means = {
            k: vmean(parts[k], obs_valid) for k in ("node", "graph", "adjacency", "action_mask")
        }
        means.update({k: vmean(parts[k], trans_valid) for k in ("reward", "continuation")})
        l_pred = (
            means["node"]
            + means["graph"]
            + c.beta_adj * means["adjacency"]
            + means["action_mask"]
            + means["reward"]
            + means["continuation"]
        )
        # KL per graph and step: node-mean of the summed-over-groups KL, then free bits
        q, p = out["posterior"], out["prior"]
        m = batch.node_mask[:, None].to(q.dtype)

        def node_mean(kl: torch.Tensor) -> torch.Tensor:  # (B,T1,N) -> (B*T1,)
            return ((kl * m).sum(-1) / m.sum(-1).clamp_min(1.0)).reshape(-1)

        kl_dyn = node_mean(categorical_kl(q.detach(), p))
        kl_rep = node_mean(categorical_kl(q, p.detach()))
        dyn = vmean(free_bits(kl_dyn, c.free_bits), obs_valid)
        rep = vmean(free_bits(kl_rep, c.free_bits), obs_valid)
        total = c.beta_pred * l_pred + c.beta_dyn * dyn + c.beta_rep * rep
        terms = {k: v.item() for k, v in means.items()}
        terms.update(
            pred=l_pred.item(),
            kl=vmean(kl_dyn, obs_valid).item(),
            kl_dyn=dyn.item(),
            kl_rep=rep.item(),
        )
        return total, {k: terms[k] for k in GRSSM_TERM_KEYS}

    # ------------------------------------------------------------------ inference API
    @torch.no_grad()
    def observe(
        self,
        obs_sequence: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        actions: Any,
        generator: torch.Generator | int | None = None,
    ) -> GRSSMLatent:
        """Posterior filtering over the trajectory; returns the latent of the last step."""
        obs, acts = self.prepare_sequence(obs_sequence, actions)
        gen = self.make_generator(generator)
        n = obs["adjacency"].shape[-1]
        mask = torch.ones(1, n, dtype=torch.bool, device=self.device)
        out = self._filter({k: v[None] for k, v in obs.items()}, acts[None], mask, gen)
        return GRSSMLatent(h=out["h"][0, -1], posterior=out["posterior"][0, -1])

    def _observe_at(
        self,
        obs: dict[str, torch.Tensor],
        actions: torch.Tensor,
        steps: list[int],
        generator: torch.Generator,
    ) -> list[GRSSMLatent]:
        """Posterior latents at several steps from one filtering pass."""
        last = max(steps)
        mask = torch.ones(1, obs["adjacency"].shape[-1], dtype=torch.bool, device=self.device)
        prefix = {k: v[None, : last + 1] for k, v in obs.items()}
        out = self._filter(prefix, actions[None, :last], mask, generator)
        return [GRSSMLatent(h=out["h"][0, t], posterior=out["posterior"][0, t]) for t in steps]

    @torch.no_grad()
    def imagine_multi(
        self,
        latent: GRSSMLatent,
        action_sequence: Any,
        num_samples: int,
        generator: torch.Generator | int | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """Sample ``num_samples`` prior rollouts over the K actions from ``latent``."""
        if not isinstance(latent, GRSSMLatent):
            raise TypeError(f"expected a GRSSMLatent from observe(), got {type(latent).__name__}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer):
            raise TypeError(f"num_samples must be an int, got {type(num_samples).__name__}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        S, n = int(num_samples), latent.num_nodes
        actions = self.prepare_actions(action_sequence, n, S)
        gen = self.make_generator(generator)
        mask = torch.ones(S, n, dtype=torch.bool, device=self.device)
        h = latent.h.to(self.device).expand(S, *latent.h.shape).contiguous()
        post = latent.posterior.to(self.device).expand(S, *latent.posterior.shape)
        z = self.sample_z(post, gen)  # one posterior draw per sample
        out = []
        for k in range(actions.shape[0]):
            h = self.transition(h, z, actions[k], mask)
            z = self.sample_z(self.prior(h), gen)
            pred = self.decode(h, z, mask)
            out.append(
                predictions_to_numpy(sampled_state(pred, mask, self.schema, self.scaler, gen).obs)
            )
        return out


def build_grssm(
    schema: Mapping[str, Any] | Schema,
    scaler: FeatureScaler | None = None,
    *,
    variant: str | None = None,
    **overrides: Any,
) -> GRSSM:
    """Factory for ``"g-rssm"``."""
    if variant:
        raise ValueError(f"g-rssm has no variants (got {variant!r})")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GRSSMConfig)}
    if unknown:
        raise TypeError(f"unknown g-rssm config fields {sorted(unknown)}")
    return GRSSM(schema, scaler, GRSSMConfig(**overrides))
