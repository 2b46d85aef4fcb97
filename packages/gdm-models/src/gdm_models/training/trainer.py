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
    step_000100/       with ``keep_every``: the model checkpoint of every k-th step, kept

Resuming (``resume=True`` and ``latest/`` present) restores model, optimizer, data sampler and
model-noise generator states and the step counter, so an interrupted run continues exactly as
an uninterrupted one would (same weights bit for bit on the same device). The CSV log is
truncated to the resumed step.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data import EpisodeDataset
from ..world_model import WorldModel
from .callbacks import CsvLog, Logs, RunCheckpoints
from .engines import DEFAULT_GRAD_CLIP
from .loop import Members, Schedule, TrainResult, run_loop
from .setup import setup_run
from .state import verify_trainer_state
from .step import PRECISIONS, default_device
from .tensorboard_log import tee

__all__ = [
    "train",
    "TrainResult",
    "CsvLog",
    "PRECISIONS",
    "default_device",
    "verify_trainer_state",
]


def train(
    model: WorldModel,
    dataset: EpisodeDataset,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 8,
    seq_len: int = 20,
    lr: float = 1e-3,
    grad_clip: float | None = DEFAULT_GRAD_CLIP,
    seed: int = 0,
    device: torch.device | str | None = None,
    log_csv: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 1000,
    resume: bool = True,
    progress: bool = True,
    keep_history: bool = False,
    precision: str = "fp32",
    compile: bool = False,
    log_every: int = 1,
    capture: bool | None = None,
    tensorboard_dir: str | Path | None = None,
    keep_every: int | None = None,
) -> TrainResult:
    """Train ``model`` on ``dataset`` with Adam.

    Args:
        steps / epochs: training length (exactly one must be given); an epoch visits every
            episode once (``ceil(len(dataset) / batch_size)`` steps).
        batch_size, seq_len: B windows of L transitions per step (paper: 8 and 20).
        lr: Adam learning rate. grad_clip: max global gradient norm (``None`` = no clipping).
        seed: seeds the data sampler and the model's noise generator (model initialisation is
            the caller's business: seed torch before building the model).
        device: ``None`` -> CUDA when available else CPU.
        log_csv: CSV path; one row per logged step with ``step``, ``loss``, ``grad_norm`` and
            every loss term.
        checkpoint_dir, checkpoint_every: periodic full-state checkpoints (``latest/``) and a
            ``final/`` model checkpoint.
        resume: continue from ``checkpoint_dir/latest`` if present.
        progress: show a tqdm progress bar.
        keep_history: also return every logged row in ``TrainResult.history``.
        precision: "fp32", or "bf16" (the forward pass under bf16 autocast; parameters,
            gradients and the optimizer stay fp32).
        compile: run the model's training step through ``torch.compile`` where the model
            supports it (the GDM); falls back to eager with a one-line
            :class:`~gdm_models.compiling.CompileFallbackWarning` when it cannot.
        log_every: pull the loss terms to the host (CSV row, progress bar, history) only every
            ``log_every`` steps and at the last step; in between the step never waits for the
            device. A non-finite loss is detected on the device and raised at the next logged
            (or checkpoint) step.
        capture: the static-shape step of :mod:`gdm_models.training.capture` (batches padded to one
            shape, fused Adam, no host synchronisation), captured as one CUDA graph on CUDA.
            ``None`` (default): on CUDA unless ``compile``; ``True`` on a CPU runs the same
            static-shape step eagerly. Its numbers equal the eager step's up to float rounding
            (fused Adam) and the noise of padded shapes.
        tensorboard_dir: also write each logged row as TensorBoard scalars (``train/loss``,
            ...) into this folder (:mod:`gdm_models.training.tensorboard_log`; needs the
            ``gdm-models[tensorboard]`` extra); the CSV stays the record.
        keep_every: also keep the model checkpoint (weights only, as ``final/``) of every
            step that is a multiple of ``keep_every`` in ``checkpoint_dir/step_<6 digits>``
            (:func:`~gdm_models.training.checkpoint.kept_checkpoint_dir`), e.g. to evaluate it
            later. It is written before that step's ``latest/``, so a resumed run holds every kept
            step it passed. ``None``: keep none.
    """
    run = setup_run(
        [model], [seed], dataset, steps=steps, epochs=epochs, batch_size=batch_size,
        seq_len=seq_len, lr=lr, grad_clip=grad_clip, precision=precision, compile=compile,
        capture=capture, strategy="loop", device=device, log_every=log_every,
        checkpoint_every=checkpoint_every, keep_every=keep_every,
    )  # fmt: skip
    ckpts = RunCheckpoints(Path(checkpoint_dir), run) if checkpoint_dir is not None else None
    start, opt_states = ckpts.resume() if ckpts is not None and resume else (0, None)
    run.engine.build([0], opt_states)
    log = tee(
        CsvLog(log_csv, start, log_every) if log_csv is not None else None, tensorboard_dir, start
    )
    result = TrainResult(steps=start, resumed_from=start)
    schedule = Schedule(
        run.total, log_every,
        checkpoint_every if ckpts is not None else None,
        keep_every if ckpts is not None else None,
    )  # fmt: skip
    callbacks = [Logs([log]), *([ckpts] if ckpts is not None else [])]
    members = Members(run.samplers, run.gens, [result], [""])
    run_loop(run.engine, members, [0], start, schedule, callbacks, fail_fast=True,
             keep_history=keep_history, progress=progress, device=run.device)  # fmt: skip
    return result
