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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..api import NP_DTYPES, WorldModel, predictions_to_numpy
from ..data import OBS_KEYS, Batch, DataError, observation_to_tensors, validate_observation
from ..scaling import FeatureScaler
from ..schema import Schema
from .common import (
    FeatureHeads,
    FeatureSetEncoder,
    GraphState,
    Prediction,
    masked_node_mean,
    prediction_losses,
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

__all__ = ["GWMConfig", "GWM", "EA_DEFAULTS", "GWM_TERM_KEYS"]

#: EA-GWM loss weights and settings from the public code of Song and Cai (the paper is silent).
EA_DEFAULTS: dict[str, Any] = {
    "rollout_weight": 0.5,
    "rollout_steps": 4,
    "spectral_weight": 0.01,
    "critical_weight": 0.1,
}

#: logged loss terms (fixed key set for both GWM variants)
GWM_TERM_KEYS: tuple[str, ...] = (
    "pred",
    "node",
    "graph",
    "adjacency",
    "action_mask",
    "reward",
    "continuation",
    "q_norm",
    "rollout",
    "spectral",
    "critical",
)


@dataclass
class GWMConfig:
    """Hyperparameters of Vanilla GWM / EA-GWM (paper, final hyperparameter table).

    Attributes:
        hidden_dim: dim(h), width of node embeddings and GNN layers.
        mp_layers: L, number of GNN layers.
        beta_adj: weight of the adjacency BCE in the prediction loss.
        beta_q: weight of the norm regulariser (||Q_s||_F - 1)^2, Q_s = (Q + Q^T) / 2.
        self_loops: use D~^-1/2 (A + I) D~^-1/2 (GCN renormalisation) instead of D^-1/2 A D^-1/2.
        rollout_weight: lambda of the k-step rollout-consistency loss (0 = off).
        rollout_steps: k.
        spectral_weight: lambda of the spectral loss (0 = off).
        spectral_target: the spectral norm each GNN weight is pushed towards.
        power_iterations: power-iteration steps per loss evaluation (warm-started).
        critical_weight: lambda of the critical-node loss (0 = off).
        critical_weighting: ``"degree"`` (paper) or ``"normalized"`` (row sums of A~, code).
    """

    hidden_dim: int = 128
    mp_layers: int = 2
    beta_adj: float = 1.0
    beta_q: float = 1.0
    self_loops: bool = False  # paper's A~ = D^-1/2 A D^-1/2; True = the public code's A + I
    rollout_weight: float = 0.0
    rollout_steps: int = 4
    spectral_weight: float = 0.0
    spectral_target: float = 1.0
    power_iterations: int = 4
    critical_weight: float = 0.0
    critical_weighting: str = "degree"

    def __post_init__(self) -> None:
        if self.hidden_dim < 1 or self.mp_layers < 1:
            raise ValueError("hidden_dim and mp_layers must be >= 1")
        if self.rollout_steps < 1 or self.power_iterations < 1:
            raise ValueError("rollout_steps and power_iterations must be >= 1")
        for name in ("beta_adj", "beta_q", "rollout_weight", "spectral_weight", "critical_weight"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.critical_weighting not in ("degree", "normalized"):
            raise ValueError(
                "critical_weighting must be 'degree' or 'normalized', "
                f"got {self.critical_weighting!r}"
            )


class GWM(WorldModel):
    """Vanilla GWM / EA-GWM (see the module docstring).

    Args:
        schema: feature schema.
        scaler: fitted feature scaler (``None`` = identity).
        config: :class:`GWMConfig`.
    """

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
        return 0.5 * (self.Q + self.Q.T)

    def step(self, state: GraphState, action: torch.Tensor) -> tuple[Prediction, torch.Tensor]:
        """One transition: ``state`` (B graphs) and action indicators (B,N) -> (prediction,
        final node embeddings h (B,N,d))."""
        mask = state.node_mask
        m = mask.to(state.node_continuous.dtype)
        e_g = self.graph_encoder(state.graph_continuous, state.graph_categorical)
        e_n = self.node_encoder(
            state.node_continuous, state.node_categorical, state.action_mask[..., None]
        )
        h = (e_n + self.graph_to_node(e_g)[..., None, :]) * m[..., None]
        a = action.to(m.dtype) * m
        a_tilde = normalized_adjacency(state.adjacency, mask, self.config.self_loops)
        for i, w1 in enumerate(self.mp_weights):
            # sigma(A~ h W_1 + U a 1^T), residual (paper "Related Work"; Song et al.)
            msg = a_tilde @ w1(h) + a[..., None] * self.action_weight[i] + self.mp_bias[i]
            h = (h + torch.relu(msg)) * m[..., None]
        pooled_a = (a.sum(-1) / m.sum(-1).clamp_min(1.0))[..., None]
        g = self.graph_update(torch.cat([e_g, masked_node_mean(h, mask), pooled_a], dim=-1))
        node_delta, node_cat = self.node_heads(h)
        graph_delta, graph_cat = self.graph_heads(g)
        hq = h @ self.symmetric_q()
        adj_logit = hq @ h.transpose(-1, -2)  # h_i^T Q_s h_j
        pred = Prediction(
            # continuous features: residual change of the current value (standardised units)
            node_continuous=(state.node_continuous + node_delta) * m[..., None],
            node_categorical=node_cat,
            action_mask_logit=self.action_mask_head(h).squeeze(-1),
            adjacency_logit=adj_logit,
            graph_continuous=state.graph_continuous + graph_delta,
            graph_categorical=graph_cat,
            reward=self.reward_head(g).squeeze(-1),
            continuation_logit=self.continuation_head(g).squeeze(-1),
        )
        return pred, h

    # ------------------------------------------------------------------ training
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

    @staticmethod
    def _vmean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        v = valid.to(x.dtype)
        return (x * v).sum() / v.sum().clamp_min(1.0)

    def _gather(
        self, batch: Batch, b_idx: torch.Tensor, t_obs: torch.Tensor, t_act: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Observations at (b_idx, t_obs) plus reward/continuation at (b_idx, t_act)."""
        obs = {k: getattr(batch, k)[b_idx, t_obs] for k in OBS_KEYS}
        obs["reward"] = batch.reward[b_idx, t_act]
        obs["continuation"] = batch.continuation[b_idx, t_act]
        return obs, batch.action_nodes[b_idx, t_act]

    def loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """One-step prediction losses (+ EA-GWM's extra losses where their weight is > 0).

        Every transition t of every window is an item: input obs[t] (teacher-forced), target
        obs[t+1], reward[t], continuation[t]; padded steps and nodes are masked out. The model is
        deterministic; ``generator`` is unused.
        """
        cfg = self.config
        B, L = batch.batch_size, batch.seq_len
        dev = batch.adjacency.device
        b_idx = torch.arange(B, device=dev).repeat_interleave(L)
        t_idx = torch.arange(L, device=dev).repeat(B)
        node_mask = batch.node_mask[b_idx]
        valid = batch.step_mask[b_idx, t_idx]
        obs_now = {k: getattr(batch, k)[b_idx, t_idx] for k in OBS_KEYS}
        state = state_from_observation(obs_now, node_mask, self.schema, self.scaler)
        target, action = self._gather(batch, b_idx, t_idx + 1, t_idx)
        pred, _ = self.step(state, action)
        parts = prediction_losses(pred, target, node_mask, self.schema, self.scaler)
        per_item = self._combine(parts)
        one_step = self._vmean(per_item, valid)
        # the logit's matrix Q_s regularised towards norm 1 (paper, appendix "Adjacency Sampling")
        q_norm = (self.symmetric_q().norm() - 1.0) ** 2
        total = one_step + cfg.beta_q * q_norm
        terms = {"pred": one_step.item(), "q_norm": q_norm.item()}
        for k in ("node", "graph", "adjacency", "action_mask", "reward", "continuation"):
            terms[k] = self._vmean(parts[k], valid).item()
        zero = per_item.new_zeros(())
        rollout = spectral = critical = zero

        if cfg.rollout_weight > 0:
            # k-step teacher-free rollouts from every observed step t: the j-th prediction uses
            # action t+j-1 and is compared with obs[t+j] (valid while inside the window)
            def step_fn(st: GraphState, j: int) -> Prediction:
                if j == 1:
                    return pred  # identical to the one-step prediction
                t_act = (t_idx + j - 1).clamp_max(L - 1)
                return self.step(st, batch.action_nodes[b_idx, t_act])[0]

            def loss_fn(p: Prediction, j: int) -> tuple[torch.Tensor, torch.Tensor]:
                t_act = t_idx + j - 1
                ok = (t_act < L) & batch.step_mask[b_idx, t_act.clamp_max(L - 1)]
                tgt, _ = self._gather(
                    batch, b_idx, (t_act + 1).clamp_max(L), t_act.clamp_max(L - 1)
                )
                lp = prediction_losses(p, tgt, node_mask, self.schema, self.scaler)
                return self._combine(lp), ok

            rollout = rollout_consistency_loss(
                state, cfg.rollout_steps, step_fn, lambda st, p: soft_state(p, node_mask), loss_fn
            )
            total = total + cfg.rollout_weight * rollout
        if cfg.spectral_weight > 0:
            us = [getattr(self, f"spectral_u_{i}") for i in range(cfg.mp_layers)]
            spectral, new_us = spectral_loss(
                [w.weight for w in self.mp_weights], us, cfg.power_iterations, cfg.spectral_target
            )
            if self.training:
                for i, u in enumerate(new_us):
                    getattr(self, f"spectral_u_{i}").copy_(u)
            total = total + cfg.spectral_weight * spectral
        if cfg.critical_weight > 0:
            c = critical_node_weights(
                state.adjacency, node_mask, cfg.critical_weighting, cfg.self_loops
            )
            crit = critical_node_loss(parts["node_per_node"], c, node_mask)
            critical = self._vmean(crit, valid)
            total = total + cfg.critical_weight * critical
        terms.update(rollout=rollout.item(), spectral=spectral.item(), critical=critical.item())
        return total, {k: terms[k] for k in GWM_TERM_KEYS}

    # ------------------------------------------------------------------ inference API
    def observe(
        self,
        obs_sequence: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        actions: Any,
        generator: torch.Generator | int | None = None,
    ) -> dict[str, np.ndarray]:
        """Validate the trajectory and return its last observation (the GWM's state)."""
        obs, _ = self.prepare_sequence(obs_sequence, actions)
        return {
            k: np.ascontiguousarray(obs[k][-1].cpu().numpy().astype(NP_DTYPES[k])) for k in OBS_KEYS
        }

    def _observe_at(
        self,
        obs: dict[str, torch.Tensor],
        actions: torch.Tensor,
        steps: list[int],
        generator: torch.Generator,
    ) -> list[dict[str, np.ndarray]]:
        """The observations at ``steps`` (a state-space model's state is the observation)."""
        return [
            {
                k: np.ascontiguousarray(obs[k][t].cpu().numpy().astype(NP_DTYPES[k]))
                for k in OBS_KEYS
            }
            for t in steps
        ]

    @torch.no_grad()
    def imagine_multi(
        self,
        latent: Mapping[str, Any],
        action_sequence: Any,
        num_samples: int,
        generator: torch.Generator | int | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """Roll ``num_samples`` sampled trajectories from the observation ``latent``."""
        if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer):
            raise TypeError(f"num_samples must be an int, got {type(num_samples).__name__}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if not isinstance(latent, Mapping):
            raise TypeError("a GWM latent is an observation dict (as returned by observe)")
        n = validate_observation(latent, self.schema)
        if n < 1:
            raise DataError("cannot imagine on a graph with no nodes")
        actions = self.prepare_actions(action_sequence, n, int(num_samples))
        gen = self.make_generator(generator)
        obs = {k: v[None] for k, v in observation_to_tensors(latent, self.device).items()}
        node_mask = torch.ones(1, n, dtype=torch.bool, device=self.device)
        state = state_from_observation(obs, node_mask, self.schema, self.scaler)
        state = state.expand(int(num_samples))
        mask = state.node_mask
        out = []
        for k in range(actions.shape[0]):
            pred, _ = self.step(state, actions[k])
            sample = sampled_state(pred, mask, self.schema, self.scaler, gen)
            out.append(predictions_to_numpy(sample.obs))
            state = sample.state
        return out


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
