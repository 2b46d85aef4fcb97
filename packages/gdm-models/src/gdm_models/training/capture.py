"""A training step with static shapes, captured as one CUDA graph.

On a GPU the eager training step is dispatch-bound: tens of thousands of small kernels, each
launched from Python, while the device mostly idles. :class:`StaticTrainStep` removes the
launch cost without changing the math or needing a compiler (no inductor):

* **static shapes**: every batch is padded to one shape (:class:`StaticShape`: B windows, L
  transitions, N nodes, N the dataset's largest graph). Padded nodes are masked out (as in
  every batch already); a smaller last batch of an epoch gets padding rows that repeat row 0
  with ``step_mask`` False, so every loss term, a masked mean over real transitions, is
  unchanged (:func:`pad_batch`);
* **no host synchronisation**: the model's loss reads its scaler's statistics from device
  copies; gradient clipping, the non-finite check and Adam (``fused``, ``capturable`` on CUDA)
  stay on the device; logged values are read by the trainer every ``log_every`` steps only.
  :func:`~gdm_models.training.host_sync.forbid_host_sync` checks this on any device;
* **one CUDA graph**: after ``warmup`` eager steps on a side stream (real training steps on
  real batches; they also create Adam's state), forward, backward, clipping, Adam and the
  non-finite check are captured once into a ``torch.cuda.CUDAGraph``, with the model's noise
  generator registered with the graph so every replay draws fresh noise; each later step copies
  its batch into the static input buffers and replays the graph.

On a CPU the same object runs the same static-shape step eagerly (no CUDA calls), so the path
is exercised by every test run. When capture fails the step falls back to eager and says why
with one :class:`CaptureFallbackWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar, cast

import torch

from ..data import Batch, EpisodeDataset
from ..world_model import WorldModel
from .host_sync import forbid_host_sync
from .step import StepOutput, train_step

__all__ = [
    "CaptureFallbackWarning",
    "GraphRunner",
    "StaticBuffers",
    "StaticShape",
    "StaticTrainStep",
    "pad_batch",
]

T = TypeVar("T")


class CaptureFallbackWarning(RuntimeWarning):
    """The training step could not be captured as a CUDA graph and runs eagerly."""


@dataclass(frozen=True)
class StaticShape:
    """The one shape every batch of a captured run is padded to."""

    batch_size: int
    seq_len: int
    num_nodes: int

    @classmethod
    def for_dataset(cls, dataset: EpisodeDataset, batch_size: int, seq_len: int) -> StaticShape:
        """L as trained, N the largest node count of ``dataset``, B the batch size or the
        number of episodes if smaller (a batch takes at most one window per episode)."""
        b = min(int(batch_size), len(dataset))
        return cls(b, int(seq_len), int(max(dataset.node_counts)))


def pad_batch(batch: Batch, shape: StaticShape) -> Batch:
    """``batch`` padded to ``shape``: node axes zero-padded (padded nodes masked out), missing
    rows filled with copies of row 0 whose ``step_mask`` is False. Every loss term is a mean
    over the real nodes of the real transitions, so it is unchanged.

    Raises:
        ValueError: when the batch is larger than ``shape`` or its window length differs.
    """
    b, n = batch.batch_size, batch.num_nodes
    if batch.seq_len != shape.seq_len:
        raise ValueError(
            f"batch has L = {batch.seq_len} transitions, static shape L = {shape.seq_len}"
        )
    if b > shape.batch_size or n > shape.num_nodes:
        raise ValueError(
            f"batch of {b} windows x {n} nodes exceeds the static shape "
            f"{shape.batch_size} x {shape.num_nodes}"
        )
    out = batch.pad_nodes(shape.num_nodes)
    extra = shape.batch_size - b
    if extra == 0:
        return out
    rows = {}
    for f in fields(out):
        v = getattr(out, f.name)
        filler = v[:1].expand(extra, *v.shape[1:])
        if f.name == "step_mask":
            filler = torch.zeros_like(filler)
        rows[f.name] = torch.cat([v, filler])
    return Batch(**rows)


class GraphRunner(Generic[T]):
    """Run ``body()`` (a function of static device buffers only) eagerly for ``warmup`` calls,
    then capture it as one CUDA graph and replay it at every later call.

    Warm-up calls run on a side stream (as torch's CUDA-graph notes ask), the last of them
    under :func:`~gdm_models.training.host_sync.forbid_host_sync` (a body that synchronises is named
    and never captured); ``before()`` runs before each eager call and before the capture (the
    trainers' ``zero_grad``, so gradients are allocated in the graph's memory pool). The
    ``generators`` the body draws from are registered with the graph, so every replay draws
    fresh noise from them. A capture that fails warns once (:class:`CaptureFallbackWarning`,
    with the reason) and the body runs eagerly from then on. Off CUDA, or with
    ``capture=False``, every call is eager.
    """

    def __init__(
        self,
        body: Callable[[], T],
        generators: Sequence[torch.Generator],
        device: torch.device,
        *,
        capture: bool,
        warmup: int = 3,
        before: Callable[[], None] = lambda: None,
    ) -> None:
        self.body, self.generators, self.device = body, list(generators), device
        self.cuda = device.type == "cuda"
        self.capture = bool(capture)
        self.warmup = max(1, int(warmup))
        self.before = before
        self.graph: Any = None
        self.outputs: T | None = None
        self.fallback_reason: str | None = None
        self.calls = 0
        #: id of a generator given at construction -> its fresh stand-in after a failed capture
        self.replaced: dict[int, torch.Generator] = {}

    def __call__(self) -> T:
        self.calls += 1
        if self.graph is not None:
            self.graph.replay()
            return cast(T, self.outputs)
        if not self.capture or self.calls < self.warmup:
            return self._eager()
        if self.calls == self.warmup:
            return self._probe()
        return self._capture()

    def _eager(self) -> T:
        self.before()
        if not (self.capture and self.cuda):
            return self.body()
        side = torch.cuda.Stream(device=self.device)  # warm-up off the capture stream
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            out = self.body()
        torch.cuda.current_stream(self.device).wait_stream(side)
        return out

    def _probe(self) -> T:
        """The last warm-up call under :func:`~.host_sync.forbid_host_sync`: a body
        that synchronises cannot be captured, so it is found here, named, and run eagerly,
        before any generator is registered with a graph."""
        try:
            with forbid_host_sync(cuda=self.cuda):
                return self._eager()
        except RuntimeError as err:
            # HostSyncError (the dispatcher's detector), or the plain RuntimeError that CUDA's
            # sync debug mode raises for what the dispatcher cannot see: both mean "cannot
            # be captured"; a genuine error of the body raises again from the eager call
            self._fallback(f"{type(err).__name__}: {err}".splitlines()[0])
            return self._eager()

    def _fallback(self, reason: str) -> None:
        self.capture = False
        self.fallback_reason = reason
        warnings.warn(
            f"CUDA-graph capture of the training step failed; running eagerly ({reason})",
            CaptureFallbackWarning,
            stacklevel=4,
        )

    def _capture(self) -> T:
        """Capture the body as one graph and replay it; eager (with a warning) on failure."""
        states = [g.get_state() for g in self.generators]
        default = _SavedDefaultGenerator(self.device)
        try:
            graph = torch.cuda.CUDAGraph()
            for g in self.generators:
                graph.register_generator_state(g)
            self.before()
            # thread_local: work that other threads of the process launch meanwhile is theirs
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                outputs = self.body()
        except Exception as err:  # noqa: BLE001 - any failure means: run eagerly, say why
            if self.cuda:
                torch.cuda.synchronize(self.device)
            default.restore()  # capture_begin put it in capture mode: a later draw would fail
            # a generator registered with a failed capture cannot draw eagerly any more: go
            # on with fresh ones in the same state (owners read them from self.generators)
            fresh = []
            for g, st in zip(self.generators, states, strict=True):
                new = torch.Generator(device=g.device)
                new.set_state(st)
                self.replaced[id(g)] = new
                fresh.append(new)
            self.generators = fresh
            self._fallback(f"{type(err).__name__}: {err}".splitlines()[0])
            return self._eager()
        self.graph, self.outputs = graph, outputs
        graph.replay()  # capturing records the work without running it
        return outputs

    def current(self, generator: torch.Generator) -> torch.Generator:
        """The generator that now stands for ``generator`` (a fresh one after a failed
        capture, else ``generator`` itself)."""
        return self.replaced.get(id(generator), generator)


class _SavedDefaultGenerator:
    """The state of ``device``'s default generator before a capture, to restore after a
    failed one: a capture registers it with the graph and puts it in capture mode, and a
    capture that fails midway may leave it there (every later draw from it would fail). On
    CUDA its whole state object is swapped back (``graphsafe_set_state``: the capture flag
    included); elsewhere its state is set back."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.saved: Any
        if self.cuda:
            index = device.index if device.index is not None else torch.cuda.current_device()
            self.gen = torch.cuda.default_generators[index]
            self.saved = self.gen.clone_state()
        else:
            self.gen = torch.default_generator
            self.saved = self.gen.get_state()

    def restore(self) -> None:
        if self.cuda:
            self.gen.graphsafe_set_state(self.saved)
        else:
            self.gen.set_state(self.saved)


class StaticBuffers:
    """Device buffers of one static batch, refilled by :meth:`load` (pinned, non-blocking
    host-to-device copies on CUDA)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.batch: Batch | None = None

    def load(self, padded: Batch) -> Batch:
        """Copy ``padded`` (already of the static shape) into the buffers; return them."""
        if self.batch is None:
            self.batch = Batch(
                **{f.name: torch.empty_like(getattr(padded, f.name), device=self.device)
                   for f in fields(padded)}
            )  # fmt: skip
        cuda = self.device.type == "cuda"
        for f in fields(padded):
            src = getattr(padded, f.name)
            getattr(self.batch, f.name).copy_(src.pin_memory() if cuda else src, non_blocking=cuda)
        return self.batch


class StaticTrainStep:
    """One training step (loss, backward, clip, Adam) on batches padded to one static shape,
    replayed as a CUDA graph on CUDA (see the module docstring).

    Args:
        model: the world model (its ``training_loss(batch, generator)`` must not synchronise).
        opt: its optimizer (:func:`~gdm_models.training.step.make_adam`).
        params: the parameters to clip and update.
        generator: the model's noise generator (registered with the graph on CUDA).
        grad_clip: max global gradient norm (``math.inf``: none).
        shape: the static shape.
        autocast_dtype: ``torch.bfloat16`` for bf16 autocast, ``None`` for fp32.
        capture: capture a CUDA graph (only on CUDA; ``None``: when the model is on CUDA).
        warmup: eager steps before the capture (on a side stream).
    """

    def __init__(
        self,
        model: WorldModel,
        opt: torch.optim.Optimizer,
        params: Sequence[torch.nn.Parameter],
        generator: torch.Generator,
        grad_clip: float,
        shape: StaticShape,
        *,
        autocast_dtype: torch.dtype | None = None,
        capture: bool | None = None,
        warmup: int = 3,
    ) -> None:
        self.model, self.opt, self.params = model, opt, list(params)
        self.clip, self.shape = float(grad_clip), shape
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.autocast_dtype = autocast_dtype
        self.buffers = StaticBuffers(self.device)
        cuda = self.device.type == "cuda"
        self.runner: GraphRunner[StepOutput] = GraphRunner(
            self._body,
            [generator],
            self.device,
            capture=cuda if capture is None else bool(capture) and cuda,
            warmup=warmup,
            before=lambda: self.opt.zero_grad(set_to_none=True),
        )

    # the runner's state, for callers and tests
    @property
    def graph(self) -> Any:
        """The captured ``torch.cuda.CUDAGraph`` (``None`` before the capture or eagerly)."""
        return self.runner.graph

    @property
    def generator(self) -> torch.Generator:
        """The model's noise generator (a fresh one in the same state after a failed capture)."""
        return self.runner.generators[0]

    @property
    def calls(self) -> int:
        """Steps run so far."""
        return self.runner.calls

    @property
    def warmup(self) -> int:
        """Eager steps before the capture."""
        return self.runner.warmup

    @property
    def fallback_reason(self) -> str | None:
        """Why the capture failed (``None``: it did not)."""
        return self.runner.fallback_reason

    def _autocast(self) -> Any:
        # no weight-cast cache: cached casts would be freed after the capture (torch's advice)
        return torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
            cache_enabled=False,
        )

    def _step(self, batch: Batch) -> StepOutput:
        """The training step (:func:`~gdm_models.training.step.train_step`) on ``batch``, the
        noise drawn from the runner's generator; nothing leaves the device."""
        return train_step(
            lambda: self.model.training_loss(batch, self.generator),
            self.opt, self.params, self.clip, self._autocast(),
        )  # fmt: skip

    def _body(self) -> StepOutput:
        assert self.buffers.batch is not None  # loaded before every call
        return self._step(self.buffers.batch)

    def _load(self, batch: Batch) -> Batch:
        """Copy ``batch``, padded to the static shape, into the static device buffers."""
        return self.buffers.load(pad_batch(batch, self.shape))

    def __call__(self, batch: Batch) -> StepOutput:
        """Run one training step on ``batch`` (a host batch, padded here); returns the loss, the
        gradient norm before clipping and the loss terms, as device tensors (on CUDA with a
        graph: the graph's output buffers, overwritten by the next step)."""
        self._load(batch)
        return self.runner()
