"""The ways :func:`gdm_models.ensemble.train_ensemble` steps K members.

* :class:`MemberEngine` (the default wherever the model supports it,
  :attr:`~gdm_models.world_model.WorldModel.supports_members`) - one *member model*
  (:func:`~gdm_models.member_layers.stack_members`: every layer holds the K members'
  parameters on a leading axis) runs the K members' batches folded into one batch,
  member-major; its :meth:`~gdm_models.world_model.WorldModel.member_loss` returns the K
  losses, and one backward of their sum gives each member its own gradients. Per-member
  gradient-norm clipping (:func:`clip_grad_norms_`) and one ``torch.optim.Adam`` over the
  stacked parameters (elementwise, so K Adams) finish the step: about the aten ops of one
  single step at any K.
* :class:`VmapEngine` - the members' parameters stacked ([K, ...], ``torch.func``'s
  ``stack_module_state``); one call of ``vmap(grad_and_value(loss))`` computes the K losses
  and gradients (each member's noise drawn eagerly from its own generator at its own batch
  shape, then padded: :mod:`gdm_models.ensemble_loss`), per-member gradient-norm clipping
  (:func:`clip_grad_norms_`) and one ``torch.optim.Adam`` over the stacked parameters, which
  is elementwise the same as K Adams (the step count is shared: all members step together).
* :class:`LoopEngine` - K ordinary models and K Adams, one
  :func:`gdm_models.train_step.train_step` per member: the single run's step itself.

Both expose each member as an ordinary model plus a ``torch.optim.Adam`` state dict of the
single run's format (:meth:`export`), so the ensemble's checkpoints are per-member
:func:`~gdm_models.trainer.train` states and either engine can resume from them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from .capture import GraphRunner, StaticBuffers, StaticShape, configure_adam, make_adam, pad_batch
from .compiling import compile_or_eager, default_compile_mode
from .data import Batch
from .ensemble_loss import MemberLoss, stack_batches, stack_noise
from .member_layers import member_state, stack_members
from .train_step import batch_to_device, enable_model_compile, train_step
from .world_model import WorldModel

__all__ = ["MemberEngine", "VmapEngine", "LoopEngine", "clip_grad_norms_", "concat_batches"]

Terms = dict[str, torch.Tensor]
OptState = dict[str, Any]


def clip_grad_norms_(grads: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Per-member :func:`torch.nn.utils.clip_grad_norm_` of member-stacked gradients.

    ``grads``: the gradients of all parameters, each [K, ...] (member k's gradient is
    ``g[k]``). Member k's norm is the 2-norm of its per-parameter 2-norms (the formula of
    ``clip_grad_norm_``); its gradients are scaled in place by ``min(1, max_norm / (norm +
    1e-6))``. Returns the K norms before clipping. A member's non-finite norm touches only its
    own gradients (as in ``clip_grad_norm_``, they become non-finite).
    """
    if not grads:
        raise ValueError("clip_grad_norms_ needs at least one gradient")
    k = grads[0].shape[0]
    per_param = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), 2, dim=1) for g in grads])
    norms = torch.linalg.vector_norm(per_param, 2, dim=0)
    coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.reshape(k, *([1] * (g.dim() - 1))))
    return norms


def concat_batches(batches: Sequence[Batch], n: int) -> Batch:
    """Member batches padded to ``n`` nodes and concatenated on the batch axis, member-major
    (the folded batch of a member model)."""
    padded = [b.pad_nodes(n) for b in batches]
    names = Batch.__dataclass_fields__
    return Batch(**{k: torch.cat([getattr(b, k) for b in padded]) for k in names})


def member_opt_state(stacked: Mapping[str, Any], i: int) -> OptState:
    """Member ``i``'s slice of a stacked Adam's state dict: a single Adam's state dict (the
    shared step count stays a scalar)."""
    state = {
        idx: {
            name: v.clone() if name == "step" or not torch.is_tensor(v) else v[i].clone()
            for name, v in st.items()
        }
        for idx, st in stacked["state"].items()
    }
    return {"state": state, "param_groups": copy.deepcopy(stacked["param_groups"])}


def stack_opt_states(states: Sequence[Mapping[str, Any]]) -> OptState:
    """Stack single-Adam state dicts of the members (inverse of :func:`member_opt_state`)."""
    indices = [set(s["state"]) for s in states]
    if any(ix != indices[0] for ix in indices):
        raise ValueError("the members' optimizer states cover different parameters")
    out: dict[Any, dict[str, Any]] = {}
    for idx in indices[0]:
        parts = [s["state"][idx] for s in states]
        entry: dict[str, Any] = {}
        for name, v in parts[0].items():
            if name == "step" or not torch.is_tensor(v):
                if any(
                    not torch.equal(torch.as_tensor(p[name]), torch.as_tensor(v)) for p in parts
                ):
                    raise ValueError("the members' optimizer step counts differ")
                entry[name] = v
            else:
                entry[name] = torch.stack([p[name] for p in parts])
        out[idx] = entry
    return {"state": out, "param_groups": copy.deepcopy(states[0]["param_groups"])}


def _use_tensor_scaler(model: WorldModel) -> None:
    """Give ``model`` (the engine's own copy, never a member's model) a scaler that holds its
    statistics as float64 tensors instead of numpy arrays: the same numbers, and torch.compile
    of vmap(grad) does not trip over guards on numpy constants (a dynamo bug). Every module
    that holds the model's scaler gets it (the GDM's feature encoder keeps its own reference)."""
    old = model.scaler
    sc = copy.copy(old)
    for name in ("node_mean", "node_std", "graph_mean", "graph_std"):
        # on the model's device: no host tensor inside a CUDA graph
        setattr(sc, name, torch.from_numpy(getattr(sc, name)).to(model.device))
    for module in model.modules():
        if getattr(module, "scaler", None) is old:
            # a plain attribute (mypy types module attributes as Tensor | Module)
            module.scaler = sc  # type: ignore[assignment]


class _Bound(nn.Module):
    """``forward`` = the member loss of ``model`` (for ``functional_call``)."""

    def __init__(self, model: WorldModel, loss: MemberLoss) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, batch: Batch, noise: tuple) -> tuple[torch.Tensor, Terms]:
        return self._loss.loss(self.model, batch, noise)


class VmapEngine:
    """K members through ``torch.func.vmap`` (see the module docstring).

    ``models``: the K member models (same class and config, on ``device``); they are the
    members' "shells": the engine trains stacked copies and writes member weights back into
    them on :meth:`export`.
    """

    name = "vmap"

    def __init__(
        self,
        models: Sequence[WorldModel],
        loss: MemberLoss,
        *,
        lr: float,
        clip: float,
        autocast: torch.autocast,
        compile: bool = False,
        static_shape: StaticShape | None = None,
    ) -> None:
        self.models = list(models)
        self.loss, self.lr, self.clip, self.autocast = loss, lr, clip, autocast
        self.compile = compile
        self.device = self.models[0].device
        self.members: list[int] = []
        self._fn: Callable[..., Any] | None = None
        self._bound: _Bound | None = None
        #: with a static shape: batches padded to it, fused Adam, and on CUDA the whole step
        #: (noise, vmapped loss and gradients, clipping, Adam) captured as one CUDA graph
        self.static_shape = static_shape
        if static_shape is not None and compile:
            raise ValueError("a static (captured) step and compile are alternatives")
        self._runner: GraphRunner[tuple[torch.Tensor, torch.Tensor, Terms]] | None = None
        self._static: StaticBuffers | None = None
        self._capture_failed = False

    # ------------------------------------------------------------------ state
    def build(self, members: Sequence[int], opt_states: Mapping[int, OptState] | None) -> None:
        """Stack the weights of ``members`` (read from their models) and a fresh Adam over
        them, loaded with ``opt_states`` (one single-Adam state dict per member) if given."""
        self.members = list(members)
        self._fn = None
        if not self.members:
            return
        shells = [self.models[k] for k in self.members]
        params, buffers = stack_module_state(shells)
        self.names = list(params)
        self.params = {f"model.{k}": v for k, v in params.items()}
        self.buffers = {f"model.{k}": v for k, v in buffers.items()}
        plist = list(self.params.values())
        static = self.static_shape is not None
        self.opt = (
            make_adam(plist, self.lr, self.device)
            if static
            else torch.optim.Adam(plist, lr=self.lr)
        )
        if opt_states is not None:
            self.opt.load_state_dict(stack_opt_states([opt_states[k] for k in self.members]))
            configure_adam(self.opt, fused=static, capturable=static and self.device.type == "cuda")
        self._runner, self._static = None, None  # new stacked tensors: capture again
        bound = self.loss.batched_model(shells[0])
        if self.compile:
            # a copy of its own (the members' models keep their numpy scaler); its parameter
            # values do not matter: functional_call replaces them by the members'
            bound = copy.deepcopy(bound) if bound is shells[0] else bound
            _use_tensor_scaler(bound)
        self._bound = _Bound(bound, self.loss)

    def export(self, k: int) -> tuple[WorldModel, OptState]:
        """Member ``k``'s model (its weights written back) and its single-Adam state dict."""
        i = self.members.index(k)
        state = {n: v[i].detach() for n, v in self.params.items()}
        state.update({n: v[i] for n, v in self.buffers.items()})
        model = self.models[k]
        model.load_state_dict({n.removeprefix("model."): v for n, v in state.items()})
        return model, member_opt_state(self.opt.state_dict(), i)

    def drop(self, ks: Sequence[int]) -> None:
        """Stop training members ``ks`` (the others continue unchanged)."""
        keep = [k for k in self.members if k not in ks]
        states = {k: self.export(k)[1] for k in keep}
        self.build(keep, states)

    # ------------------------------------------------------------------ step
    def _member(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        fields: tuple[torch.Tensor, ...],
        noise: tuple,
    ) -> tuple[torch.Tensor, Terms]:
        batch = Batch(**dict(zip(Batch.__dataclass_fields__, fields, strict=True)))
        with self.autocast:
            assert self._bound is not None  # set by __init__ whenever members are trained
            total, terms = functional_call(self._bound, (params, buffers), (batch, noise))
        return total, terms

    def _vmapped(self, in_noise: tuple) -> Callable[..., Any]:
        if self._fn is None:
            vmapped = vmap(grad_and_value(self._member, has_aux=True), in_dims=(0, 0, 0, in_noise))

            def fn(params: Any, buffers: Any, fields: Any, noise: Any) -> Any:
                return vmapped(params, buffers, fields, noise)  # dynamo traces the transforms

            if self.compile:
                name = f"the vmapped {self.models[0].model_name} ensemble loss"
                mode = default_compile_mode(self.device)
                self._fn = compile_or_eager(fn, name, mode=mode, dynamic=False)
            else:
                self._fn = fn
        return self._fn

    def step(
        self, batches: Sequence[Batch], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """One step of every member; ``batches`` (on the CPU) and ``gens`` in member order.
        Returns the members' losses, gradient norms before clipping and terms, each [K]."""
        if self.static_shape is not None:
            return self._static_step(batches, gens)
        base = self.models[self.members[0]]
        n = max(b.num_nodes for b in batches)
        if self.compile:  # static shapes: a few node counts cover every batch
            mult = base.compile_pad_multiple
            n = -(-n // mult) * mult
        batch = batch_to_device(stack_batches(list(batches), n), self.device)
        noises = [
            self.loss.pad_noise(self.loss.draw_noise(base, b, g), n)
            for b, g in zip(batches, gens, strict=True)
        ]
        noise, in_noise = stack_noise(noises)
        fields = tuple(getattr(batch, k) for k in Batch.__dataclass_fields__)
        return self._update(fields, noise, in_noise)

    def _update(
        self, fields: tuple[torch.Tensor, ...], noise: tuple, in_noise: tuple
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """The vmapped losses and gradients, per-member clipping and one Adam step."""
        fn = self._vmapped(in_noise)
        grads, (loss, terms) = fn(self.params, self.buffers, fields, noise)
        plist = list(self.params.values())
        # functorch's gradients may come transposed (a weight used as W.T); Adam's fused kernel
        # needs each gradient laid out as its parameter (AccumulateGrad does this in the
        # single run), or it reads the wrong elements on a CPU and refuses on CUDA
        glist = [grads[k].detach().contiguous() for k in self.params]
        norms = clip_grad_norms_(glist, self.clip)
        for p, g in zip(plist, glist, strict=True):
            p.grad = g
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss, norms, terms

    def _static_step(
        self, batches: Sequence[Batch], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """:meth:`step` on batches padded to the static shape, its noise drawn at that shape
        inside the step (so a CUDA graph replays it: :class:`~gdm_models.capture.GraphRunner`)."""
        assert self.static_shape is not None
        n = self.static_shape.num_nodes
        host = stack_batches([pad_batch(b, self.static_shape) for b in batches], n)
        if self._static is None:
            self._static = StaticBuffers(self.device)
        self._static.load(host)
        gens = [self.current_generator(g) for g in gens]
        runner = self._runner
        if runner is None or any(a is not b for a, b in zip(runner.generators, gens, strict=True)):
            runner = self._runner = GraphRunner(
                self._static_body,
                gens,
                self.device,
                # once a capture failed, this engine stays eager (the warning was given)
                capture=self.device.type == "cuda" and not self._capture_failed,
                before=lambda: self.opt.zero_grad(set_to_none=True),
            )
        out = runner()
        self._capture_failed |= runner.fallback_reason is not None
        return out

    def _static_body(self) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        assert self._static is not None and self._static.batch is not None
        stacked = self._static.batch
        base = self.models[self.members[0]]
        names = list(Batch.__dataclass_fields__)
        assert self._runner is not None  # the body runs inside it
        noises = [
            self.loss.draw_noise(base, Batch(**{k: getattr(stacked, k)[i] for k in names}), g)
            for i, g in enumerate(self._runner.generators)
        ]
        noise, in_noise = stack_noise(noises)
        return self._update(tuple(getattr(stacked, k) for k in names), noise, in_noise)

    def current_generator(self, generator: torch.Generator) -> torch.Generator:
        """The generator that now stands for a member's ``generator`` (after a failed capture
        a fresh one in the same state: the registered one cannot draw eagerly any more)."""
        if self._runner is None:
            return generator
        return self._runner.current(generator)


class MemberEngine:
    """K members as one member model (see the module docstring).

    ``models``: the K member models (same class and config, on one device); they are the
    members' "shells": :meth:`build` stacks their weights, :meth:`export` writes member k's
    weights back into ``models[k]``. ``autocast`` wraps the loss as in the single run.
    """

    name = "members"

    def __init__(
        self, models: Sequence[WorldModel], *, lr: float, clip: float, autocast: torch.autocast
    ) -> None:
        self.models = list(models)
        if not self.models[0].supports_members:
            raise TypeError(
                f"model {self.models[0].model_name!r} ({type(self.models[0]).__name__}) does "
                "not train as a member model (supports_members is False)"
            )
        self.lr, self.clip, self.autocast = lr, clip, autocast
        self.members: list[int] = []
        self.model: WorldModel | None = None

    def build(self, members: Sequence[int], opt_states: Mapping[int, OptState] | None) -> None:
        """Stack the weights of ``members`` (read from their models) into a member model and
        a fresh Adam over its parameters, loaded with ``opt_states`` (one single-Adam state
        dict per member, in the single run's parameter order) if given."""
        self.members = list(members)
        self.model = None
        if not self.members:
            return
        model = stack_members([self.models[k] for k in self.members])
        assert isinstance(model, WorldModel)  # a copy of a member
        self.model = model
        every = list(model.parameters())  # the single run's Adam spans every parameter
        self.params = [p for p in every if p.requires_grad]  # clipped
        self.opt = torch.optim.Adam(every, lr=self.lr)
        if opt_states is not None:
            self.opt.load_state_dict(stack_opt_states([opt_states[k] for k in self.members]))

    def export(self, k: int) -> tuple[WorldModel, OptState]:
        """Member ``k``'s model (its weights written back) and its single-Adam state dict."""
        assert self.model is not None
        i = self.members.index(k)
        model = self.models[k]
        model.load_state_dict(member_state(self.model, i))
        return model, member_opt_state(self.opt.state_dict(), i)

    def drop(self, ks: Sequence[int]) -> None:
        """Stop training members ``ks``: the member model is rebuilt from the others (their
        numbers continue unchanged)."""
        keep = [k for k in self.members if k not in ks]
        states = {k: self.export(k)[1] for k in keep}
        self.build(keep, states)

    def current_generator(self, generator: torch.Generator) -> torch.Generator:
        """``generator`` itself (nothing is captured here)."""
        return generator

    def step(
        self, batches: Sequence[Batch], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """One step of every member; ``batches`` (on the CPU) and ``gens`` in member order.
        Returns the members' losses, gradient norms before clipping and terms, each [K]."""
        model = self.model
        assert model is not None and len(batches) == len(self.members)
        n = max(b.num_nodes for b in batches)
        batch = batch_to_device(concat_batches(batches, n), model.device)
        # each member draws its own uniforms from its own generator at its own shape, as its
        # single run does; then padded and folded member-major like the batch
        noises = [
            model.pad_member_noise(model.member_noise(b, g), n)
            for b, g in zip(batches, gens, strict=True)
        ]
        noise = tuple(
            None if parts[0] is None else torch.cat(list(parts))
            for parts in zip(*noises, strict=True)
        )
        with self.autocast:
            loss, terms = model.member_loss(batch, noise, len(self.members))
        self.opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # member k's parameters get the gradient of loss[k] alone
        grads = [p.grad for p in self.params if p.grad is not None]
        norms = clip_grad_norms_(grads, self.clip)
        self.opt.step()
        return loss.detach(), norms, terms


class LoopEngine:
    """K ordinary models and K Adams, stepped one after the other (the single run's step)."""

    name = "loop"

    def __init__(
        self,
        models: Sequence[WorldModel],
        *,
        lr: float,
        clip: float,
        autocast: torch.autocast,
        compile: bool = False,
    ) -> None:
        self.models = list(models)
        self.clip, self.autocast = clip, autocast
        self.opts = [torch.optim.Adam(m.parameters(), lr=lr) for m in self.models]
        self.params = [[p for p in m.parameters() if p.requires_grad] for m in self.models]
        self.members: list[int] = []
        if compile:
            for m in self.models:
                enable_model_compile(m)

    def build(self, members: Sequence[int], opt_states: Mapping[int, OptState] | None) -> None:
        """Train ``members`` (their weights are their models'); load ``opt_states`` if given."""
        self.members = list(members)
        for k in self.members:
            if opt_states is not None:
                self.opts[k].load_state_dict(opt_states[k])

    def export(self, k: int) -> tuple[WorldModel, OptState]:
        """Member ``k``'s model and its Adam state dict."""
        return self.models[k], self.opts[k].state_dict()

    def drop(self, ks: Sequence[int]) -> None:
        """Stop training members ``ks``."""
        self.members = [k for k in self.members if k not in ks]

    def current_generator(self, generator: torch.Generator) -> torch.Generator:
        """``generator`` itself (nothing is captured here)."""
        return generator

    def step(
        self, batches: Sequence[Batch], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """One :func:`~gdm_models.train_step.train_step` per member; results stacked [K]."""
        out = []
        for k, b, g in zip(self.members, batches, gens, strict=True):
            m = self.models[k]
            batch = batch_to_device(b, m.device)
            out.append(
                train_step(m, self.opts[k], self.params[k], batch, g, self.clip, self.autocast)
            )
        loss = torch.stack([o[0].detach() for o in out])
        norms = torch.stack([o[1].detach() for o in out])
        terms = {t: torch.stack([o[2][t] for o in out]) for t in out[0][2]}
        return loss, norms, terms
