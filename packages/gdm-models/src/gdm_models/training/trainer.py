"""Generic trainer for any :class:`~gdm_models.world_model.WorldModel` (paper, "Training Details").

Adam, gradient-norm clipping, batches of B windows of L transitions drawn epoch-wise from an
:class:`~gdm_models.data.EpisodeDataset` (see :class:`~gdm_models.data.EpochSampler`),
deterministic under a seed, tqdm progress bar, one CSV row of loss terms per step, periodic
checkpoints and exact resume. The trainer only calls ``model.training_loss(batch, generator)``.
A single run is :func:`~gdm_models.training.ensemble.train_ensemble` with K = 1 member: the
same setup (:func:`~gdm_models.training.setup.setup_run`, the loop engine) and the same loop
(:mod:`gdm_models.training.loop`); only its callbacks differ (the checkpoint layout below,
:class:`~gdm_models.training.callbacks.RunCheckpoints`, and a non-finite loss raises).

Checkpoint layout (``checkpoint_dir``)::

    latest/            model checkpoint (weights.safetensors + checkpoint.json)
                       + trainer_state.pt (optimizer state, torch generator state; loaded
                         with weights_only=True) + trainer_state.json (step, sampler state,
                         training arguments)
    final/             model checkpoint written at the end of training
    step_000100/       with ``config.keep_every``: the model checkpoint of every k-th step, kept

Resuming (``resume=True`` and ``latest/`` present) restores model, optimizer, data sampler and
model-noise generator states and the step counter, so an interrupted run continues exactly as
an uninterrupted one would (same weights bit for bit on the same device). The CSV log is
truncated to the resumed step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data import EpisodeDataset
from ..world_model import WorldModel
from .callbacks import CsvLog, Logs, RunCheckpoints
from .config import TrainConfig, old_keywords_error
from .loop import Members, Schedule, TrainResult, run_loop
from .setup import setup_run, torch_threads
from .state import verify_trainer_state
from .step import PRECISIONS, default_device
from .tensorboard_log import tee

__all__ = [
    "train",
    "TrainConfig",
    "TrainResult",
    "CsvLog",
    "PRECISIONS",
    "default_device",
    "verify_trainer_state",
]


def train(
    model: WorldModel,
    dataset: EpisodeDataset,
    config: TrainConfig | None = None,
    *,
    log_csv: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    keep_history: bool = False,
    tensorboard_dir: str | Path | None = None,
    **old: Any,
) -> TrainResult:
    """Train ``model`` on ``dataset`` with Adam under ``config`` (every hyperparameter: length,
    batch, learning rate, clipping, seed, device, precision, checkpoint intervals, ...; see
    :class:`~gdm_models.training.config.TrainConfig`). Exactly one of ``config.steps`` and
    ``config.epochs``. The keywords say where the run's outputs go:

    Args:
        log_csv: CSV path; one row per logged step (every ``config.log_every`` steps and the
            last) with ``step``, ``loss``, ``grad_norm`` and every loss term. A non-finite loss
            is detected on the device and raised at the next logged (or checkpoint) step.
        checkpoint_dir: periodic full-state checkpoints (``latest/``, every
            ``config.checkpoint_every`` steps), a ``final/`` model checkpoint and, with
            ``config.keep_every``, the kept ``step_<6 digits>/`` model checkpoints (written
            before that step's ``latest/``, so a resumed run holds every kept step it passed).
        resume: continue from ``checkpoint_dir/latest`` if present.
        progress: show a tqdm progress bar.
        keep_history: also return every logged row in ``TrainResult.history``.
        tensorboard_dir: also write each logged row as TensorBoard scalars (``train/loss``,
            ...) into this folder (needs the ``gdm-models[tensorboard]`` extra); the CSV stays
            the record.

    The old keywords (``steps=``, ``batch_size=``, ...) raise a ``TypeError`` naming the
    ``TrainConfig`` field to use.
    """
    if old or config is None:
        raise (
            old_keywords_error("train", old)
            if old
            else TypeError(
                "train() needs a TrainConfig: train(model, dataset, TrainConfig(steps=...))"
            )
        )
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    c = config
    run = setup_run([model], [c.seed], dataset, c, strategy="loop")
    ckpts = RunCheckpoints(Path(checkpoint_dir), run) if checkpoint_dir is not None else None
    start, opt_states = ckpts.resume() if ckpts is not None and resume else (0, None)
    run.engine.build([0], opt_states)
    log = tee(
        CsvLog(log_csv, start, c.log_every) if log_csv is not None else None, tensorboard_dir, start
    )
    result = TrainResult(steps=start, resumed_from=start)
    schedule = Schedule(
        run.total, c.log_every,
        c.checkpoint_every if ckpts is not None else None,
        c.keep_every if ckpts is not None else None,
    )  # fmt: skip
    callbacks = [Logs([log]), *([ckpts] if ckpts is not None else [])]
    members = Members(run.samplers, run.gens, [result], [""])
    with torch_threads(c.threads):
        run_loop(run.engine, members, [0], start, schedule, callbacks, fail_fast=True,
                 keep_history=keep_history, progress=progress, device=run.device)  # fmt: skip
    return result
