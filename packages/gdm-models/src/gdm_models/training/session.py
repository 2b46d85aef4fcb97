"""What :func:`~gdm_models.training.trainer.train` and
:func:`~gdm_models.training.ensemble.train_ensemble` share: the keywords of a run besides where
its outputs go (:class:`RunOptions`, checked by :func:`check_call` before any work) and the run
itself once its members and checkpoints are set up (:func:`run_members`: resume, logs, the
schedule, the callbacks, the loop)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from .callbacks import CsvLog, EnsembleCheckpoints, Guarded, Logs, ProgressBar, RunCheckpoints
from .config import TrainConfig, old_keywords_error
from .loop import Callback, Members, RunInfo, Schedule, TrainResult, run_loop
from .setup import RunSetup, torch_threads
from .tensorboard_log import tee_members

__all__ = ["Options", "RunOptions", "check_call", "run_members"]


class RunOptions(TypedDict, total=False):
    """The keywords that ``train`` and ``train_ensemble`` share, each optional.

    Attributes:
        resume: continue from the run's ``latest/`` if present (default ``True``).
        progress: show a tqdm progress bar (default ``True``).
        keep_history: also return every logged row in the result's ``history`` (default
            ``False``).
        tensorboard_dir: also write each logged row as TensorBoard scalars (``train/loss``,
            ...) into this folder, an ensemble's member ``seed<s>`` into ``<dir>/seed<s>/``
            (needs the ``gdm-models[tensorboard]`` extra; the CSV stays the record).
        callbacks: a :class:`~gdm_models.training.loop.Callback` or a list of them, called
            after the trainer's own (logs, checkpoints, progress bar) at every hook; an
            ``on_step_end`` that returns ``False`` stops the run; one that raises stops it
            with a :class:`~gdm_models.training.callbacks.CallbackError` naming it.
    """

    resume: bool
    progress: bool
    keep_history: bool
    tensorboard_dir: str | Path | None
    callbacks: Callback | Sequence[Callback] | None


@dataclass(frozen=True)
class Options:
    """:class:`RunOptions` checked, with their defaults."""

    resume: bool = True
    progress: bool = True
    keep_history: bool = False
    tensorboard_dir: str | Path | None = None
    callbacks: tuple[Callback, ...] = ()


def check_call(
    fn: str, config: TrainConfig | None, options: Mapping[str, Any], usage: str
) -> Options:
    """The options of a call of ``fn`` with ``config``, checked before any work: a
    :class:`TypeError` for a missing or wrong config (``usage``: how to call ``fn``), an old
    hyperparameter keyword (naming the ``TrainConfig`` field), an unknown keyword or a callback
    that is not a :class:`~gdm_models.training.loop.Callback`."""
    wrong = {k: v for k, v in options.items() if k not in RunOptions.__annotations__}
    if wrong:
        raise old_keywords_error(fn, wrong)
    if config is None:
        raise TypeError(f"{fn}() needs a TrainConfig: {usage}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    given = dict(options)
    cbs = given.pop("callbacks", None)
    cbs = () if cbs is None else (cbs,) if isinstance(cbs, Callback) else cbs
    if not isinstance(cbs, Sequence) or isinstance(cbs, str):
        raise TypeError(f"callbacks must be a Callback or a list of them, got {cbs!r}")
    for i, cb in enumerate(cbs):
        if not isinstance(cb, Callback):
            raise TypeError(
                f"callbacks[{i}] must be a gdm_models.training.Callback (subclass it and "
                f"override its hooks), got {type(cb).__name__}"
            )
    return Options(**given, callbacks=tuple(cbs))


def run_members(
    run: RunSetup,
    results: Sequence[TrainResult],
    ckpts: RunCheckpoints | EnsembleCheckpoints | None,
    logs: Sequence[Path] | None,
    opts: Options,
    *,
    single: bool,
) -> list[int]:
    """Train the set-up ``run`` (member k's outcome into ``results[k]``, its CSV log to
    ``logs[k]``): resume from ``ckpts`` (with ``opts.resume``), then the loop with the logs,
    ``ckpts``, the progress bar and the caller's callbacks. ``single``: a single run (a
    non-finite loss raises; TensorBoard into ``tensorboard_dir`` itself), else an ensemble
    (a diverged member is dropped). Returns the members alive at the end."""
    c = run.config
    start, opt_states = ckpts.resume() if ckpts is not None and opts.resume else (0, None)
    failed = ckpts.failed if isinstance(ckpts, EnsembleCheckpoints) else {}
    alive = [k for k in range(len(run.seeds)) if k not in failed]
    run.engine.build(alive, opt_states)
    for r in results:
        r.steps = r.resumed_from = start
    names = [""] if single else [f"seed{s}" for s in run.seeds]
    csv_logs = [CsvLog(p, start, c.log_every) for p in logs] if logs is not None else None
    writers = tee_members(csv_logs, opts.tensorboard_dir, names, start)
    schedule = Schedule(
        run.total, c.log_every,
        c.checkpoint_every if ckpts is not None and ckpts.saves_state else None,
        c.keep_every if ckpts is not None and ckpts.keeps else None,
    )  # fmt: skip
    callbacks: list[Callback] = [Logs(writers or [None] * len(run.seeds))]
    callbacks += [ckpts] if ckpts is not None else []
    callbacks += [ProgressBar()] if opts.progress else []
    callbacks += [Guarded(cb) for cb in opts.callbacks]
    labels = [""] if single else [f"seed {s}: " for s in run.seeds]
    members = Members(run.samplers, run.gens, results, labels)
    info = RunInfo(run.models, run.seeds, c, start, run.total)
    with torch_threads(c.threads):
        return run_loop(run.engine, members, alive, info, schedule, callbacks, fail_fast=single,
                        keep_history=opts.keep_history, device=run.device)  # fmt: skip
