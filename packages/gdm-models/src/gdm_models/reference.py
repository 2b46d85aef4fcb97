"""Slow reference implementations of the models' training losses, for tests and benchmarks.

Each computes the same function as a model's fast path in the most direct form: step by step,
one random draw per step, the prior inside the recurrence, per-layer loops, one ``.item()`` per
logged term. They share the models' parameters, so the tests (and the benchmarks
``bench_gdm.py`` / ``bench_baselines.py``) check that the fast paths give the same loss,
gradients and samples, and measure what they save. Production code never calls them.

* GDM: :func:`gdm_loss_reference` / :func:`gdm_step_terms_reference` run the posterior step by
  step in the plain form of the cell's parts (:func:`gdm_posterior_step_reference`) with the
  prior inside the recurrence; noise keys ``"<t>/<name>"``
  (:func:`gdm_models.gdm.sequence_noise_to_steps` converts the fast path's).
* G-RSSM and Vanilla / EA-GWM: the code the optimised baselines replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from .adjacency import EdgeUpdateMLP
from .backends import use_backend
from .baselines.common import (
    GraphState,
    soft_state,
    state_from_observation,
)
from .baselines.ea_losses import (
    critical_node_loss,
    critical_node_weights,
    normalized_adjacency,
    rollout_consistency_loss,
    spectral_loss_per_layer,
)
from .baselines.grssm import GRSSM, GRSSM_TERM_KEYS, window_targets
from .baselines.gwm import GWM, GWM_TERM_KEYS, spectral_term
from .data import OBS_KEYS, Batch
from .gdm import GDM, GDMLatent, Noise
from .gdm.cell import PlainInputs, PlainPosteriorStep
from .layers import categorical_kl, sample_onehot_st, unimix_probs
from .losses import NodeMasks, Prediction, free_bits, prediction_loss
from .message_passing import normalise_weights
from .scaling import FeatureScaler
from .world_model import terms_to_floats

__all__ = [
    "attention_reference",
    "edge_logits_reference",
    "gdm_loss_reference",
    "gdm_loss_tensors_reference",
    "gdm_posterior_step_reference",
    "gdm_step_terms_reference",
    "gdm_transition_terms_reference",
    "grssm_filter_reference",
    "grssm_loss_reference",
    "grssm_transition_reference",
    "gwm_loss_reference",
    "gwm_step_reference",
]


# ---------------------------------------------------------------------------- GDM
def edge_logits_reference(
    mlp: EdgeUpdateMLP, h: torch.Tensor, g: torch.Tensor, a_prev: torch.Tensor
) -> torch.Tensor:
    """The edge-update MLP's symmetric logits (B, N, N) with the concatenated input
    [h_i, h_j, h_g, z_g, A_ij] of every ordered pair (what ``forward_dense`` and
    ``forward_chunked`` compute from per-node projections)."""
    return mlp.forward_plain(h, g, a_prev)


def gdm_posterior_step_reference(
    model: GDM,
    prev: GDMLatent,
    action: torch.Tensor,
    obs: Mapping[str, torch.Tensor],
    node_mask: torch.Tensor,
    pair_mask: torch.Tensor,
    noise: Noise,
    t: int,
    need_prior: bool,
) -> tuple[GDMLatent, dict[str, Any]]:
    """One posterior step with teacher-forced adjacency (+ the prior if requested) in the
    reference backend (:mod:`gdm_models.backends`): the plain form of the cell's parts
    (:class:`~gdm_models.gdm.cell.PlainPosteriorStep`, concatenated inputs, whole modules),
    what :class:`~gdm_models.gdm.step.PosteriorStep` computes with fused maps; noise keys
    ``"<t>/<name>"``."""
    cell = model.cell
    c = cell.config
    b, n = action.shape
    a_obs = obs["adjacency"]  # teacher forcing: A_t = observed adjacency, b = A_t
    with use_backend("reference"):
        a = cell.embed.action_embed(action)
        e_v, e_g = cell.encode(obs, node_mask)
        u_zg = cell.draw_zg(noise, f"{t}/zg_post", b)
        u_zn = noise.uniform(f"{t}/zn_post", cell.zn_shape(b, n))
        w = a_obs if c.recurrent_adjacency else pair_mask.to(a.dtype).expand(b, -1, -1)
        x = PlainInputs(a, e_v, e_g, normalise_weights(w), u_zg, u_zn)
        latent, out = PlainPosteriorStep(cell, node_mask, a.dtype).step(prev, x)
        if need_prior:
            u = cell.prior_noise(noise, t, b, n)
            out.update(
                cell.prior(out["h_n_m"], out["h_g_m"], prev.adjacency, node_mask, pair_mask, u)
            )
    latent.adjacency = a_obs
    if not c.graph_state:
        out["q_g"] = None  # no graph latent (the step's zero-width tensor is the scan's)
    return latent, out


def gdm_transition_terms_reference(
    model: GDM,
    batch: Batch,
    t: int,
    obs: Mapping[str, torch.Tensor],
    prev: GDMLatent,
    o: Mapping[str, Any],
    nm: torch.Tensor,
    pm: torch.Tensor,
    n_real: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Per-graph loss terms (B,) of window step t (transition t-1 -> t) from the outputs
    ``o`` of :func:`gdm_posterior_step_reference` with the prior."""
    return model.transition_terms(
        obs,
        batch.reward[:, t - 1],
        batch.continuation[:, t - 1],
        prev.adjacency,
        o,
        nm,
        pm,
        n_real,
    )


def gdm_step_terms_reference(model: GDM, batch: Batch, noise: Noise) -> dict[str, torch.Tensor]:
    """Per-transition terms (B, L) of the GDM loss computed step by step."""
    B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
    nm, pm = batch.node_mask, batch.pair_mask
    n_real = nm.sum(1)
    latent = model.cell.initial_latent(B, N)
    zero_action = torch.zeros(B, N, device=model.device)
    per_step: list[dict[str, torch.Tensor]] = []
    for t in range(L + 1):
        obs = batch.observation(t)
        action = zero_action if t == 0 else batch.action_nodes[:, t - 1]
        prev = latent
        latent, o = gdm_posterior_step_reference(model, prev, action, obs, nm, pm, noise, t, t > 0)
        if t == 0:
            continue
        per_step.append(
            gdm_transition_terms_reference(model, batch, t, obs, prev, o, nm, pm, n_real)
        )
    return {k: torch.stack([d[k] for d in per_step], 1) for k in per_step[0]}


def gdm_loss_tensors_reference(
    model: GDM, batch: Batch, noise: Noise
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:meth:`GDM.loss_tensors <gdm_models.gdm.model.GDM.loss_tensors>` step by step."""
    return model.combine_terms(gdm_step_terms_reference(model, batch, noise), batch.step_mask)


def gdm_loss_reference(
    model: GDM, batch: Batch, noise: Noise
) -> tuple[torch.Tensor, dict[str, float]]:
    """:meth:`GDM.loss_terms <gdm_models.gdm.model.GDM.loss_terms>` step by step: the same
    function of the same uniforms (noise keys ``"<t>/<name>"``)."""
    total, terms = gdm_loss_tensors_reference(model, batch, noise)
    return total, terms_to_floats(terms)


# ---------------------------------------------------------------------------- shared
def _prediction_loss(
    pred: Prediction,
    target: Mapping[str, torch.Tensor],
    node_mask: torch.Tensor,
    scaler: FeatureScaler,
) -> dict[str, torch.Tensor]:
    """The shared L_pred (not what the fast paths changed), masks built per call as before."""
    return prediction_loss(pred, target, NodeMasks.of(node_mask, pred.reward.dtype), scaler)


def _vmean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    v = valid.to(x.dtype)
    return (x * v).sum() / v.sum().clamp_min(1.0)


# ---------------------------------------------------------------------------- G-RSSM
def attention_reference(attn: Any, x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    """All-pairs attention in query blocks of ``attn.chunk`` nodes (the original forward, whose
    default block was 256)."""
    chunk = attn.chunk or 256
    B, N, D = x.shape
    H = attn.heads
    q, k, v = attn.qkv(x).view(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
    allowed = node_mask[:, None, None, :]
    outs = [
        F.scaled_dot_product_attention(q[:, :, s : s + chunk], k, v, attn_mask=allowed)
        for s in range(0, N, chunk)
    ]
    o = torch.cat(outs, dim=2).transpose(1, 2).reshape(B, N, D)
    return attn.out(o)


def grssm_transition_reference(
    model: GRSSM, h: torch.Tensor, z: torch.Tensor, action: torch.Tensor, node_mask: torch.Tensor
) -> torch.Tensor:
    """h_t = GRU(AllPairsMP(SiLU(W_in [h_{t-1}, z_{t-1}, a_t])) | h_{t-1}) (original)."""
    m = node_mask.to(h.dtype)[..., None]
    x = F.silu(model.rec_in(torch.cat([h, z, action[..., None].to(h.dtype)], dim=-1)))
    for attn, norm in zip(model.attention, model.attention_norm, strict=True):
        x = norm(x + attention_reference(attn, x, node_mask))
    lead = h.shape[:-1]
    h_new = model.gru(x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1])).reshape(*lead, -1)
    return h_new * m


def _probs(model: GRSSM, logits: torch.Tensor) -> torch.Tensor:
    c = model.config
    return unimix_probs(
        logits.reshape(*logits.shape[:-1], c.latent_groups, c.latent_classes), c.unimix
    )


def _sample_z(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=probs.dtype)
    return sample_onehot_st(probs, u).flatten(-2)


def grssm_filter_reference(
    model: GRSSM,
    obs: Mapping[str, torch.Tensor],
    actions: torch.Tensor,
    node_mask: torch.Tensor,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Posterior pass, one step (and one ``torch.rand``) at a time (what
    :func:`~gdm_models.baselines.grssm_filter.posterior_pass` computes)."""
    B, T1, N = obs["adjacency"].shape[:3]
    flat = {k: v.reshape(B * T1, *v.shape[2:]) for k, v in obs.items() if k in OBS_KEYS}
    mask_bt = node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
    enc = model.encode(flat, mask_bt).reshape(B, T1, N, -1)
    c = model.config
    dev, dt = enc.device, enc.dtype
    h = torch.zeros(B, N, c.hidden_dim, device=dev, dtype=dt)
    z = torch.zeros(B, N, c.latent_groups * c.latent_classes, device=dev, dtype=dt)
    hs, zs, priors, posts = [], [], [], []
    for t in range(T1):
        a = actions[:, t - 1] if t > 0 else torch.zeros(B, N, device=dev, dtype=dt)
        h = grssm_transition_reference(model, h, z, a, node_mask)
        prior = _probs(model, model.prior_net(h))
        post = _probs(model, model.posterior_net(torch.cat([h, enc[:, t]], dim=-1)))
        z = _sample_z(post, generator) * node_mask[..., None].to(dt)
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


def grssm_loss_reference(
    model: GRSSM, batch: Batch, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The original G-RSSM loss (see :meth:`GRSSM.loss`)."""

    c = model.config
    gen = model.make_generator(generator if generator is not None else 0)
    B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
    T1 = L + 1
    obs = {k: getattr(batch, k) for k in OBS_KEYS}
    out = grssm_filter_reference(model, obs, batch.action_nodes, batch.node_mask, gen)
    mask_bt = batch.node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
    pred = model.decode(out["h"].reshape(B * T1, N, -1), out["z"].reshape(B * T1, N, -1), mask_bt)
    target, obs_valid, trans_valid = window_targets(batch, obs)
    parts = _prediction_loss(pred, target, mask_bt, model.scaler)
    means = {k: _vmean(parts[k], obs_valid) for k in ("node", "graph", "adjacency", "action_mask")}
    means.update({k: _vmean(parts[k], trans_valid) for k in ("reward", "continuation")})
    l_pred = (
        means["node"]
        + means["graph"]
        + c.beta_adj * means["adjacency"]
        + means["action_mask"]
        + means["reward"]
        + means["continuation"]
    )
    q, p = out["posterior"], out["prior"]
    m = batch.node_mask[:, None].to(q.dtype)

    def node_mean(kl: torch.Tensor) -> torch.Tensor:
        return ((kl * m).sum(-1) / m.sum(-1).clamp_min(1.0)).reshape(-1)

    kl_dyn = node_mean(categorical_kl(q.detach(), p))
    kl_rep = node_mean(categorical_kl(q, p.detach()))
    dyn = _vmean(free_bits(kl_dyn, c.free_bits), obs_valid)
    rep = _vmean(free_bits(kl_rep, c.free_bits), obs_valid)
    total = c.beta_pred * l_pred + c.beta_dyn * dyn + c.beta_rep * rep
    terms = {k: v.item() for k, v in means.items()}
    terms.update(
        pred=l_pred.item(),
        kl=_vmean(kl_dyn, obs_valid).item(),
        kl_dyn=dyn.item(),
        kl_rep=rep.item(),
    )
    return total, {k: terms[k] for k in GRSSM_TERM_KEYS}


# ---------------------------------------------------------------------------- GWM
def gwm_step_reference(
    model: GWM, state: GraphState, action: torch.Tensor
) -> tuple[Prediction, torch.Tensor]:
    """One GWM transition (the original ``GWM.step``)."""
    mask = state.node_mask
    m = mask.to(state.node_continuous.dtype)
    e_g = model.graph_encoder(state.graph_continuous, state.graph_categorical)
    e_n = model.node_encoder(
        state.node_continuous, state.node_categorical, state.action_mask[..., None]
    )
    h = (e_n + model.graph_to_node(e_g)[..., None, :]) * m[..., None]
    a = action.to(m.dtype) * m
    a_tilde = normalized_adjacency(state.adjacency, mask, model.config.self_loops)
    for i, w1 in enumerate(model.mp_weights):
        msg = a_tilde @ w1(h) + a[..., None] * model.action_weight[i] + model.mp_bias[i]
        h = (h + torch.relu(msg)) * m[..., None]
    pooled_a = (a.sum(-1) / m.sum(-1).clamp_min(1.0))[..., None]
    q_s = 0.5 * (model.Q + model.Q.T)
    return model.readout(state, h, e_g, pooled_a, q_s, m[..., None]), h


def gwm_loss_reference(
    model: GWM, batch: Batch, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The original Vanilla GWM / EA-GWM loss (see :meth:`GWM.loss`)."""

    cfg = model.config
    schema, scaler = model.schema, model.scaler
    B, L = batch.batch_size, batch.seq_len
    dev = batch.adjacency.device
    b_idx = torch.arange(B, device=dev).repeat_interleave(L)
    t_idx = torch.arange(L, device=dev).repeat(B)
    node_mask = batch.node_mask[b_idx]
    valid = batch.step_mask[b_idx, t_idx]

    def gather(t_obs: torch.Tensor, t_act: torch.Tensor):
        obs = {k: getattr(batch, k)[b_idx, t_obs] for k in OBS_KEYS}
        obs["reward"] = batch.reward[b_idx, t_act]
        obs["continuation"] = batch.continuation[b_idx, t_act]
        return obs, batch.action_nodes[b_idx, t_act]

    def combine(parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return (
            parts["node"]
            + parts["graph"]
            + cfg.beta_adj * parts["adjacency"]
            + parts["action_mask"]
            + parts["reward"]
            + parts["continuation"]
        )

    obs_now = {k: getattr(batch, k)[b_idx, t_idx] for k in OBS_KEYS}
    state = state_from_observation(obs_now, node_mask, schema, scaler)
    target, action = gather(t_idx + 1, t_idx)
    pred, _ = gwm_step_reference(model, state, action)
    parts = _prediction_loss(pred, target, node_mask, scaler)
    per_item = combine(parts)
    one_step = _vmean(per_item, valid)
    q_norm = ((0.5 * (model.Q + model.Q.T)).norm() - 1.0) ** 2
    total = one_step + cfg.beta_q * q_norm
    terms = {"pred": one_step.item(), "q_norm": q_norm.item()}
    for k in ("node", "graph", "adjacency", "action_mask", "reward", "continuation"):
        terms[k] = _vmean(parts[k], valid).item()
    zero = per_item.new_zeros(())
    rollout = spectral = critical = zero
    if cfg.rollout_weight > 0:

        def step_fn(st: GraphState, j: int) -> Prediction:
            if j == 1:
                return pred
            t_act = (t_idx + j - 1).clamp_max(L - 1)
            return gwm_step_reference(model, st, batch.action_nodes[b_idx, t_act])[0]

        def loss_fn(p: Prediction, j: int) -> tuple[torch.Tensor, torch.Tensor]:
            t_act = t_idx + j - 1
            ok = (t_act < L) & batch.step_mask[b_idx, t_act.clamp_max(L - 1)]
            tgt, _ = gather((t_act + 1).clamp_max(L), t_act.clamp_max(L - 1))
            lp = _prediction_loss(p, tgt, node_mask, scaler)
            return combine(lp), ok

        rollout = rollout_consistency_loss(
            state, cfg.rollout_steps, step_fn, lambda st, p: soft_state(p, node_mask), loss_fn
        )
        total = total + cfg.rollout_weight * rollout
    if cfg.spectral_weight > 0:
        spectral = spectral_term(model, spectral_loss_per_layer)
        total = total + cfg.spectral_weight * spectral
    if cfg.critical_weight > 0:
        c = critical_node_weights(
            state.adjacency, node_mask, cfg.critical_weighting, cfg.self_loops
        )
        crit = critical_node_loss(parts["node_per_node"], c, node_mask)
        critical = _vmean(crit, valid)
        total = total + cfg.critical_weight * critical
    terms.update(rollout=rollout.item(), spectral=spectral.item(), critical=critical.item())
    return total, {k: terms[k] for k in GWM_TERM_KEYS}
