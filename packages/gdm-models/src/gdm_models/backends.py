"""The backends of the models' steps, and the one place that picks one.

The GDM's equations are written once, in the plain form of its parts
(:mod:`gdm_models.gdm.parts`: concatenated inputs, whole modules; paper section numbers in
comments). A *backend* computes the same functions faster; which one runs is decided here, per
call scope (a context manager) and per device, never by a condition at a call site:

* ``"reference"``: the plain form only. The posterior step is the parts' composition
  (:class:`~gdm_models.gdm.cell.PlainPosteriorStep`), the transition ``LN(GRU)`` of
  :class:`~gdm_models.layers.LayerNormGRU`, the edge MLP on concatenated pair inputs
  (:meth:`~gdm_models.adjacency.EdgeUpdateMLP.forward_plain`), the Hard Concrete gate and
  XOR update as written, dense message passing. Slow; for debugging and for checking a new
  equation against the fast forms. Not for member models (their weights carry a member axis).
* ``"torch"``: the fused torch forms: the posterior step with pre-split weights and fused
  linears (:class:`~gdm_models.gdm.step.PosteriorStep`), flat message passing, the edge MLP
  from per-node projections (dense with autograd, chunked without), PyG-sparse or dense
  message passing in imagination, the gate's event without autograd. No compiled loops.
* ``"compiled"``: ``"torch"`` plus the compiled CPU loops (:mod:`gdm_models.cpu_kernels`,
  numba) where they apply: CPU float32 tensors, autograd off, not inside ``torch.compile``
  (imagination, ``observe``'s neighbour lists, the baselines' draws); elsewhere ``"torch"``.
* ``"auto"`` (the default): ``"compiled"``, i.e. today's choice on every device (on a GPU
  the loops never apply, so it is ``"torch"`` there).

The captured static training step (:mod:`gdm_models.training.capture`) runs whichever backend
is active; ``torch.compile`` (:meth:`~gdm_models.world_model.WorldModel.enable_compile`)
always traces ``"torch"``.

Switch with :func:`use_backend` (it nests; each thread and task has its own)::

    with use_backend("reference"):
        loss, terms = model.training_loss(batch)  # the plain form

This module imports neither numba nor the models, so any module may ask it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

__all__ = ["BACKENDS", "active_backend", "compiled_loops", "plain", "use_backend"]

#: the backend names :func:`use_backend` accepts
BACKENDS: tuple[str, ...] = ("auto", "reference", "torch", "compiled")

_ACTIVE: ContextVar[str] = ContextVar("gdm_models_backend", default="auto")


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the models in backend ``name`` (one of :data:`BACKENDS`) inside the ``with``
    block; the previous choice is restored on exit."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {list(BACKENDS)}")
    token = _ACTIVE.set(name)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_backend() -> str:
    """The backend of the current scope (``"auto"`` unless :func:`use_backend` says)."""
    return _ACTIVE.get()


def plain() -> bool:
    """True when the plain form must run (``"reference"``). Inside ``torch.compile`` always
    False: a compiled loss traces the fused form (the choice is the compile's, made once)."""
    if torch.compiler.is_compiling():
        return False
    return _ACTIVE.get() == "reference"


def compiled_loops(*tensors: torch.Tensor) -> bool:
    """Whether the compiled CPU loops compute a part on ``tensors``: the backend is
    ``"compiled"`` or ``"auto"``, autograd is off, not inside ``torch.compile``, and every
    tensor is a float32 CPU tensor. The training step (autograd on, possibly compiled or
    captured) and every other device keep their torch operations."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    if _ACTIVE.get() not in ("auto", "compiled"):
        return False
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
