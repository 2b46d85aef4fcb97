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
from typing import Unpack

from ..data import EpisodeDataset
from ..world_model import WorldModel
from .callbacks import CsvLog, RunCheckpoints
from .config import TrainConfig
from .loop import Callback, TrainResult
from .session import RunOptions, check_call, run_members
from .setup import setup_run
from .state import verify_trainer_state
from .step import PRECISIONS, default_device

__all__ = [
    "train",
    "Callback",
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
    **options: Unpack[RunOptions],
) -> TrainResult:
    """Train ``model`` on ``dataset`` with Adam under ``config`` (every hyperparameter: length,
    batch, learning rate, clipping, seed, device, precision, checkpoint intervals, ...; see
    :class:`~gdm_models.training.config.TrainConfig`). Exactly one of ``config.steps`` and
    ``config.epochs``.

    Args:
        log_csv: CSV path; one row per logged step (every ``config.log_every`` steps and the
            last) with ``step``, ``loss``, ``grad_norm`` and every loss term. A non-finite loss
            is detected on the device and raised at the next logged (or checkpoint) step.
        checkpoint_dir: periodic full-state checkpoints (``latest/``, every
            ``config.checkpoint_every`` steps), a ``final/`` model checkpoint and, with
            ``config.keep_every``, the kept ``step_<6 digits>/`` model checkpoints (written
            before that step's ``latest/``, so a resumed run holds every kept step it passed).
        **options: ``resume`` (default ``True``: continue from ``checkpoint_dir/latest`` if
            present), ``progress`` (``True``: a tqdm bar), ``keep_history`` (``False``; ``True``:
            every logged row in ``TrainResult.history``), ``tensorboard_dir`` (also TensorBoard
            scalars) and ``callbacks`` (:class:`~gdm_models.training.loop.Callback` objects,
            e.g. to stop early); see :class:`~gdm_models.training.session.RunOptions`.

    The old keywords (``steps=``, ``batch_size=``, ...) raise a ``TypeError`` naming the
    ``TrainConfig`` field to use.
    """
    usage = "train(model, dataset, TrainConfig(steps=...))"
    opts = check_call("train", config, options, usage)
    assert config is not None  # checked
    run = setup_run([model], [config.seed], dataset, config, strategy="loop")
    ckpts = RunCheckpoints(Path(checkpoint_dir), run) if checkpoint_dir is not None else None
    result = TrainResult(steps=0, resumed_from=0)
    logs = [Path(log_csv)] if log_csv is not None else None
    run_members(run, [result], ckpts, logs, opts, single=True)
    return result
