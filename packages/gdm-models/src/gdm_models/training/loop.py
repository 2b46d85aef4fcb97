"""The one training loop of :func:`~gdm_models.training.trainer.train` (K = 1) and
:func:`~gdm_models.training.ensemble.train_ensemble` (K members), short, with callbacks (after
SB3's ``learn()`` and its callbacks): logging, checkpoints and saving are
:class:`Callback` objects (:mod:`gdm_models.training.callbacks`).

:func:`run_loop` steps an engine (:mod:`gdm_models.training.engines`: the single run is the
loop engine with one member, an ensemble the member engine or the loop engine) from ``start``
to ``total``: each step draws every live member's batch from its own sampler and its noise from
its own generator; a non-finite loss is detected on the device and read on the host only at a
logged or checkpoint step, together with the log rows (one device transfer for all members).
A member found non-finite fails as a single run fails: with ``fail_fast`` (the single run) a
:class:`FloatingPointError` is raised; otherwise ``on_failure`` records it, the engine drops
the member and the others go on unchanged. What differs between a single run and an ensemble
(the checkpoint layout, resuming, the final checkpoints) is in its callbacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..data import EpochSampler
from ..world_model import WorldModel
from .config import TrainConfig
from .step import host_row

__all__ = [
    "Callback",
    "Engine",
    "Members",
    "RunInfo",
    "Schedule",
    "TrainResult",
    "host_rows",
    "run_loop",
]

Terms = dict[str, torch.Tensor]


@dataclass
class TrainResult:
    """Outcome of a training run (of one member of an ensemble)."""

    steps: int
    resumed_from: int
    last_terms: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Members:
    """What the loop trains, member k at index k: its data sampler, its noise generator
    (replaced by the engine's current one after every step), its result, and the label that
    prefixes its failure message (e.g. ``"seed 3: "``)."""

    samplers: list[EpochSampler]
    gens: list[torch.Generator]
    results: Sequence[TrainResult]
    labels: list[str]


@dataclass(frozen=True)
class Schedule:
    """When the loop reads the device: log rows every ``log_every`` steps and at the last
    one; checkpoints every ``checkpoint_every`` steps and at the last one (``None``: never);
    kept models every ``keep_every`` steps (``None``: never)."""

    total: int
    log_every: int
    checkpoint_every: int | None = None
    keep_every: int | None = None

    def due(self, step: int, stop: bool = False) -> tuple[bool, bool, bool]:
        """(log, checkpoint, keep) at ``step`` (``stop``: a callback ends training here)."""
        last = step == self.total or stop
        ckpt = self.checkpoint_every is not None and (step % self.checkpoint_every == 0 or last)
        keep = self.keep_every is not None and step % self.keep_every == 0
        return step % self.log_every == 0 or last, ckpt, keep


@dataclass(frozen=True)
class RunInfo:
    """What a :class:`Callback` is told at ``on_train_start``: member k is ``models[k]`` with
    seed ``seeds[k]`` (a single run: one member, ``config.seed``), trained under ``config``
    from step ``start`` (0, or the step a resumed run continues from) to ``total``."""

    models: list[WorldModel]
    seeds: list[int]
    config: TrainConfig
    start: int
    total: int


class Callback:
    """A hook object of :func:`~gdm_models.training.trainer.train` and
    :func:`~gdm_models.training.ensemble.train_ensemble` (``callbacks=[...]``, after SB3's
    ``learn(callback=...)``); every method does nothing unless overridden. The trainers' own
    behaviours (the CSV and TensorBoard logs, the checkpoints, the progress bar) are callbacks
    too, and run before the caller's, in list order.

    Per step: ``on_step_end``; at a logged step ``on_row`` (or ``on_failure``) per member, then
    ``on_keep`` and ``on_checkpoint`` where due. Member ``k`` is the index into the seeds
    (always 0 for a single run).
    """

    def on_train_start(self, run: RunInfo) -> None:
        """Before the first step (after a resume restored the state)."""

    def on_step_end(self, step: int, losses: Mapping[str, torch.Tensor]) -> bool | None:
        """After training step ``step``. ``losses``: ``loss``, ``grad_norm`` and every loss
        term, each a tensor on the training device with one entry per live member (in seed
        order); reading a value (``float(losses["loss"][0])``) waits for the device, and the
        next step may overwrite them (clone to keep). Return ``False`` to stop training after
        this step (as SB3's ``_on_step``; ``None``, no return, goes on): the step is logged and
        checkpointed as a last step would be, and ``final/`` holds its model."""
        return None

    def on_row(self, k: int, row: Mapping[str, float]) -> None:
        """Member ``k``'s log row (host floats) at a logged step."""

    def on_failure(self, k: int, step: int, message: str) -> None:
        """Member ``k`` was found non-finite at ``step`` (it is dropped after this)."""

    def on_keep(self, step: int, alive: list[int]) -> None:
        """Every ``keep_every`` steps (before that step's checkpoint): keep the models."""

    def on_checkpoint(self, step: int, alive: list[int]) -> None:
        """Every ``checkpoint_every`` steps and at the last, when the run writes a state
        (a caller's callback runs after the state is on disk)."""

    def on_train_end(self, step: int, alive: list[int]) -> None:
        """Training ended at ``step`` (the last, or the one a callback stopped at) with the
        members ``alive``; not called when it raised. Final checkpoints are written here."""

    def close(self) -> None:
        """Always, last (also after an error): release files."""


class Engine(Protocol):
    """What :func:`run_loop` steps (:class:`~gdm_models.training.engines.MemberEngine`,
    :class:`~gdm_models.training.engines.LoopEngine`)."""

    def step(
        self, samplers: Sequence[EpochSampler], gens: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, Terms]: ...

    def current_generator(self, generator: torch.Generator) -> torch.Generator: ...

    def drop(self, ks: Sequence[int]) -> None: ...


def host_rows(
    step: int,
    loss: torch.Tensor,
    gn: torch.Tensor,
    terms: Mapping[str, torch.Tensor],
    bad: torch.Tensor,
) -> list[tuple[dict[str, float], bool]]:
    """Per-member log rows (step, loss, grad_norm, terms) and non-finite flags from [K]
    tensors, in one device transfer."""
    keys = list(terms)
    stacked = torch.stack(
        [loss.detach().float(), gn.detach().float(), bad.float()]
        + [terms[k].detach().float() for k in keys]
    ).cpu()
    out = []
    for i in range(stacked.shape[1]):
        col = stacked[:, i]
        row = host_row(step, col[0], col[1], dict(zip(keys, col[3:], strict=True)))
        out.append((row, bool(col[2])))
    return out


def run_loop(
    engine: Engine,
    members: Members,
    alive: list[int],
    run: RunInfo,
    schedule: Schedule,
    callbacks: Sequence[Callback] = (),
    *,
    fail_fast: bool = False,
    keep_history: bool = False,
    device: torch.device | None = None,
) -> list[int]:
    """Train the members ``alive`` (indices into ``members``) from step ``run.start`` + 1 to
    ``schedule.total`` (or the step an ``on_step_end`` returned ``False`` at), calling
    ``callbacks`` at the steps ``schedule`` names; returns the members still alive.
    ``fail_fast``: a non-finite loss raises :class:`FloatingPointError` (the single run);
    else the member is handed to ``on_failure`` and dropped."""
    alive = list(alive)
    dev = device if device is not None else torch.device("cpu")
    nonfinite = torch.zeros(len(members.samplers), dtype=torch.bool, device=dev)  # no sync
    first_unchecked = step = run.start
    idx: torch.Tensor | None = None  # the live members' positions, rebuilt when one fails
    try:
        for cb in callbacks:
            cb.on_train_start(run)
        while step < schedule.total and alive:
            step += 1
            out = engine.step(
                [members.samplers[k] for k in alive], [members.gens[k] for k in alive]
            )
            for k in alive:  # a failed capture hands fresh generators in the same state
                members.gens[k] = engine.current_generator(members.gens[k])
                members.results[k].steps = step
            idx = torch.tensor(alive, device=dev) if idx is None else idx
            nonfinite[idx] |= ~torch.isfinite(out[0].detach())
            losses = {"loss": out[0], "grad_norm": out[1], **out[2]}
            # every callback sees every step (no short cut once one asked to stop); None (no
            # return statement) goes on, anything false stops
            said = [cb.on_step_end(step, losses) for cb in callbacks]
            stop = any(r is not None and not r for r in said)
            do_log, do_ckpt, do_keep = schedule.due(step, stop)
            if do_log or do_ckpt or do_keep:
                rows = host_rows(step, *out, nonfinite[idx])
                failed = _read_rows(rows, alive, step, first_unchecked + 1, members, callbacks,
                                    do_log, fail_fast, keep_history)  # fmt: skip
                first_unchecked = step
                if failed:
                    engine.drop(failed)
                    alive, idx = [k for k in alive if k not in failed], None
                for cb in callbacks:
                    if do_keep and alive:
                        cb.on_keep(step, alive)
                for cb in callbacks:
                    if do_ckpt:
                        cb.on_checkpoint(step, alive)
            if stop:
                break
        for cb in callbacks:
            cb.on_train_end(step, alive)
    finally:
        for cb in callbacks:
            cb.close()
    return alive


def _read_rows(
    rows: list[tuple[dict[str, float], bool]],
    alive: list[int],
    step: int,
    first_unchecked: int,
    members: Members,
    callbacks: Sequence[Callback],
    do_log: bool,
    fail_fast: bool,
    keep_history: bool,
) -> list[int]:
    """Hand the live members' rows to their results and the callbacks; returns the members
    found non-finite (after ``on_failure``), or raises for one with ``fail_fast``."""
    failed = []
    for k, (row, bad) in zip(alive, rows, strict=True):
        if bad:
            msg = (
                f"{members.labels[k]}non-finite loss between steps {first_unchecked} and "
                f"{step} (last loss {row['loss']}, terms {row})"
            )
            if fail_fast:
                raise FloatingPointError(msg)
            for cb in callbacks:
                cb.on_failure(k, step, msg)
            failed.append(k)
        elif do_log:
            members.results[k].last_terms = row
            if keep_history:
                members.results[k].history.append(row)
            for cb in callbacks:
                cb.on_row(k, row)
    return failed
