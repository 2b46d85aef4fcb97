"""The ways :func:`gdm_models.training.ensemble.train_ensemble` steps K members.

* :class:`MemberEngine` (strategy ``"members"``, the default for every model that is a
  :class:`~gdm_models.member_layers.MemberModel`) - one *member model*
  (:func:`~gdm_models.member_layers.stack_members`: every layer holds the K members' parameters on a
  leading axis) runs the K members' batches folded into one batch, member-major; its
  :meth:`~gdm_models.member_layers.MemberModel.member_loss` returns the K losses, and one
  backward of their sum gives each member exactly its own gradients (no parameter of member k
  touches another member's rows). Per-member gradient-norm clipping
  (:func:`~gdm_models.training.step.clip_grad_norms_`) and one ``torch.optim.Adam`` over the stacked
  parameters (elementwise, so K Adams; the step count is shared: all members step together) finish
  the step: about the aten ops of one single step, at any K. With a static shape the whole step
  (each member's noise, the loss, backward, clipping, Adam) is one CUDA graph on CUDA
  (:class:`~gdm_models.training.capture.GraphRunner`).
* :class:`LoopEngine` (strategy ``"loop"``) - K ordinary models and K Adams, one
  :func:`gdm_models.training.step.train_step` per member: the single run's step itself.

Both expose each member as an ordinary model plus a ``torch.optim.Adam`` state dict of the
single run's format (:meth:`export`), so the ensemble's checkpoints are per-member
:func:`~gdm_models.training.trainer.train` states and either engine can resume from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypedDict, Unpack

import torch

from ..data import Batch, EpisodeDataset, EpochSampler
from ..member_layers import MemberModel, MemberNoise, member_state, stack_members
from ..world_model import WorldModel
from .capture import GraphRunner, StaticBuffers, StaticShape, StaticTrainStep, pad_batch
from .config import TrainConfig
from .members import OptState, concat_batches, member_opt_state, stack_opt_states
from .step import (
    StepOutput,
    batch_to_device,
    configure_adam,
    enable_model_compile,
    make_adam,
    train_step,
)

__all__ = [
    "EngineArgs",
    "LoopArgs",
    "MemberEngine",
    "LoopEngine",
    "make_engine",
    "not_a_member_model",
]

Terms = dict[str, torch.Tensor]


class EngineArgs(TypedDict):
    """The keywords of both engines (:func:`make_engine` derives them from a
    :class:`~gdm_models.training.config.TrainConfig`): Adam's learning rate ``lr``, the
    gradient-norm bound ``clip`` (``math.inf``: none), the loss's ``autocast`` context and
    ``static_shape`` (``None`` or left out: eager steps of each batch's own shape)."""

    lr: float
    clip: float
    autocast: torch.autocast
    static_shape: NotRequired[StaticShape | None]


class LoopArgs(EngineArgs, total=False):
    """:class:`EngineArgs` plus the loop engine's own: ``compile`` (each model's
    ``enable_compile``; left out: eager) and ``static_dtype`` (``torch.bfloat16``: the static
    step under bf16 autocast)."""

    compile: bool
    static_dtype: torch.dtype | None


class MemberEngine:
    """K members as one member model (see the module docstring).

    ``models``: the K member models (same class and config, on one device); they are the
    members' "shells": :meth:`build` stacks their weights, :meth:`export` writes member k's
    weights back into ``models[k]``. ``autocast`` wraps the loss as in the single run.
    ``static_shape``: batches padded to it, fused Adam, each member's noise drawn at that shape
    inside the step, and on CUDA the whole step captured as one CUDA graph (member k then
    equals ``train(..., capture=True)`` of its seed, up to float rounding).

    Raises:
        TypeError: for a model that is not a :class:`~gdm_models.member_layers.MemberModel`.
    """

    name = "members"

    def __init__(self, models: Sequence[WorldModel], **args: Unpack[EngineArgs]) -> None:
        self.models = list(models)
        if not isinstance(self.models[0], MemberModel):
            raise TypeError(not_a_member_model(self.models[0]))
        self.lr, self.clip, self.autocast = args["lr"], args["clip"], args["autocast"]
        self.device = self.models[0].device
        self.static_shape = args.get("static_shape")
        self.members: list[int] = []
        self.model: MemberModel | None = None
        self._runner: GraphRunner[tuple[torch.Tensor, torch.Tensor, Terms]] | None = None
        self._static: StaticBuffers | None = None
        self._capture_failed = False

    # ------------------------------------------------------------------ state
    def build(self, members: Sequence[int], opt_states: Mapping[int, OptState] | None) -> None:
        """Stack the weights of ``members`` (read from their models) into a member model and
        a fresh Adam over its parameters, loaded with ``opt_states`` (one single-Adam state
        dict per member, in the single run's parameter order) if given."""
        self.members = list(members)
        self.model = None
        # new stacked tensors, and static buffers of the new K x B rows: warm up and capture
        # again (a member dropped under a static shape leaves (K - 1) x B rows)
        self._runner = None
        self._static = None
        if not self.members:
            return
        model = stack_members([self.models[k] for k in self.members])
        assert isinstance(model, MemberModel)  # a copy of a member (checked in __init__)
        self.model = model
        every = list(model.parameters())  # the single run's Adam spans every parameter
        self.params = [p for p in every if p.requires_grad]  # clipped and updated
        static = self.static_shape is not None
        self.opt = make_adam(every, self.lr, self.device, static)
        if opt_states is not None:
            self.opt.load_state_dict(stack_opt_states([opt_states[k] for k in self.members]))
            # the saved states may come from the other step implementation
            configure_adam(self.opt, fused=static, capturable=static and self.device.type == "cuda")

    def export(self, k: int) -> tuple[WorldModel, OptState]:
        """Member ``k``'s model (its weights written back) and its single-Adam state dict:
        an ordinary single-model training state."""
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
        """The generator that now stands for a member's ``generator`` (after a failed capture
        a fresh one in the same state: the registered one cannot draw eagerly any more)."""
        if self._runner is None:
            return generator
        return self._runner.current(generator)

    # ------------------------------------------------------------------ step
    def step(
        self, samplers: Sequence[EpochSampler], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """One step of every member: each draws its next batch from its own sampler (of one
        dataset) and its noise from its own generator, in member order. Returns the members'
        losses, gradient norms before clipping and terms, each [K]."""
        model = self.model
        assert model is not None and len(samplers) == len(self.members)
        windows = [s.next_windows() for s in samplers]
        if len({len(w) for w in windows}) > 1:
            raise ValueError("the members' batches differ in size (different batch sizes?)")
        data, seq_len = samplers[0].dataset, samplers[0].seq_len
        if self.static_shape is not None:
            return self._static_step([data.make_batch(w, seq_len) for w in windows], gens)
        # the folded batch: every member's windows in one batch, member-major, padded to the
        # largest graph (padded nodes are masked out of every loss term)
        folded = data.make_batch([w for ws in windows for w in ws], seq_len)
        batch = batch_to_device(folded, self.device)
        # each member draws its own uniforms from its own generator at its own shape, as its
        # single run does; then padded and folded member-major like the batch
        n = batch.num_nodes
        noises = [
            model.pad_member_noise(
                model.member_noise((len(ws), seq_len, max(data.node_counts[e] for e, _ in ws)), g),
                n,
            )
            for ws, g in zip(windows, gens, strict=True)
        ]
        return self._update(batch, noises)

    def _update(self, batch: Batch, noises: Sequence[MemberNoise]) -> StepOutput:
        """The training step (:func:`~gdm_models.training.step.train_step`) of the member
        model: the K losses, one backward, per-member clipping, one Adam step."""
        model = self.model
        assert model is not None
        noise = tuple(
            None if parts[0] is None else torch.cat(list(parts))
            for parts in zip(*noises, strict=True)
        )
        k = len(self.members)
        return train_step(
            lambda: model.member_loss(batch, noise, k),
            self.opt, self.params, self.clip, self.autocast, members=k,
        )  # fmt: skip

    def _static_step(
        self, batches: Sequence[Batch], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """:meth:`step` on batches padded to the static shape, the noise drawn at that shape
        inside the step (so a CUDA graph replays it:
        :class:`~gdm_models.training.capture.GraphRunner`)."""
        assert self.static_shape is not None
        n = self.static_shape.num_nodes
        host = concat_batches([pad_batch(b, self.static_shape) for b in batches], n)
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
        assert self.model is not None and self.static_shape is not None
        assert self._runner is not None  # the body runs inside it
        batch = self._static.batch
        b = self.static_shape.batch_size  # every member's batch has the static shape
        shape = (b, self.static_shape.seq_len, self.static_shape.num_nodes)
        noises = [self.model.member_noise(shape, g) for g in self._runner.generators]
        return self._update(batch, noises)


def not_a_member_model(model: WorldModel) -> str:
    """Why ``model`` cannot train with the member engine (for the error a caller raises)."""
    return (
        f"model {model.model_name!r} ({type(model).__name__}) does not train as a member "
        "model: its class does not inherit gdm_models.member_layers.MemberModel (docs/models.md, "
        "\"Adding a model\"); train its ensembles with strategy='loop' or 'auto'"
    )


class LoopEngine:
    """K ordinary models and K Adams, stepped one after the other: the single run's step
    (:func:`~gdm_models.training.step.train_step`; a single run is this engine with K = 1).

    ``static_shape``: each member's step is a :class:`~gdm_models.training.capture.StaticTrainStep`
    (batches padded to that shape, fused Adam, one CUDA graph on CUDA), with bf16 autocast when
    ``static_dtype`` is ``torch.bfloat16``. ``compile``: each model's ``enable_compile``.
    """

    name = "loop"

    def __init__(self, models: Sequence[WorldModel], **args: Unpack[LoopArgs]) -> None:
        static_shape, compile = args.get("static_shape"), bool(args.get("compile"))
        if static_shape is not None and compile:
            raise ValueError("capture and compile are alternatives: ask for one of them")
        self.models = list(models)
        lr, self.clip, self.autocast = args["lr"], args["clip"], args["autocast"]
        self.static_shape, self.static_dtype = static_shape, args.get("static_dtype")
        self.device = self.models[0].device
        # Adam over every parameter, as the single run's: its state dict indexes them all
        every = [list(m.parameters()) for m in self.models]
        self.opts = [make_adam(e, lr, self.device, static_shape is not None) for e in every]
        self.params = [[p for p in m.parameters() if p.requires_grad] for m in self.models]
        self.members: list[int] = []
        self._static: dict[int, StaticTrainStep] = {}
        if compile:
            for m in self.models:
                enable_model_compile(m)

    def build(self, members: Sequence[int], opt_states: Mapping[int, OptState] | None) -> None:
        """Train ``members`` (their weights are their models'); load ``opt_states`` if given."""
        self.members = list(members)
        static = self.static_shape is not None
        for k in self.members:
            if opt_states is not None:
                self.opts[k].load_state_dict(opt_states[k])
                # the saved state may come from the other step implementation
                cuda = self.device.type == "cuda"
                configure_adam(self.opts[k], fused=static, capturable=static and cuda)

    def export(self, k: int) -> tuple[WorldModel, OptState]:
        """Member ``k``'s model and its Adam state dict."""
        return self.models[k], self.opts[k].state_dict()

    def drop(self, ks: Sequence[int]) -> None:
        """Stop training members ``ks``."""
        self.members = [k for k in self.members if k not in ks]

    def current_generator(self, generator: torch.Generator) -> torch.Generator:
        """The generator that now stands for ``generator`` (after a failed capture a fresh one
        in the same state; else ``generator`` itself)."""
        for st in self._static.values():
            current = st.runner.current(generator)
            if current is not generator:
                return current
        return generator

    def _static_step(self, k: int, generator: torch.Generator) -> StaticTrainStep:
        """Member ``k``'s static step, made at its first call with its generator."""
        assert self.static_shape is not None
        st = self._static.get(k)
        if st is None or st.generator is not generator:
            st = self._static[k] = StaticTrainStep(
                self.models[k], self.opts[k], self.params[k], generator, self.clip,
                self.static_shape, autocast_dtype=self.static_dtype,
            )  # fmt: skip
        return st

    def step(
        self, samplers: Sequence[EpochSampler], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]:
        """One :func:`~gdm_models.training.step.train_step` (or static step) per member on its
        sampler's next batch; results stacked [K]."""
        out = []
        for k, s, g in zip(self.members, samplers, gens, strict=True):
            m = self.models[k]
            if self.static_shape is not None:
                out.append(self._static_step(k, g)(s.next_batch()))
                continue
            batch = batch_to_device(s.next_batch(), m.device)
            loss_fn = lambda m=m, batch=batch, g=g: m.training_loss(batch, generator=g)  # noqa: E731
            out.append(train_step(loss_fn, self.opts[k], self.params[k], self.clip, self.autocast))
        loss = torch.stack([o[0].detach() for o in out])
        norms = torch.stack([o[1].detach() for o in out])
        terms = {t: torch.stack([o[2][t] for o in out]) for t in out[0][2]}
        return loss, norms, terms


def make_engine(
    models: Sequence[WorldModel],
    dataset: EpisodeDataset,
    config: TrainConfig,
    strategy: str = "loop",
) -> MemberEngine | LoopEngine:
    """The engine that :func:`~gdm_models.training.trainer.train` (``strategy="loop"``, one
    model) and :func:`~gdm_models.training.ensemble.train_ensemble` step, from ``config``'s
    ``batch_size``, ``seq_len``, ``lr``, ``grad_clip``, ``precision``, ``compile`` and
    ``capture``, for ``models`` already on their device; what a benchmark or a cost estimate
    times to time the trainers' step.

    ``capture=None``: the static (captured) step on CUDA unless ``compile``.
    """
    c = config
    device = models[0].device
    static = (device.type == "cuda" and not c.compile) if c.capture is None else c.capture
    if static and c.compile:
        raise ValueError("capture and compile are alternatives: ask for one of them")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=c.precision == "bf16")
    clip = math.inf if c.grad_clip is None else float(c.grad_clip)
    shape = StaticShape.for_dataset(dataset, c.batch_size, c.seq_len) if static else None
    if strategy == "members":
        return MemberEngine(models, lr=c.lr, clip=clip, autocast=autocast, static_shape=shape)
    return LoopEngine(
        models, lr=c.lr, clip=clip, autocast=autocast, compile=c.compile, static_shape=shape,
        static_dtype=torch.bfloat16 if c.precision == "bf16" else None,
    )  # fmt: skip
