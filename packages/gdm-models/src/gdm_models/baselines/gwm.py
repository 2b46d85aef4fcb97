"""Vanilla GWM and EA-GWM: deterministic graph world models in state space.

Architecture (paper, "Related Work" and appendix "Baseline Implementations", after Song et al.
2026): feature-specific encoders map the current observation to node embeddings (graph features
enter every node through a linear map of the graph embedding), then L GNN layers on the
normalised adjacency with the action term of the GWM formula
``sigma(A~ X W_1 + U a 1^T) W_2``, applied as residual layers (as in the public code)::

    h^(l) = h^(l-1) + ReLU(A~ h^(l-1) W_1^(l) + u^(l) a(v) + b^(l)),   A~ = D^-1/2 A D^-1/2

with the per-node action indicator a(v) (node-set actions), exactly the paper's normalised
adjacency by default (``self_loops=True`` gives the GCN renormalisation D~^-1/2 (A + I) D~^-1/2
of Song and Cai's public code). Feature-specific linear heads (W_2) predict

* continuous node / graph features as *residual changes* of their current standardised values,
* categorical node / graph features and the action mask as logits,
* the next adjacency as ``sigmoid(h_i^T Q h_j)`` with Q symmetrised, ``Q_s = (Q + Q^T) / 2``
  (undirected graphs: symmetric edge probabilities; one Bernoulli draw per unordered pair at
  imagination time). Q_s is the matrix of the paper's formula, so *it* is regularised towards
  Frobenius norm 1 by ``beta_q (||Q_s||_F - 1)^2`` (regularising the raw Q would let its
  antisymmetric part, which never enters the logit, carry the norm),
* reward and continuation from a graph state ``g = MLP([e_g, Pool_v h(v), Pool_v a(v)])``.

Vanilla GWM trains on the one-step losses (next state, adjacency, reward, continuation and
action mask). EA-GWM adds the rollout-consistency, spectral and critical-node losses of
:mod:`gdm_models.baselines.ea_losses`; the two share this class and ``GWMConfig`` and differ
only in the loss weights, so EA-GWM with all three weights at 0 *is* Vanilla GWM (same
parameters, same loss).

``observe`` returns the last observation (a state-space model needs nothing else);
``imagine_multi`` feeds sampled observations back (categorical factors, action mask,
continuation and every unordered edge sampled from their predicted distributions; continuous
features and reward are the predicted means).

Speed (same math as the form kept in :mod:`gdm_models.reference`): the loss builds its masks once,
gathers the targets of all rollout steps in one pass, reuses the one-step loss as rollout step
1, applies the action terms of all layers at once, runs the power iterations of all layers
together and syncs with the host once; :meth:`GWM.enable_compile` compiles the whole tensor-only
loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from ..data import (
    OBS_KEYS,
    Batch,
    DataError,
    TensorObs,
    observation_to_tensors,
    validate_observation,
)
from ..losses import (
    PREDICTION_LOSS_KEYS,
    NodeMasks,
    Prediction,
    masked_mean,
    prediction_loss,
)
from ..member_layers import MemberModel, MemberNoise
from ..member_ops import member_apply, member_matmul, member_reduce
from ..scaling import FeatureScaler
from ..schema import Schema
from ..world_model import NP_DTYPES, StepResult, StepState, WorldModel
from .common import (
    FeatureHeads,
    FeatureSetEncoder,
    GraphState,
    masked_node_mean,
    sampled_state,
    soft_state,
    state_from_observation,
)
from .ea_losses import (
    critical_node_loss,
    critical_node_weights,
    normalized_adjacency,
    rollout_consistency_loss,
    spectral_loss,
)
from .gwm_config import EA_DEFAULTS, GWMConfig

__all__ = ["GWMConfig", "GWM", "EA_DEFAULTS", "GWM_TERM_KEYS", "spectral_term"]

#: the one-step prediction terms of L_pred
_ONE_STEP_KEYS: tuple[str, ...] = PREDICTION_LOSS_KEYS

#: logged loss terms (fixed key set for both GWM variants)
GWM_TERM_KEYS: tuple[str, ...] = (
    "pred",
    *PREDICTION_LOSS_KEYS,
    "q_norm",
    "rollout",
    "spectral",
    "critical",
)


def _window_items(
    batch: Batch, k: int
) -> tuple[
    torch.Tensor, dict[str, torch.Tensor], list[dict[str, torch.Tensor]], torch.Tensor, torch.Tensor
]:
    """Every (window, step t) item of ``batch`` flattened to M = B * L rows, gathered in one
    pass: the items' node masks (M, N), the observations at t and the targets of rollout steps
    j = 1..``k`` (``seen``: (k+1, M, ...): obs[t], obs[t+j]), the targets (obs[t+j],
    reward/continuation at t+j-1), the actions at t+j-1 (k, M, N) and which steps are valid
    (k, M; steps past the window are clamped and masked out)."""
    B, L = batch.batch_size, batch.seq_len
    dev = batch.adjacency.device
    b_idx = torch.arange(B, device=dev).repeat_interleave(L)
    t_idx = torch.arange(L, device=dev).repeat(B)
    j = torch.arange(1, k + 1, device=dev)[:, None]
    t_act = t_idx + j - 1  # (k, M)
    t_act_c = t_act.clamp_max(L - 1)
    ok = (t_act < L) & batch.step_mask[b_idx, t_act_c]  # (k, M)
    t_obs = torch.cat([t_idx[None], (t_act + 1).clamp_max(L)])  # (k+1, M)
    seen = {key: getattr(batch, key)[b_idx, t_obs] for key in OBS_KEYS}
    targets = [
        {
            **{key: v[i + 1] for key, v in seen.items()},
            "reward": batch.reward[b_idx, t_act_c[i]],
            "continuation": batch.continuation[b_idx, t_act_c[i]],
        }
        for i in range(k)
    ]
    actions = batch.action_nodes[b_idx[None], t_act_c]  # (k, M, N)
    return batch.node_mask[b_idx], seen, targets, actions, ok


class GWM(WorldModel, MemberModel):
    """Vanilla GWM / EA-GWM (see the module docstring). A deterministic
    :class:`~gdm_models.member_layers.MemberModel` (no member noise): its ensembles train as
    one member model.

    Args:
        schema: feature schema.
        scaler: fitted feature scaler (``None`` = identity).
        config: :class:`GWMConfig`.
    """

    config: GWMConfig

    def __init__(
        self,
        schema: Mapping[str, Any] | Schema,
        scaler: FeatureScaler | None,
        config: GWMConfig,
    ) -> None:
        super().__init__(schema, scaler, config)
        s, d, L = self.schema, config.hidden_dim, config.mp_layers
        self.node_encoder = FeatureSetEncoder(s.num_node_continuous, s.node_cardinalities, 1, d)
        self.graph_encoder = FeatureSetEncoder(s.num_graph_continuous, s.graph_cardinalities, 0, d)
        self.graph_to_node = nn.Linear(d, d)
        # GNN layers: W_1^(l) (spectrally regularised in EA-GWM), action vector u^(l), bias b^(l)
        self.mp_weights = nn.ModuleList([nn.Linear(d, d, bias=False) for _ in range(L)])
        self.action_weight = nn.Parameter(torch.randn(L, d) * 0.5)
        self.mp_bias = nn.Parameter(torch.zeros(L, d))
        self.graph_update = nn.Sequential(nn.Linear(2 * d + 1, d), nn.SiLU(), nn.Linear(d, d))
        self.node_heads = FeatureHeads(d, s.num_node_continuous, s.node_cardinalities)
        self.action_mask_head = nn.Linear(d, 1)
        self.graph_heads = FeatureHeads(d, s.num_graph_continuous, s.graph_cardinalities)
        self.reward_head = nn.Linear(d, 1)
        self.continuation_head = nn.Linear(d, 1)
        q = torch.randn(d, d)
        q = 0.5 * (q + q.T)
        self.Q = nn.Parameter(q / q.norm())  # starts symmetric with ||Q||_F = ||Q_s||_F = 1
        # warm-start vectors of the spectral power iteration (deterministic init, no RNG use,
        # persistent so that a resumed EA-GWM run continues exactly)
        for i in range(L):
            self.register_buffer(f"spectral_u_{i}", torch.full((d,), d**-0.5))

    # ------------------------------------------------------------------ dynamics
    def symmetric_q(self) -> torch.Tensor:
        """Q_s = (Q + Q^T) / 2, so that h_i^T Q_s h_j is symmetric in (i, j)."""
        return 0.5 * (self.Q + self.Q.transpose(-1, -2))  # ([K,] d, d): member-stacked too

    def predict(
        self,
        state: GraphState,
        action: torch.Tensor,
        q_s: torch.Tensor | None = None,
        masks: NodeMasks | None = None,
    ) -> tuple[Prediction, torch.Tensor]:
        """One transition: ``state`` (B graphs) and action indicators (B,N) -> (prediction,
        final node embeddings h (B,N,d)). ``q_s`` (:meth:`symmetric_q`) and ``masks`` (of
        ``state.node_mask``) may be passed in when the caller already has them."""
        mask = state.node_mask
        dt = state.node_continuous.dtype
        masks = NodeMasks.of(mask, dt) if masks is None else masks
        m = masks.node[..., None]
        e_g = self.graph_encoder(state.graph_continuous, state.graph_categorical)
        e_n = self.node_encoder(
            state.node_continuous, state.node_categorical, state.action_mask[..., None]
        )
        h = (e_n + self.graph_to_node(e_g)[..., None, :]) * m
        a = action.to(dt) * masks.node
        a_tilde = normalized_adjacency(state.adjacency, mask, self.config.self_loops)
        # the action term u^(l) a(v) + b^(l) of every layer at once (it does not depend on h)
        act_terms = member_apply(
            lambda x, w, b: x * w + b, a[..., None, None], self.action_weight, self.mp_bias, ndim=2
        ).unbind(-2)
        for w1, act in zip(self.mp_weights, act_terms, strict=True):
            # sigma(A~ h W_1 + U a 1^T), residual (paper "Related Work"; Song et al.)
            h = (h + torch.relu(a_tilde @ w1(h) + act)) * m
        pooled_a = (a.sum(-1) / masks.count)[..., None]
        q_s = self.symmetric_q() if q_s is None else q_s
        return self.readout(state, h, e_g, pooled_a, q_s, m), h

    def readout(
        self,
        state: GraphState,
        h: torch.Tensor,
        e_g: torch.Tensor,
        pooled_a: torch.Tensor,
        q_s: torch.Tensor,
        node_weight: torch.Tensor,
    ) -> Prediction:
        """Heads on the final node embeddings ``h``: the graph update g from [e_g, Pool h,
        pooled action], residual continuous features, logits, and h_i^T Q_s h_j.
        ``node_weight``: (B,N,1) 1.0 on real nodes (the caller's float mask)."""
        mask = state.node_mask
        g = self.graph_update(torch.cat([e_g, masked_node_mean(h, mask), pooled_a], dim=-1))
        node_delta, node_cat = self.node_heads(h)
        graph_delta, graph_cat = self.graph_heads(g)
        adj_logit = member_matmul(h, q_s) @ h.transpose(-1, -2)  # h_i^T Q_s h_j
        return Prediction(
            # continuous features: residual change of the current value (standardised units)
            node_continuous=(state.node_continuous + node_delta) * node_weight,
            node_categorical=node_cat,
            action_mask_logit=self.action_mask_head(h).squeeze(-1),
            adjacency_logit=adj_logit,
            graph_continuous=state.graph_continuous + graph_delta,
            graph_categorical=graph_cat,
            reward=self.reward_head(g).squeeze(-1),
            continuation_logit=self.continuation_head(g).squeeze(-1),
        )

    # ------------------------------------------------------------------ training
    def loss_scales(self) -> dict[str, float]:
        """Weight of every loss term in the total: the one-step L_pred (beta_adj on the
        adjacency BCE), beta_q (||Q_s||_F - 1)^2 and EA-GWM's three extra losses."""
        c = self.config
        return {
            "node": 1.0,
            "graph": 1.0,
            "adjacency": c.beta_adj,
            "action_mask": 1.0,
            "reward": 1.0,
            "continuation": 1.0,
            "q_norm": c.beta_q,
            "rollout": c.rollout_weight,
            "spectral": c.spectral_weight,
            "critical": c.critical_weight,
        }

    def _combine(self, parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-item L_pred: node + graph + beta_adj adjacency + action mask + reward + cont."""
        return (
            parts["node"]
            + parts["graph"]
            + self.config.beta_adj * parts["adjacency"]
            + parts["action_mask"]
            + parts["reward"]
            + parts["continuation"]
        )

    def training_loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One-step prediction losses (+ EA-GWM's extra losses where their weight is > 0).

        Every transition t of every window is an item: input obs[t] (teacher-forced), target
        obs[t+1], reward[t], continuation[t]; padded steps and nodes are masked out. The model is
        deterministic; ``generator`` is unused. ``total = sum_k scale[k] term[k]`` over the
        terms of :meth:`loss_scales` with a non-zero scale. Terms as detached 0-d tensors (no
        host sync); compiled after :meth:`enable_compile`.
        """
        loss_fn = self._loss_tensors
        if self.compiled:
            batch = batch.pad_nodes_to_multiple(self.compile_pad_multiple)
            loss_fn = self._compiled
        total, values = loss_fn(batch)
        terms = dict(zip([*self.loss_scales(), "pred"], values.detach().unbind(), strict=True))
        return total, {k: terms[k] for k in GWM_TERM_KEYS}

    def _compile_target(self) -> Callable[..., Any]:
        return self._loss_tensors

    def member_loss(
        self, batch: Batch, noise: MemberNoise, members: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The losses of the ``members`` members of a member model
        (:func:`~gdm_models.member_layers.stack_members`) on their folded batch: totals (K,)
        and the logged terms, each (K,). Deterministic: ``noise`` is empty."""
        total, values = self._loss_tensors(batch, members)
        terms = dict(zip([*self.loss_scales(), "pred"], values.detach().unbind(), strict=True))
        return total, {k: terms[k] for k in GWM_TERM_KEYS}

    def _loss_tensors(self, batch: Batch, members: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss as a function of tensors only: ``(total, values)``, the values of the terms
        in the order of :meth:`loss_scales`, then ``pred`` (no host sync). ``members`` > 0: a
        member model's K members folded into the batch; every mean is then per member and
        ``total`` and each value are (K,)."""
        cfg = self.config
        K = cfg.rollout_steps if cfg.rollout_weight > 0 else 1
        node_mask, seen, targets, actions, ok = _window_items(batch, K)
        masks = NodeMasks.of(node_mask, batch.node_continuous.dtype)
        valid = ok[0]
        state = state_from_observation(
            {k: v[0] for k, v in seen.items()}, node_mask, self.schema, self.scaler
        )
        q_s = self.symmetric_q()
        pred, _ = self.predict(state, actions[0], q_s, masks)
        parts = prediction_loss(pred, targets[0], masks, self.scaler)
        terms = dict(
            zip(
                _ONE_STEP_KEYS,
                masked_mean(
                    member_reduce(torch.stack([parts[k] for k in _ONE_STEP_KEYS]), members),
                    member_reduce(valid, members),
                    -1,
                ),
                strict=True,
            )
        )
        # the logit's matrix Q_s regularised towards norm 1 (paper, appendix "Adjacency Sampling")
        if members:  # per member: the Frobenius norm of each Q_s[k]
            terms["q_norm"] = (torch.linalg.vector_norm(q_s.flatten(1), dim=1) - 1.0) ** 2
        else:
            terms["q_norm"] = (q_s.norm() - 1.0) ** 2
        zero = terms["q_norm"].new_zeros(terms["q_norm"].shape)
        terms.update(rollout=zero, spectral=zero, critical=zero)

        if cfg.rollout_weight > 0:
            # k-step teacher-free rollouts from every observed step t: the j-th prediction uses
            # action t+j-1 and is compared with obs[t+j] (valid while inside the window)
            per_item = self._combine(parts)

            def step_fn(st: GraphState, j: int) -> Prediction:
                return pred if j == 1 else self.predict(st, actions[j - 1], q_s, masks)[0]

            def loss_fn(p: Prediction, j: int) -> tuple[torch.Tensor, torch.Tensor]:
                if j == 1:  # the one-step loss, already computed
                    return per_item, valid
                lp = prediction_loss(p, targets[j - 1], masks, self.scaler)
                return self._combine(lp), ok[j - 1]

            terms["rollout"] = rollout_consistency_loss(
                state,
                cfg.rollout_steps,
                step_fn,
                lambda st, p: soft_state(p, node_mask, masks),
                loss_fn,
                members,
            )
        if cfg.spectral_weight > 0:
            terms["spectral"] = spectral_term(self)
        if cfg.critical_weight > 0:
            c = critical_node_weights(
                state.adjacency, node_mask, cfg.critical_weighting, cfg.self_loops
            )
            crit = critical_node_loss(parts["node_per_node"], c, node_mask)
            terms["critical"] = masked_mean(
                member_reduce(crit, members), member_reduce(valid, members), -1
            )
        scale = self.loss_scales()
        assert scale.keys() == terms.keys(), (sorted(scale), sorted(terms))
        total = sum(scale[k] * terms[k] for k in scale if scale[k])
        pred = sum(scale[k] * terms[k] for k in _ONE_STEP_KEYS)
        return total, torch.stack([*(terms[k] for k in scale), pred])

    # ------------------------------------------------------------------ inference API
    def _observe_at(
        self, obs: TensorObs, actions: torch.Tensor, steps: list[int], generator: torch.Generator
    ) -> list[dict[str, np.ndarray]]:
        """The observations at ``steps`` (a state-space model's state is the observation)."""
        return [
            {
                k: np.ascontiguousarray(obs[k][t].cpu().numpy().astype(NP_DTYPES[k]))
                for k in OBS_KEYS
            }
            for t in steps
        ]

    def _latent_num_nodes(self, latent: Any) -> int:
        if not isinstance(latent, Mapping):
            raise TypeError("a GWM latent is an observation dict (as returned by observe)")
        n = validate_observation(latent, self.schema)
        if n < 1:
            raise DataError("cannot imagine on a graph with no nodes")
        return n

    def start(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> StepState:
        """The observed graphs in model units (a state-space model's state; no randomness)."""
        self.check_start_observations(obs)
        b, n = obs["adjacency"].shape[:2]
        mask = torch.ones(b, n, dtype=torch.bool, device=self.device)
        return state_from_observation(obs, mask, self.schema, self.scaler).to_tensors()

    def state_from_latent(
        self, latent: Any, num_samples: int, generator: torch.Generator
    ) -> StepState:
        """``num_samples`` copies of the observation ``latent`` in model units."""
        obs = {k: v[None] for k, v in observation_to_tensors(latent, self.device).items()}
        state = self.start(obs, generator)
        return GraphState.from_tensors(state, self.schema).expand(num_samples).to_tensors()

    def _step(
        self, state: StepState, actions: torch.Tensor, generator: torch.Generator
    ) -> StepResult:
        """Predict the next graph and sample it (categorical factors, action mask,
        continuation and every unordered edge; continuous features and reward the predicted
        means); the sample is the next state."""
        st = GraphState.from_tensors(state, self.schema)
        pred, _ = self.predict(st, actions)
        sample = sampled_state(pred, st.node_mask, self.schema, self.scaler, generator)
        return sample.obs, sample.state.to_tensors()


def build_gwm(
    schema: Mapping[str, Any] | Schema,
    scaler: FeatureScaler | None = None,
    *,
    variant: str | None = None,
    ea: bool = False,
    **overrides: Any,
) -> GWM:
    """Factory for ``"vanilla-gwm"`` (``ea=False``) and ``"ea-gwm"`` (``ea=True``)."""
    name = "ea-gwm" if ea else "vanilla-gwm"
    if variant:
        raise ValueError(f"{name} has no variants (got {variant!r})")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GWMConfig)}
    if unknown:
        raise TypeError(f"unknown {name} config fields {sorted(unknown)}")
    if ea:
        cfg = GWMConfig(**{**EA_DEFAULTS, **overrides})
    else:
        cfg = GWMConfig(**overrides)
        bad = [
            k for k in ("rollout_weight", "spectral_weight", "critical_weight") if getattr(cfg, k)
        ]
        if bad:
            raise ValueError(f"vanilla-gwm trains without the EA losses; use 'ea-gwm' to set {bad}")
    return GWM(schema, scaler, cfg)


def spectral_term(model: GWM, loss: Callable[..., Any] = spectral_loss) -> torch.Tensor:
    """EA-GWM's spectral term by ``loss`` (:func:`~.ea_losses.spectral_loss`, or the per-layer
    reference); in training the power-iteration vectors advance."""
    cfg = model.config
    us = [getattr(model, f"spectral_u_{i}") for i in range(cfg.mp_layers)]
    term, new_us = loss(
        [cast(nn.Linear, w).weight for w in model.mp_weights],
        us,
        cfg.power_iterations,
        cfg.spectral_target,
    )
    if model.training:
        for u_buf, u in zip(us, new_us, strict=True):
            u_buf.copy_(u)
    return term
