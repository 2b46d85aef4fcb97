"""G-RSSM (Karacelebi et al. 2026), adapted to multimodal, variable-size graph environments
(paper, "Related Work" and appendix "Baseline Implementations").

Per-node RSSM latents: deterministic h(v) (GRU), categorical z(v) (``groups x classes`` one-hot,
straight-through, 1% unimix) for every node v. One recurrent step (paper, "Background")::

    x(v)      = SiLU(W_in [h_{t-1}(v), z_{t-1}(v), a_t(v)])      a_t(v): node-set action indicator
    x         <- LayerNorm(x + AllPairsAttention(x))            (L rounds, all node pairs)
    h_t(v)    = GRU(x(v) | h_{t-1}(v))
    prior     p(z_t(v) | h_t(v));   posterior  q(z_t(v) | h_t(v), e_v(o_t))

The latent update exchanges messages between *all* pairs of nodes (multi-head dot-product
attention over the real nodes, O(N^2); one fused attention call, split into blocks of query
nodes only when the score matrix would exceed a per-device memory budget); the observed
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

Speed (same math as the step-by-step form kept in :mod:`gdm_models.reference`): the training
loss draws the posterior noise of all steps at once (on the CPU the same numbers as one draw
per step), applies the time-independent parts of the input and posterior layers (action
column, the observation embedding's columns, biases) to all steps in one product, runs only
the cell ``h -> x -> attention -> GRU -> posterior sample`` inside the recurrence and the
prior net on all steps afterwards, and syncs with the host once per call for the logged terms
(:meth:`GRSSM.enable_compile` compiles the whole tensor-only loss)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data import Batch, TensorObs
from ..inputs import check_latent_widths
from ..layers import (
    sample_onehot_st,
    unimix_probs,
)
from ..losses import (
    Prediction,
)
from ..member_layers import MemberModel, MemberNoise, pad_node_axis
from ..member_ops import (
    member_addmm,
    member_apply,
)
from ..scaling import FeatureScaler
from ..schema import Schema
from ..world_model import StepResult, StepState, WorldModel
from .common import (
    FeatureHeads,
    FeatureSetEncoder,
    masked_node_mean,
    sampled_state,
    state_from_observation,
)
from .grssm_filter import posterior_pass
from .grssm_loss import GRSSM_TERM_KEYS, LOGGED, grssm_loss_tensors, window_targets
from .grssm_parts import (
    ATTENTION_BUDGET_BYTES,
    AllPairsAttention,
    DenseGNNLayer,
    GRSSMConfig,
    GRSSMLatent,
    _mlp,
    attention_key_bias,
)

__all__ = [
    "GRSSMConfig",
    "GRSSM",
    "GRSSMLatent",
    "AllPairsAttention",
    "GRSSM_TERM_KEYS",
    "ATTENTION_BUDGET_BYTES",
    "window_targets",
    "attention_key_bias",
    "DenseGNNLayer",
]


class GRSSM(WorldModel, MemberModel):
    """G-RSSM (see the module docstring). A :class:`~gdm_models.member_layers.MemberModel`:
    its ensembles train as one member model.

    Args:
        schema: feature schema.
        scaler: fitted feature scaler (``None`` = identity).
        config: :class:`GRSSMConfig`.
    """

    config: GRSSMConfig

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
        w_hz, a_term = self._input_parts(action)
        m = node_mask.to(h.dtype)[..., None]
        return self._cell(h, z, w_hz, a_term, attention_key_bias(node_mask, h.dtype), m)

    def _input_parts(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Split W_in [h, z, a] + b into ``(W_hz, a w_a + b)``: the action column and the bias
        do not depend on the recurrence, so they are applied to all steps at once."""
        w = self.rec_in.weight  # ([K,] H, in): member-stacked in a member model
        a_term = member_apply(
            lambda a, w_a, b: a * w_a + b,
            action[..., None].to(w.dtype),
            w[..., -1],
            self.rec_in.bias,
            ndim=1,
        )
        return w[..., :-1], a_term

    def _cell(
        self,
        h: torch.Tensor,
        z: torch.Tensor,
        w_hz: torch.Tensor,
        a_term: torch.Tensor,
        key_bias: torch.Tensor,
        m: torch.Tensor,
    ) -> torch.Tensor:
        """The recurrent update of :meth:`transition` given its precomputed parts."""
        lead = h.shape[:-1]
        hz = torch.cat([h, z], dim=-1).reshape(-1, w_hz.shape[-1])
        rows = a_term.reshape(-1, w_hz.shape[-2])
        x = F.silu(member_addmm(rows, hz, w_hz.transpose(-1, -2))).reshape(*lead, -1)
        for attn, norm in zip(self.attention, self.attention_norm, strict=True):
            assert isinstance(attn, AllPairsAttention)
            x = norm(x + attn.attend(x, key_bias))
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
            adj_logit = member_apply(torch.add, adj_logit, self.adj_bias, ndim=0)
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

    # ------------------------------------------------------------------ training
    def loss_scales(self) -> dict[str, float]:
        """Weight of every loss term in the total: beta_pred L_pred (with beta_adj on the
        adjacency BCE) + beta_dyn [KL_dyn]_FB + beta_rep [KL_rep]_FB (module docstring)."""
        c = self.config
        return {
            "node": c.beta_pred,
            "graph": c.beta_pred,
            "adjacency": c.beta_pred * c.beta_adj,
            "action_mask": c.beta_pred,
            "reward": c.beta_pred,
            "continuation": c.beta_pred,
            "kl_dyn": c.beta_dyn,
            "kl_rep": c.beta_rep,
        }

    def training_loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """RSSM loss on a padded batch (see the module docstring); ``generator`` drives the
        latent samples (``None`` = a generator seeded with 0). Terms as detached 0-d tensors
        (no host sync); compiled after :meth:`enable_compile`."""
        c = self.config
        gen = self.make_generator(generator if generator is not None else 0)
        B, T1, N = batch.batch_size, batch.seq_len + 1, batch.num_nodes
        shape = (T1, B, N, c.latent_groups, c.latent_classes)
        dev, dt = batch.adjacency.device, batch.node_continuous.dtype
        u = torch.rand(shape, generator=gen, device=dev, dtype=dt)  # the noise of all steps
        loss_fn = self._loss_tensors
        if self.compiled:
            batch = batch.pad_nodes_to_multiple(self.compile_pad_multiple)
            u = F.pad(u, (0, 0, 0, 0, 0, batch.num_nodes - N), value=0.5)  # padded nodes' noise
            loss_fn = self._compiled
        total, values = loss_fn(batch, u)
        terms = dict(zip(LOGGED, values.detach().unbind(), strict=True))
        return total, {k: terms[k] for k in GRSSM_TERM_KEYS}

    def _compile_target(self) -> Callable[..., Any]:
        return self._loss_tensors

    # ------------------------------------------------------------------ member model
    def member_noise(self, shape: tuple[int, int, int], generator: torch.Generator) -> MemberNoise:
        """The posterior uniforms of all steps as :meth:`training_loss` draws them for a
        (B, L, N) batch, (L+1, B, N, groups, classes), returned batch first (B, L+1, ...)."""
        c = self.config
        b, seq_len, n = shape
        size = (seq_len + 1, b, n, c.latent_groups, c.latent_classes)
        u = torch.rand(size, generator=generator, device=generator.device, dtype=torch.float32)
        return (u.transpose(0, 1),)

    def pad_member_noise(self, noise: MemberNoise, num_nodes: int) -> MemberNoise:
        """The node axis padded (:func:`~gdm_models.member_layers.pad_node_axis`; padded
        nodes are masked out of every term)."""
        u = noise[0]
        assert u is not None
        return (pad_node_axis(u, -3, num_nodes),)

    def member_loss(
        self, batch: Batch, noise: MemberNoise, members: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`_loss_tensors` of a member model on its folded batch, per member."""
        u = noise[0]
        assert u is not None
        total, values = self._loss_tensors(batch, u.transpose(0, 1), members)
        terms = dict(zip(LOGGED, values.detach().unbind(), strict=True))
        return total, {k: terms[k] for k in GRSSM_TERM_KEYS}

    def _loss_tensors(
        self, batch: Batch, uniforms: torch.Tensor, members: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss as a function of tensors only (:func:`~.grssm_loss.grssm_loss_tensors`)."""
        return grssm_loss_tensors(self, batch, uniforms, members)

    # ------------------------------------------------------------------ inference API
    @torch.no_grad()
    def _observe_at(
        self, obs: TensorObs, actions: torch.Tensor, steps: list[int], generator: torch.Generator
    ) -> list[GRSSMLatent]:
        """Posterior latents at several steps from one filtering pass."""
        last = max(steps)
        mask = torch.ones(1, obs["adjacency"].shape[-1], dtype=torch.bool, device=self.device)
        prefix = {k: v[None, : last + 1] for k, v in obs.items()}
        out = posterior_pass(self, prefix, actions[None, :last], mask, generator)
        return [GRSSMLatent(h=out["h"][0, t], posterior=out["posterior"][0, t]) for t in steps]

    def _latent_num_nodes(self, latent: Any) -> int:
        if not isinstance(latent, GRSSMLatent):
            raise TypeError(f"expected a GRSSMLatent from observe(), got {type(latent).__name__}")
        c, want = self.config, ("hidden", "groups", "classes")  # another G-RSSM's sizes: named
        got = (latent.h.shape[-1], *latent.posterior.shape[-2:])
        mine = (c.hidden_dim, c.latent_groups, c.latent_classes)
        check_latent_widths(dict(zip(want, got, strict=True)), dict(zip(want, mine, strict=True)))
        return latent.num_nodes

    def start(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> StepState:
        """Posterior filtering of B start observations, then one z drawn from the posterior
        (what ``observe`` followed by :meth:`state_from_latent` draws)."""
        self.check_start_observations(obs)
        b, n = obs["adjacency"].shape[:2]
        mask = torch.ones(b, n, dtype=torch.bool, device=self.device)
        out = posterior_pass(
            self,
            {k: v[:, None] for k, v in obs.items()},
            torch.zeros(b, 0, n, device=self.device),
            mask,
            generator,
        )
        h, post = out["h"][:, -1], out["posterior"][:, -1]
        return {"h": h, "z": self.sample_z(post, generator)}

    def state_from_latent(
        self, latent: Any, num_samples: int, generator: torch.Generator
    ) -> StepState:
        """``num_samples`` rollouts from one posterior ``latent``: h repeated, one z drawn
        from the posterior per rollout."""
        self._latent_num_nodes(latent)
        S = num_samples
        h = latent.h.to(self.device).expand(S, *latent.h.shape).contiguous()
        post = latent.posterior.to(self.device).expand(S, *latent.posterior.shape)
        return {"h": h, "z": self.sample_z(post, generator)}

    def _step(
        self, state: StepState, actions: torch.Tensor, generator: torch.Generator
    ) -> StepResult:
        """Prior step: h_t from (h, z, a), z_t drawn from p(z | h_t), the decoded observation
        sampled (:func:`~gdm_models.baselines.common.sampled_state`)."""
        b, n = actions.shape
        mask = torch.ones(b, n, dtype=torch.bool, device=self.device)
        h = self.transition(state["h"], state["z"], actions, mask)
        z = self.sample_z(self.prior(h), generator)
        pred = self.decode(h, z, mask)
        return sampled_state(pred, mask, self.schema, self.scaler, generator).obs, {"h": h, "z": z}


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
