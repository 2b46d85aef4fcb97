"""G-RSSM's posterior pass (filtering; the module docstring of :mod:`.grssm`): the
recurrence ``h -> x -> attention -> GRU -> posterior sample`` over a window, its
time-independent parts applied to all steps at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from ..data import OBS_KEYS
from ..layers import gumbel_from_uniform
from ..member_ops import member_addmm, member_count, member_linear
from .grssm_parts import _onehot_st, attention_key_bias

__all__ = ["posterior_pass", "posterior_step"]


def posterior_pass(
    model: Any,
    obs: Mapping[str, torch.Tensor],
    actions: torch.Tensor,
    node_mask: torch.Tensor,
    generator: torch.Generator | None,
    uniforms: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Posterior pass over T+1 observations (B,T+1,...) and T actions (B,T,N).

    The first step starts from h = 0, z = 0 and a zero action. Returns stacked (B,T+1,N,.)
    ``h``, ``z`` (straight-through samples), ``prior`` and ``posterior`` probabilities.
    ``uniforms`` (T+1,B,N,groups,classes): the noise of all steps, drawn at once by the
    training loss; without it one draw per step from ``generator``, so that a prefix of
    the trajectory consumes exactly its own noise on every device (``observe_at``). On the
    CPU both give the same numbers.
    """
    B, T1, N = obs["adjacency"].shape[:3]
    c = model.config
    G, C, H = c.latent_groups, c.latent_classes, c.hidden_dim
    flat = {k: v.reshape(B * T1, *v.shape[2:]) for k, v in obs.items() if k in OBS_KEYS}
    mask_bt = node_mask[:, None].expand(B, T1, N).reshape(B * T1, N)
    enc = model.encode(flat, mask_bt).reshape(B, T1, N, -1)
    dev, dt = enc.device, enc.dtype
    # time-major inputs of the recurrence, computed for all steps in one product each
    acts = torch.cat([actions.new_zeros(B, 1, N), actions], 1)
    post_in = model.posterior_net[0]
    w_in, b_in = post_in.weight, post_in.bias
    assert isinstance(w_in, torch.Tensor) and isinstance(b_in, torch.Tensor)
    w_ph = w_in[..., :H]  # q(z | h, e): [h, e] W^T + b = h W_h^T + (e W_e^T + b)
    if member_count(model):  # member rows must lead in a member map: transpose after it
        w_hz, a_term = model._input_parts(acts.to(dt))
        a_term = a_term.transpose(0, 1)  # (T1,B,N,H)
        e_term = member_linear(enc, w_in[..., H:], b_in).transpose(0, 1)
    else:
        w_hz, a_term = model._input_parts(acts.transpose(0, 1).to(dt))  # (T1,B,N,H)
        e_term = F.linear(enc.transpose(0, 1), w_in[..., H:], b_in)
    gumbel = None if uniforms is None else gumbel_from_uniform(uniforms)
    key_bias = attention_key_bias(node_mask, dt)
    m = node_mask.to(dt)[..., None]
    h = torch.zeros(B, N, H, device=dev, dtype=dt)
    z = torch.zeros(B, N, G * C, device=dev, dtype=dt)
    hs, zs, posts = [], [], []
    for t in range(T1):
        if gumbel is None:
            u = torch.rand((B, N, G, C), generator=generator, device=dev, dtype=dt)
            g_t = gumbel_from_uniform(u)
        else:
            g_t = gumbel[t]
        h, z, post = posterior_step(model, h, z, a_term[t], e_term[t], g_t, w_hz, w_ph, key_bias, m)
        hs.append(h)
        zs.append(z)
        posts.append(post)
    h_all = torch.stack(hs, 1)
    return {
        "h": h_all,
        "z": torch.stack(zs, 1),
        "prior": model.prior(h_all),  # p(z_t | h_t) does not feed the recurrence
        "posterior": torch.stack(posts, 1),
    }


def posterior_step(
    model: Any,
    h: torch.Tensor,
    z: torch.Tensor,
    a_term: torch.Tensor,
    e_term: torch.Tensor,
    gumbel: torch.Tensor,
    w_hz: torch.Tensor,
    w_ph: torch.Tensor,
    key_bias: torch.Tensor,
    m: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the posterior pass, a function of tensors only (its noise given, no
    Python state), so that it can be traced or compiled: h_t = cell(h, z, a_t), the
    posterior q(z_t | h_t, e_t) and its straight-through sample. Returns (h_t, z_t, q_t)."""
    B, N, H = h.shape
    h = model._cell(h, z, w_hz, a_term, key_bias, m)
    x = member_addmm(e_term.reshape(-1, H), h.reshape(-1, H), w_ph.transpose(-1, -2))
    for layer in list(model.posterior_net)[1:]:
        x = layer(x)
    post = model._probs(x.reshape(B, N, -1))
    return h, _onehot_st(post, gumbel).flatten(-2) * m, post
