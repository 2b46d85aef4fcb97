"""Per-member training losses for ensemble training under ``torch.func.vmap``.

A :class:`MemberLoss` splits a model's training loss (:meth:`WorldModel.training_loss`) into

* :meth:`MemberLoss.draw_noise` - the uniforms of one training step, drawn eagerly from the
  member's own generator at the member's *own* batch shape (B, L, its own node count n), in
  the order and shapes of the single run, so that they are the numbers the single run draws;
* :meth:`MemberLoss.pad_noise` - the same uniforms padded to the common node count of the
  ensemble's batch (value 0.5, a finite uniform; padded nodes are masked out of every loss
  term, so the loss is that of the unpadded batch);
* :meth:`MemberLoss.loss` - the tensor-only loss after the noise draw (the function each
  model hands to ``torch.compile``, :meth:`WorldModel._compile_target`), on a batch padded to
  the common node count, returning ``(total, terms)`` with the terms the single run logs.

``loss`` is a pure function of the parameters (through ``torch.func.functional_call``), the
batch tensors and the noise, so :func:`torch.func.vmap` of :func:`torch.func.grad_and_value`
evaluates K members in one call. :func:`member_loss_for` returns the adapter of a model or
``None`` (such a model is trained by the per-member loop).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .baselines.grssm import _LOGGED, GRSSM, GRSSM_TERM_KEYS, AllPairsAttention
from .baselines.gwm import GWM, GWM_TERM_KEYS
from .data import Batch
from .gdm import GDM
from .gdm.cell import Noise as NoiseSource
from .gdm.sequence_loss import CORE_FIELDS, SEQUENCE_NOISE, draw_sequence_noise, sequence_core
from .layers import use_explicit_gru
from .world_model import WorldModel

__all__ = [
    "MemberLoss",
    "GDMLoss",
    "GWMLoss",
    "GRSSMLoss",
    "member_loss_for",
    "stack_batches",
    "stack_noise",
    "PAD_UNIFORM",
]

Noise = tuple[torch.Tensor | None, ...]

#: value of the uniforms of padded nodes (finite and inside (0, 1); masked out anyway)
PAD_UNIFORM = 0.5


def _pad_axis(u: torch.Tensor | None, axis: int, n: int) -> torch.Tensor | None:
    """Pad axis ``axis`` (negative) of ``u`` to ``n`` entries with :data:`PAD_UNIFORM`."""
    if u is None or u.shape[axis] == n:
        return u
    pad = [0, 0] * (-axis)
    pad[-1] = n - u.shape[axis]
    return F.pad(u, pad, value=PAD_UNIFORM)


class MemberLoss:
    """Noise draw and tensor-only loss of one model family (see the module docstring)."""

    def draw_noise(
        self, model: WorldModel, batch: Batch, generator: torch.Generator
    ) -> Noise:  # pragma: no cover - interface
        """The uniforms the single run draws for ``batch`` (its own node count; ``batch`` may
        sit on the CPU: only its shapes are read), on the generator's device."""
        raise NotImplementedError

    def pad_noise(self, noise: Noise, n: int) -> Noise:  # pragma: no cover - interface
        """``noise`` with its node axes padded to ``n`` nodes."""
        raise NotImplementedError

    def loss(
        self, model: WorldModel, batch: Batch, noise: Noise
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # pragma: no cover - interface
        """``(total, terms)`` on a padded batch (terms: the keys the single run logs)."""
        raise NotImplementedError

    def batched_model(self, model: WorldModel) -> WorldModel:
        """The module that :meth:`loss` runs under ``vmap`` (its parameters are replaced by
        the members' through ``functional_call``): ``model`` itself, or a copy set up for
        vmap (:class:`GRSSMLoss`). ``model`` is not changed."""
        return model


class GDMLoss(MemberLoss):
    """The GDM (every ablation): the time-vectorised loss of :mod:`gdm_models.gdm.sequence_loss`.

    Its GRUs already run as explicit products there (the input gates are computed for all
    steps before the recurrence, :meth:`~gdm_models.gdm.cell.GDMCell.posterior_sequence`), so
    no fused GRU kernel meets vmap and :meth:`batched_model` is the model itself."""

    def draw_noise(self, model: WorldModel, batch: Batch, generator: torch.Generator) -> Noise:
        src = NoiseSource(generator, generator.device)
        u = draw_sequence_noise(
            model,  # type: ignore[arg-type]
            src,
            batch.batch_size,
            batch.seq_len,
            batch.num_nodes,
        )
        return tuple(u[k] for k in SEQUENCE_NOISE)

    def pad_noise(self, noise: Noise, n: int) -> Noise:
        out = []
        for name, u in zip(SEQUENCE_NOISE, noise, strict=True):
            if name == "adj":  # (B, L, N, N)
                u = _pad_axis(_pad_axis(u, -1, n), -2, n)
            elif name.startswith("zn"):  # (B, T, N, groups, classes)
                u = _pad_axis(u, -3, n)
            out.append(u)  # graph latents have no node axis
        return tuple(out)

    def loss(
        self, model: WorldModel, batch: Batch, noise: Noise
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        assert isinstance(model, GDM)  # member_loss_for picks this adapter for the GDM only
        per_step = sequence_core(model, *(getattr(batch, k) for k in CORE_FIELDS), *noise)
        return model.combine_terms(per_step, batch.step_mask)


class GWMLoss(MemberLoss):
    """Vanilla GWM / EA-GWM: deterministic, no noise (the spectral power-iteration vectors are
    buffers, updated in place per member)."""

    def draw_noise(self, model: WorldModel, batch: Batch, generator: torch.Generator) -> Noise:
        return ()

    def pad_noise(self, noise: Noise, n: int) -> Noise:
        return ()

    def loss(
        self, model: WorldModel, batch: Batch, noise: Noise
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        assert isinstance(model, GWM)  # member_loss_for picks this adapter for GWMs only
        total, values = model._loss_tensors(batch)
        terms = dict(zip([*model.loss_scales(), "pred"], values.unbind(), strict=True))
        return total, {k: terms[k].detach() for k in GWM_TERM_KEYS}


class GRSSMLoss(MemberLoss):
    """G-RSSM: the posterior uniforms of all steps, (L+1, B, N, groups, classes)."""

    def draw_noise(self, model: WorldModel, batch: Batch, generator: torch.Generator) -> Noise:
        assert isinstance(model, GRSSM)  # member_loss_for picks this adapter for G-RSSMs only
        c = model.config
        shape: tuple[int, ...] = (batch.seq_len + 1, batch.batch_size, batch.num_nodes)
        shape += (c.latent_groups, c.latent_classes)
        dev, dt = generator.device, batch.node_continuous.dtype
        return (torch.rand(shape, generator=generator, device=dev, dtype=dt),)

    def pad_noise(self, noise: Noise, n: int) -> Noise:
        return (_pad_axis(noise[0], -3, n),)

    def batched_model(self, model: WorldModel) -> WorldModel:
        """A copy of ``model`` whose attention and GRU run as explicit products (the same
        math and parameters; see :class:`~gdm_models.baselines.grssm.AllPairsAttention`'s
        ``fused`` and :func:`~gdm_models.layers.use_explicit_gru`): the fused kernels have no
        vmap batching rule (``aten::_thnn_fused_gru_cell`` on CUDA), so vmap would loop over
        the members there.

        Except the GRU on CUDA: there the explicit GRU made the captured K = 10 step 3.2x
        slower than functorch's per-member fallback of the fused cell (87.4 ms against 27.5 ms
        on an H200, OD, paper sizes; docs/models.md), so CUDA keeps the fused cell."""
        copy_ = copy.deepcopy(model)
        for module in copy_.modules():
            if isinstance(module, AllPairsAttention):
                module.fused = False
        if model.device.type != "cuda":
            use_explicit_gru(copy_)
        return copy_

    def loss(
        self, model: WorldModel, batch: Batch, noise: Noise
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        assert isinstance(model, GRSSM) and noise[0] is not None
        total, values = model._loss_tensors(batch, noise[0])
        terms = dict(zip(_LOGGED, values.unbind(), strict=True))
        return total, {k: terms[k].detach() for k in GRSSM_TERM_KEYS}


def member_loss_for(model: WorldModel) -> MemberLoss | None:
    """The :class:`MemberLoss` of ``model``'s class, or ``None`` when there is none (a model
    registered by another package; it is trained by the per-member loop)."""
    if type(model) is GDM:
        return GDMLoss()
    if type(model) is GWM:
        return GWMLoss()
    if type(model) is GRSSM:
        return GRSSMLoss()
    return None


def stack_batches(batches: list[Batch], n: int) -> Batch:
    """Member batches padded to ``n`` nodes and stacked on a new leading member axis."""
    padded = [b.pad_nodes(n) for b in batches]
    names = Batch.__dataclass_fields__
    return Batch(**{k: torch.stack([getattr(b, k) for b in padded]) for k in names})


def stack_noise(noises: list[Noise]) -> tuple[Noise, tuple[int | None, ...]]:
    """Stack member noise tuples on a new leading axis; ``None`` entries stay ``None``.
    Returns the stacked tuple and its ``vmap`` in_dims."""
    stacked = tuple(
        None if parts[0] is None else torch.stack(list(parts))
        for parts in zip(*noises, strict=True)
    )
    return stacked, tuple(None if u is None else 0 for u in stacked)
