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
  message passing in imagination, the gate's event without autograd; every graph's pairwise
  block computed with a SiLU per pair and hidden unit. No compiled loops.
* ``"compiled"``: ``"torch"`` plus imagination's shortcuts, each the same function:
  bitwise-equal graphs' pairwise edge-MLP blocks computed once (``share_identical``), on the
  CPU the pairwise SiLUs from per-node exponentials (``exp_split``) and the compiled CPU loops
  (``loops``: :mod:`gdm_models.cpu_kernels`, numba) where they apply: CPU float32 tensors,
  autograd off, not inside ``torch.compile`` (imagination, ``observe``'s neighbour lists, the
  baselines' draws); elsewhere ``"torch"``.
* ``"auto"`` (the default): ``"compiled"``, i.e. today's choice on every device (on a GPU
  the loops and the split SiLU never apply).

Which edge-MLP form runs (plain, dense or chunked) is :func:`edge_mlp_form`'s answer: the
plain form in ``"reference"``, dense with autograd, chunked without. The captured static
training step (:mod:`gdm_models.training.capture`) runs whichever backend
is active; ``torch.compile`` (:meth:`~gdm_models.world_model.WorldModel.enable_compile`)
always traces ``"torch"``.

Switch with :func:`use_backend` (it nests; each thread and task has its own)::

    with use_backend("reference"):
        loss, terms = model.training_loss(batch)  # the plain form

A benchmark or test may turn one shortcut off, keeping the others:
``use_backend("compiled", loops=False)`` (the torch blocks with the split SiLU).

This module imports neither numba nor the models, so any module may ask it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

__all__ = [
    "BACKENDS",
    "Backend",
    "active_backend",
    "compiled_loops",
    "edge_mlp_form",
    "exp_split",
    "plain",
    "share_identical",
    "use_backend",
]


@dataclasses.dataclass(frozen=True)
class Backend:
    """What a backend switches on (module docstring); :func:`use_backend` sets one."""

    name: str
    #: the fused torch forms (False: the plain form, ``"reference"``)
    fused: bool
    #: no-grad edge MLP: the pairwise block of bitwise-equal graphs computed once
    share_identical: bool
    #: no-grad edge MLP on the CPU: the pairwise SiLUs from per-node exponentials
    exp_split: bool
    #: the compiled CPU loops (:mod:`gdm_models.cpu_kernels`) where they apply
    loops: bool


_SETTINGS: dict[str, Backend] = {
    "auto": Backend("auto", True, True, True, True),
    "reference": Backend("reference", False, False, False, False),
    "torch": Backend("torch", True, False, False, False),
    "compiled": Backend("compiled", True, True, True, True),
}

#: the backend names :func:`use_backend` accepts
BACKENDS: tuple[str, ...] = tuple(_SETTINGS)

_ACTIVE: ContextVar[Backend] = ContextVar("gdm_models_backend", default=_SETTINGS["auto"])
_SWITCHES = ("share_identical", "exp_split", "loops")


@contextmanager
def use_backend(name: str, **switches: bool) -> Iterator[None]:
    """Run the models in backend ``name`` (one of :data:`BACKENDS`) inside the ``with``
    block; the previous choice is restored on exit. ``switches`` turn single shortcuts of a
    fused backend on or off (``share_identical``, ``exp_split``, ``loops``; benchmarks and
    tests of one shortcut)."""
    if name not in _SETTINGS:
        raise ValueError(f"unknown backend {name!r}; known: {list(BACKENDS)}")
    bad = sorted(set(switches) - set(_SWITCHES))
    if bad:
        raise ValueError(f"unknown backend switches {bad}; known: {list(_SWITCHES)}")
    if switches and name == "reference":
        raise ValueError("the reference backend has no shortcuts to switch")
    base = _SETTINGS[name]
    on = {k: switches.get(k, getattr(base, k)) for k in _SWITCHES}
    token = _ACTIVE.set(Backend(base.name, base.fused, **on))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_backend() -> str:
    """The backend of the current scope (``"auto"`` unless :func:`use_backend` says)."""
    return _ACTIVE.get().name


def plain() -> bool:
    """True when the plain form must run (``"reference"``). Inside ``torch.compile`` always
    False: a compiled loss traces the fused form (the choice is the compile's, made once)."""
    if torch.compiler.is_compiling():
        return False
    return not _ACTIVE.get().fused


def compiled_loops(*tensors: torch.Tensor) -> bool:
    """Whether the compiled CPU loops compute a part on ``tensors``: the backend's ``loops``
    are on (``"compiled"``, ``"auto"``), autograd is off, not inside ``torch.compile``, and every
    tensor is a float32 CPU tensor. The training step (autograd on, possibly compiled or
    captured) and every other device keep their torch operations."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    if not _ACTIVE.get().loops:
        return False
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def share_identical() -> bool:
    """Whether the no-grad edge MLP computes the pairwise block of bitwise-equal graphs once
    (the kappa samples of one imagination share their node states)."""
    return _ACTIVE.get().share_identical


def exp_split(device: torch.device) -> bool:
    """Whether the no-grad edge MLP takes the pairwise SiLUs from per-node exponentials: on
    the CPU only, where the exponential is the cost (a GPU's launches stay as they were)."""
    return _ACTIVE.get().exp_split and device.type == "cpu"


def edge_mlp_form() -> str:
    """The edge MLP's form for this call: ``"plain"`` (``"reference"``), ``"dense"`` (with
    autograd: training) or ``"chunked"`` (without: imagination, on every device)."""
    if plain():
        return "plain"
    return "dense" if torch.is_grad_enabled() else "chunked"
