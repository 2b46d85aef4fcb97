"""The one training loop of :func:`~gdm_models.training.trainer.train` (K = 1) and
:func:`~gdm_models.training.ensemble.train_ensemble` (K members).

:func:`run_loop` steps an engine (:mod:`gdm_models.training.engines`: the single run is the
loop engine with one member, an ensemble the member engine or the loop engine) from ``start``
to ``total``: each step draws every live member's batch from its own sampler and its noise from
its own generator; a non-finite loss is detected on the device and read on the host only at a
logged or checkpoint step, together with the log rows (one device transfer for all members).
A member found non-finite fails as a single run fails: with ``fail_fast`` (the single run) a
:class:`FloatingPointError` is raised; otherwise ``on_failure`` records it, the engine drops
the member and the others go on unchanged. The callers keep what differs: their arguments,
resume, the checkpoint layout (``save``) and the final checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from tqdm.auto import tqdm

from ..data import EpochSampler
from .step import host_row
from .tensorboard_log import LogWriter

__all__ = ["Engine", "TrainResult", "run_loop", "host_rows"]

Terms = dict[str, torch.Tensor]


@dataclass
class TrainResult:
    """Outcome of a training run (of one member of an ensemble)."""

    steps: int
    resumed_from: int
    last_terms: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


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
    samplers: Sequence[EpochSampler],
    gens: list[torch.Generator],
    results: Sequence[TrainResult],
    alive: list[int],
    *,
    start: int,
    total: int,
    log_every: int,
    checkpoint_every: int | None,
    save: Callable[[int, list[int]], None] | None = None,
    keep_every: int | None = None,
    keep: Callable[[int, list[int]], None] | None = None,
    logs: Sequence[LogWriter] | None = None,
    keep_history: bool = False,
    progress: bool = False,
    desc: str = "train",
    fail_fast: bool = False,
    on_failure: Callable[[int, int, str], None] | None = None,
    labels: Sequence[str] | None = None,
    device: torch.device | None = None,
) -> list[int]:
    """Train the members ``alive`` (indices into ``samplers``, ``gens``, ``results`` and
    ``logs``) from step ``start`` + 1 to ``total``; returns the members still alive.

    ``gens[k]`` is replaced by the engine's current generator of member k after every step
    (a fresh one after a failed CUDA-graph capture). ``save(step, alive)`` writes the state at
    every ``checkpoint_every`` steps and at the last step (``checkpoint_every=None``: never),
    after the logs are flushed. ``keep(step, alive)`` keeps the live members' models at every
    ``keep_every`` steps (the GDD curve's checkpoints), before that step's ``save``, so a
    resumed run has every kept step. ``labels[k]`` prefixes member k's failure message (e.g.
    ``"seed 3: "``). ``fail_fast``: raise :class:`FloatingPointError` for a non-finite loss;
    else ``on_failure(k, step, message)`` and the member is dropped.
    """
    alive = list(alive)
    n = len(samplers)
    dev = device if device is not None else torch.device("cpu")
    bar = tqdm(total=total, initial=start, disable=not progress, desc=desc, dynamic_ncols=True)
    nonfinite = torch.zeros(n, dtype=torch.bool, device=dev)  # on the device: no sync
    first_unchecked = start + 1
    idx: torch.Tensor | None = None
    try:
        for step in range(start + 1, total + 1):
            if not alive:
                break
            loss, gn, terms = engine.step([samplers[k] for k in alive], [gens[k] for k in alive])
            for k in alive:  # a failed capture hands fresh generators in the same state
                gens[k] = engine.current_generator(gens[k])
            if idx is None:  # the live members' positions, rebuilt when one fails
                idx = torch.tensor(alive, device=dev)
            nonfinite[idx] |= ~torch.isfinite(loss.detach())
            for k in alive:
                results[k].steps = step
            do_log = step % log_every == 0 or step == total
            do_ckpt = checkpoint_every is not None and (
                step % checkpoint_every == 0 or step == total
            )
            do_keep = keep is not None and keep_every is not None and step % keep_every == 0
            if not (do_log or do_ckpt or do_keep):
                bar.update(1)
                continue
            rows = host_rows(step, loss, gn, terms, nonfinite[idx])
            newly_failed = []
            for k, (row, bad) in zip(alive, rows, strict=True):
                if bad:
                    label = labels[k] if labels is not None else ""
                    msg = (
                        f"{label}non-finite loss between steps {first_unchecked} and {step} "
                        f"(last loss {row['loss']}, terms {row})"
                    )
                    if fail_fast or on_failure is None:
                        raise FloatingPointError(msg)
                    on_failure(k, step, msg)
                    newly_failed.append(k)
                    continue
                if do_log:
                    results[k].last_terms = row
                    if keep_history:
                        results[k].history.append(row)
                    if logs is not None:
                        logs[k].write(row)
            first_unchecked = step + 1
            if newly_failed:
                engine.drop(newly_failed)
                alive = [k for k in alive if k not in newly_failed]
                idx = None
            if do_log and progress and alive:
                bar.set_postfix(loss=f"{sum(r['loss'] for r, _ in rows) / len(rows):.4g}")
            bar.update(1)
            if do_keep and keep is not None and alive:
                keep(step, alive)
            if do_ckpt and save is not None:
                if logs is not None:
                    for log in logs:
                        log.flush()
                save(step, alive)
    finally:
        bar.close()
        if logs is not None:
            for log in logs:
                log.close()
    return alive
