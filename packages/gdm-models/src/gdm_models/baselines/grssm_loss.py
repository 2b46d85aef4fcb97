"""G-RSSM's training loss (the module docstring of :mod:`.grssm`): the window's targets and
the loss as a function of tensors only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..data import OBS_KEYS, Batch
from ..layers import categorical_kl
from ..losses import PREDICTION_LOSS_KEYS, NodeMasks, free_bits, masked_mean, prediction_loss
from ..member_ops import member_reduce
from .grssm_filter import posterior_pass

__all__ = ["GRSSM_TERM_KEYS", "LOGGED", "grssm_loss_tensors", "window_targets"]

_PRED_KEYS: tuple[str, ...] = PREDICTION_LOSS_KEYS

GRSSM_TERM_KEYS: tuple[str, ...] = (
    "pred",
    *PREDICTION_LOSS_KEYS,
    "kl",
    "kl_dyn",
    "kl_rep",
)

#: order of the values returned by :func:`grssm_loss_tensors`
LOGGED: tuple[str, ...] = (*_PRED_KEYS, "kl_dyn", "kl_rep", "kl", "pred")


def window_targets(
    batch: Batch, obs: Mapping[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Targets of the B*(L+1) decoded steps of a window and which of them count.

    Step t's target is observation t; the reward and continuation of the transition t-1 -> t
    sit at the observation they lead to (t >= 1). Returns ``(target, obs_valid,
    trans_valid)``: observation terms count at t = 0 and at real steps, transition terms at
    real steps t >= 1 only. A window's first transition is always real, so observation 0
    counts exactly in the real windows: a padding row (every ``step_mask`` False, see
    :func:`gdm_models.training.capture.pad_batch`) counts nowhere.
    """
    B = batch.batch_size
    target = {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in obs.items()}
    target["reward"] = torch.cat([batch.reward.new_zeros(B, 1), batch.reward], 1).reshape(-1)
    target["continuation"] = torch.cat(
        [batch.continuation.new_ones(B, 1), batch.continuation], 1
    ).reshape(-1)
    real_window = batch.step_mask[:, :1]
    obs_valid = torch.cat([real_window, batch.step_mask], 1).reshape(-1)
    trans_valid = torch.cat([torch.zeros_like(real_window), batch.step_mask], 1).reshape(-1)
    return target, obs_valid, trans_valid


def grssm_loss_tensors(
    model: Any, batch: Batch, uniforms: torch.Tensor, members: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss as a function of tensors only: ``(total, logged values)`` with the values
    in the order of :data:`LOGGED` (no host sync; ``uniforms``: the posterior noise).
    ``members`` > 0: a member model's folded batch; every mean is per member and the
    total and each value are (K,)."""

    c = model.config
    B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
    T1 = L + 1
    obs = {k: getattr(batch, k) for k in OBS_KEYS}
    out = posterior_pass(model, obs, batch.action_nodes, batch.node_mask, None, uniforms)
    mask_bt = batch.node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
    pred = model.decode(out["h"].reshape(B * T1, N, -1), out["z"].reshape(B * T1, N, -1), mask_bt)
    target, obs_valid, trans_valid = window_targets(batch, obs)
    masks = NodeMasks.of(mask_bt, pred.reward.dtype)
    parts = prediction_loss(pred, target, masks, model.scaler)
    obs_keys, trans_keys = _PRED_KEYS[:4], _PRED_KEYS[4:]
    means = torch.cat(
        [
            masked_mean(
                member_reduce(torch.stack([parts[k] for k in obs_keys]), members),
                member_reduce(obs_valid, members),
                -1,
            ),
            masked_mean(
                member_reduce(torch.stack([parts[k] for k in trans_keys]), members),
                member_reduce(trans_valid, members),
                -1,
            ),
        ]
    )
    terms = dict(zip(_PRED_KEYS, means, strict=True))
    # KL per graph and step: node-mean of the summed-over-groups KL, then free bits
    q, p = out["posterior"], out["prior"]
    node_valid = batch.node_mask[:, None].expand(B, T1, N)
    kl_dyn = masked_mean(categorical_kl(q.detach(), p), node_valid, -1).reshape(-1)
    kl_rep = masked_mean(categorical_kl(q, p.detach()), node_valid, -1).reshape(-1)
    fb = torch.stack([free_bits(kl_dyn, c.free_bits), free_bits(kl_rep, c.free_bits), kl_dyn])
    terms["kl_dyn"], terms["kl_rep"], kl_raw = masked_mean(
        member_reduce(fb, members), member_reduce(obs_valid, members), -1
    )
    scale = model.loss_scales()
    assert scale.keys() == terms.keys(), (sorted(scale), sorted(terms))
    total = sum(scale[k] * terms[k] for k in scale)
    pred = sum(terms[k] * (c.beta_adj if k == "adjacency" else 1.0) for k in _PRED_KEYS)
    return total, torch.stack([*terms.values(), kl_raw, pred])
