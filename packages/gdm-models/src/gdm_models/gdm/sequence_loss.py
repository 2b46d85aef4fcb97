"""Time-vectorised GDM training loss: the same function as the step-by-step reference
(:func:`gdm_models.reference.gdm_loss_reference`), with far fewer operations, because
training time is dominated by the number of small tensor operations per window.

Only the posterior recurrence is sequential (paper, "Training": the recurrence runs on h^+,
z^+ and the teacher-forced adjacency). Everything else is computed for all steps at once:

* before the recurrence: the observation encoder of all L+1 observations, the action
  embeddings and their pools, the normalised message-passing weights of the observed
  adjacencies, and every uniform of the window (one draw per kind, batch axis first);
* the recurrence: :meth:`GDMCell.posterior <gdm_models.gdm.cell.GDMCell.posterior>`, the
  observation-only work of the posterior step for all steps at once, then a scan of the
  step (:mod:`gdm_models.gdm.step`; a function of tensors only: no noise object, no Python
  ints specialised per step);
* after the recurrence: the prior branch of every transition (it depends only on h^-_t, h_g^-_t
  and A_{t-1}, never feeds the recurrence), the decoder and all loss terms, as one batch of
  B*L graphs (:func:`sequence_tail`).

Everything after the noise draw is :func:`sequence_core`, a function of tensors only, which
``GDM.enable_compile`` hands to ``torch.compile`` as one graph (one forward and one backward
graph per step; with mode "reduce-overhead" on CUDA, CUDA graphs replay them in a few
launches). Under compile the batch is zero-padded to a multiple of
``GDM.compile_pad_multiple`` nodes (:meth:`~gdm_models.data.Batch.pad_nodes`) so a few
static shapes cover all batches.

Noise keys (``Noise.record``): ``seq/zg_post`` (B,L+1,Gg,Cg), ``seq/zn_post`` (B,L+1,N,Gn,Cn),
``seq/zg_prior`` (B,L,Gg,Cg), ``seq/adj`` (B,L,N,N) symmetric, ``seq/zn_prior`` (B,L,N,Gn,Cn),
drawn in that order; :func:`sequence_noise_to_steps` converts them to the reference's per-step
keys (``"<t>/<name>"``), which is how the tests check that both paths agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

import torch

from ..data import OBS_KEYS, Batch
from ..losses import masked_mean
from ..message_passing import normalise_weights
from ..scaling import FeatureScaler
from .cell import GDMCell
from .config import GDMConfig
from .latent import Noise, PosteriorSequence, PriorNoise
from .step import STEP_OUTPUTS, stack_outputs
from .terms import transition_terms


class GDM(Protocol):
    """What the loss reads of a :class:`~gdm_models.gdm.model.GDM` (which imports this
    module): its cell, config and scaler."""

    cell: GDMCell
    config: GDMConfig
    scaler: FeatureScaler


__all__ = [
    "SEQUENCE_NOISE",
    "draw_sequence_noise",
    "sequence_noise_to_steps",
    "sequence_tail",
    "sequence_core",
    "sequence_loss_terms",
    "CORE_FIELDS",
]

#: names of the sequence noise tensors, in drawing order; "_post" ones cover steps 0..L
SEQUENCE_NOISE = ("zg_post", "zn_post", "zg_prior", "adj", "zn_prior")


def draw_sequence_noise(
    model: GDM | GDMCell, noise: Noise, b: int, seq_len: int, n: int
) -> dict[str, torch.Tensor | None]:
    """All uniforms of one training window of ``model`` (a GDM or its cell; ``None`` for
    parts the config switches off)."""
    cell = model if isinstance(model, GDMCell) else model.cell
    c = cell.config
    u: dict[str, torch.Tensor | None] = {}
    u["zg_post"] = cell.draw_zg(noise, "seq/zg_post", b, seq_len + 1)
    u["zn_post"] = noise.uniform("seq/zn_post", cell.zn_shape(b, seq_len + 1, n))
    u["zg_prior"] = cell.draw_zg(noise, "seq/zg_prior", b, seq_len)
    u["adj"] = (
        noise.uniform("seq/adj", (b, seq_len, n, n), symmetric=True)
        if c.recurrent_adjacency
        else None
    )
    u["zn_prior"] = noise.uniform("seq/zn_prior", cell.zn_shape(b, seq_len, n))
    return u


def sequence_noise_to_steps(record: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-step noise keys of the reference path (``"<t>/<name>"``) from ``seq/*`` records.

    Posterior noise of window index t (0..L) becomes ``"<t>/zn_post"``; prior noise of
    transition t (1..L) becomes ``"<t>/zn_prior"`` (the prior exists from t = 1 on).
    """
    out = {}
    for key, u in record.items():
        scope, name = key.split("/", 1)
        if scope != "seq":
            continue
        first = 0 if name.endswith("_post") else 1
        for k in range(u.shape[1]):
            out[f"{k + first}/{name}"] = u[:, k]
    return out


def _pool_steps(x: torch.Tensor, node_weight: torch.Tensor) -> torch.Tensor:
    """Mean over real nodes of (B, T, N, D) -> (B, T, D); node_weight (B, 1, N, 1) 0/1."""
    return masked_mean(x, node_weight, 2)


def sequence_tail(
    model: GDM,
    h_n_m: torch.Tensor,
    h_g_m: torch.Tensor,
    h_n_p: torch.Tensor,
    h_g_p: torch.Tensor,
    q_g: torch.Tensor,
    z_g_p: torch.Tensor,
    q_n: torch.Tensor,
    z_n_p: torch.Tensor,
    obs: dict[str, torch.Tensor],
    reward: torch.Tensor,
    continuation: torch.Tensor,
    a_prev: torch.Tensor,
    node_mask: torch.Tensor,
    pair_mask: torch.Tensor,
    u_prior: PriorNoise,
) -> dict[str, torch.Tensor]:
    """Prior branch, decoder and per-transition loss terms of M = B*L transitions at once.

    Every argument has a leading axis of M transitions (the prior of transition t uses h^-_t,
    h_g^-_t and A_{t-1}; the posterior quantities are those of step t). Returns (M,) terms.
    """
    cell = model.cell
    o: dict[str, Any] = dict(
        zip(STEP_OUTPUTS, (h_n_m, h_g_m, h_n_p, h_g_p, q_g, z_g_p, q_n, z_n_p), strict=True)
    )
    if not model.config.graph_state:
        o["q_g"] = None
    o.update(cell.prior(h_n_m, h_g_m, a_prev, node_mask, pair_mask, u_prior))
    return transition_terms(
        cell,
        model.scaler,
        obs,
        reward,
        continuation,
        a_prev,
        o,
        node_mask,
        pair_mask,
        node_mask.sum(1),
    )


def _flat(x: torch.Tensor) -> torch.Tensor:
    """(B, T, ...) -> (B*T, ...)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


#: Batch fields passed to :func:`sequence_core`, in order
CORE_FIELDS = OBS_KEYS + ("action_nodes", "reward", "continuation", "node_mask")


def sequence_loss_terms(
    model: GDM,
    batch: Batch,
    noise: Noise,
    core: Callable[..., dict[str, torch.Tensor]] | None = None,
) -> dict[str, torch.Tensor]:
    """Per-transition loss terms (B, L) of a batch. The uniforms are drawn here (eagerly, from
    ``noise``); ``core`` (default :func:`sequence_core`; a compiled version may be passed)
    is a function of tensors only."""
    u = draw_sequence_noise(model, noise, batch.batch_size, batch.seq_len, batch.num_nodes)
    core = core or partial(sequence_core, model)
    return core(*(getattr(batch, k) for k in CORE_FIELDS), *(u[k] for k in SEQUENCE_NOISE))


def sequence_core(model: GDM, *tensors: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """:func:`sequence_loss_terms` on tensors: the :data:`CORE_FIELDS` of a batch, then the
    :data:`SEQUENCE_NOISE` uniforms (``None`` where switched off)."""
    nf = len(CORE_FIELDS)
    fields_: dict[str, torch.Tensor] = {}
    for name, value in zip(CORE_FIELDS, tensors[:nf], strict=True):
        assert value is not None  # only noise is switched off
        fields_[name] = value
    u = dict(zip(SEQUENCE_NOISE, tensors[nf:], strict=True))
    u_zn_post, u_zn_prior = u["zn_post"], u["zn_prior"]
    assert u_zn_post is not None and u_zn_prior is not None  # the node latents always exist
    B, L = fields_["action_nodes"].shape[:2]
    batch = Batch(**fields_, step_mask=fields_["reward"].new_ones(B, L, dtype=torch.bool))
    tail = partial(sequence_tail, model)
    cell, c = model.cell, model.config
    B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
    nm = batch.node_mask
    # ---- everything that does not depend on the recurrence, for all steps at once
    nm_steps = nm[:, None, :].expand(B, L + 1, N).reshape(B * (L + 1), N)
    obs = {k: getattr(batch, k) for k in OBS_KEYS}
    e_v, e_g = cell.encode({k: _flat(v) for k, v in obs.items()}, nm_steps)
    e_v, e_g = e_v.reshape(B, L + 1, N, -1), e_g.reshape(B, L + 1, -1)
    actions = torch.cat([batch.action_nodes.new_zeros(B, 1, N), batch.action_nodes], 1)
    a_emb = cell.embed.action_embed(actions)  # step 0: the zero action
    a_pool = _pool_steps(a_emb, nm.to(a_emb.dtype)[:, None, :, None])
    if c.recurrent_adjacency:
        alpha = normalise_weights(batch.adjacency)  # teacher forcing: b = observed A_t
    else:
        alpha = normalise_weights(batch.pair_mask.to(a_emb.dtype))  # the same at every step
    # ---- the posterior: its observation-only work for all steps, then a scan of its step
    seq = PosteriorSequence(a_emb, a_pool, e_v, e_g, alpha, u["zg_post"], u_zn_post)
    _, ys = cell.posterior(seq, nm)
    # step 0 only initialises the posterior; the losses are on the transitions 1..L
    outs = stack_outputs(ys[1:], B, N, cell.member_count())
    h_n_m, h_g_m, h_n_p, h_g_p, q_g, z_g_p, q_n, z_n_p = (_flat(x) for x in outs)
    # ---- prior branch, decoder and loss terms of all B*L transitions at once
    nm_f = nm[:, None, :].expand(B, L, N).reshape(B * L, N)
    pm = batch.pair_mask
    pm_f = pm[:, None].expand(B, L, N, N).reshape(B * L, N, N)
    obs_f = {k: _flat(v[:, 1:]) for k, v in obs.items()}
    terms = tail(
        h_n_m,
        h_g_m,
        h_n_p,
        h_g_p,
        q_g,
        z_g_p,
        q_n,
        z_n_p,
        obs_f,
        _flat(batch.reward),
        _flat(batch.continuation),
        _flat(batch.adjacency[:, :-1]),
        nm_f,
        pm_f,
        PriorNoise(
            _flat(u["zg_prior"]) if u["zg_prior"] is not None else None,
            _flat(u["adj"]) if u["adj"] is not None else None,
            _flat(u_zn_prior),
        ),
    )
    return {k: v.reshape(B, L) for k, v in terms.items()}
