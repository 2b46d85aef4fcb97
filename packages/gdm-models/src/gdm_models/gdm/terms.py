"""The GDM's loss (paper, section "Training", eq. loss): the per-transition terms of one
step's prior and posterior (:func:`transition_terms`) and their weighted average over a window
(:func:`combine_terms`). Shared by the time-vectorised loss (:mod:`.sequence_loss`) and the
step-by-step reference (:mod:`gdm_models.reference`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..adjacency import next_edge_signed_logit
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
from ..scaling import FeatureScaler
from .cell import GDMCell
from .config import GDMConfig

__all__ = ["combine_terms", "loss_scales", "transition_terms"]


def loss_scales(c: GDMConfig) -> dict[str, float]:
    """Weight of every logged per-transition term in the total (paper eq. loss):
    beta_pred on each L_pred part, beta_n beta_dyn / beta_n beta_rep on the node KLs,
    beta_g beta_dyn / beta_g beta_rep on the graph KLs, beta_adj, beta_h."""
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
    cache: dict[Any, tuple[torch.Tensor, torch.Tensor]],
    keys: list[str],
    scale: Mapping[str, float],
    like: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss weights of ``keys`` and their "pred_" indicator as tensors on ``like``'s
    device, made once per keys, device and dtype (``cache``): a host-to-device copy at every
    step would block CUDA-graph capture (:mod:`gdm_models.training.capture`)."""
    key = (tuple(keys), tuple(scale[k] for k in keys), like.device, like.dtype)
    if key not in cache:
        cache[key] = (
            torch.tensor([scale[k] for k in keys], dtype=like.dtype, device=like.device),
            torch.tensor([k.startswith("pred_") for k in keys], device=like.device),
        )
    return cache[key]


def combine_terms(
    config: GDMConfig,
    cache: dict[Any, tuple[torch.Tensor, torch.Tensor]],
    per_step: Mapping[str, torch.Tensor],
    step_mask: torch.Tensor,
    members: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Average (B, L) terms over the real transitions and weight them (paper eq. loss).
    ``members`` > 0: B holds that many members' windows (member-major); the averages are
    per member and the total and every term are (K,). ``cache``: the weights' tensors."""
    scale = loss_scales(config)
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
        weights, is_pred = _term_weights(cache, keys, scale, mean)
        total = (mean * weights[:, None]).sum(0)
        values = torch.cat([mean, (mean * is_pred[:, None]).sum(0)[None], total[None]])
        terms = dict(zip([*keys, "pred", "total"], values.detach().unbind(), strict=True))
        return total, terms
    mean = (stacked * m).sum((1, 2)) / m.sum().clamp_min(1.0)
    weights, is_pred = _term_weights(cache, keys, scale, mean)
    total = (mean * weights).sum()
    values = torch.cat([mean, (mean * is_pred).sum()[None], total[None]]).detach()
    terms = dict(zip([*keys, "pred", "total"], values.unbind(), strict=True))
    return total, terms


def transition_terms(
    cell: GDMCell,
    scaler: FeatureScaler,
    obs: Mapping[str, torch.Tensor],
    reward: torch.Tensor,
    continuation: torch.Tensor,
    a_prev: torch.Tensor,
    o: Mapping[str, Any],
    nm: torch.Tensor,
    pm: torch.Tensor,
    n_real: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Per-transition loss terms (B,) for any number B of transitions (one per graph), from
    the step's posterior and prior outputs ``o`` (:data:`~.step.STEP_OUTPUTS` and
    :meth:`GDMCell.prior`'s)."""
    c, sc = cell.config, scaler
    B = nm.shape[0]
    zeros = torch.zeros(B, device=cell.device)
    node_out, graph_out, d_n = cell.decoder(
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
        adjacency_logit=None if c.recurrent_adjacency else cell.adjacency.adj_head(d_n),
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
