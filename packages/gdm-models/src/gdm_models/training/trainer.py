"""Generic trainer for any :class:`~gdm_models.world_model.WorldModel` (paper, "Training Details").

Adam, gradient-norm clipping, batches of B windows of L transitions drawn epoch-wise from an
:class:`~gdm_models.data.EpisodeDataset` (see :class:`~gdm_models.data.EpochSampler`),
deterministic under a seed, tqdm progress bar, one CSV row of loss terms per step, periodic
checkpoints and exact resume. The trainer only calls ``model.training_loss(batch, generator)``.
A single run is the one training loop of :mod:`gdm_models.training.loop` with K = 1 member
(the loop engine, :class:`~gdm_models.training.engines.LoopEngine`), the loop that
:func:`~gdm_models.training.ensemble.train_ensemble` runs for K members.

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

import csv
from collections.abc import Mapping
from pathlib import Path

import torch

from ..data import EpisodeDataset, EpochSampler
from ..world_model import WorldModel
from .checkpoint import kept_checkpoint_dir, save_checkpoint
from .engines import DEFAULT_GRAD_CLIP, make_engine
from .loop import TrainResult, run_loop
from .state import (
    read_trainer_state,
    replacing_dir,
    verify_trainer_state,
    write_trainer_state,
)
from .step import PRECISIONS, check_train_args, default_device, run_seeds
from .tensorboard_log import tee

__all__ = [
    "train",
    "TrainResult",
    "CsvLog",
    "PRECISIONS",
    "default_device",
    "verify_trainer_state",
]


class CsvLog:
    """CSV log with one row per logged step (``step``, ``loss``, ``grad_norm``, loss terms).

    On resume (``resume_step > 0``) the rows up to ``resume_step`` on the ``log_every`` grid
    are kept (an interrupted run's extra last-step row is dropped, so the file equals that of
    an uninterrupted run) and the column order of the existing file is reused; otherwise an
    existing file is replaced.
    """

    def __init__(self, path: str | Path, resume_step: int = 0, log_every: int = 1) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fieldnames: list[str] | None = None
        if resume_step > 0 and self.path.is_file():
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
            if rows:
                self.fieldnames = list(rows[0].keys())
            rows = [
                r for r in rows if int(r["step"]) <= resume_step and int(r["step"]) % log_every == 0
            ]
            with open(self.path, "w", newline="") as f:
                if self.fieldnames:
                    w = csv.DictWriter(f, fieldnames=self.fieldnames)
                    w.writeheader()
                    w.writerows(rows)
        elif self.path.exists():
            self.path.unlink()
        self._fh = open(self.path, "a", newline="")
        self._writer: csv.DictWriter | None = None

    def write(self, row: Mapping[str, float]) -> None:
        """Append one row and flush it (the first row fixes the columns of a new file)."""
        if self._writer is None:
            self.fieldnames = self.fieldnames or list(row.keys())
            self._writer = csv.DictWriter(self._fh, self.fieldnames, extrasaction="ignore")
            if self._fh.tell() == 0:
                self._writer.writeheader()
        self._writer.writerow(row)
        self._fh.flush()  # a row reaches the disk when logged, so `tail -f` follows the run

    def flush(self) -> None:
        """Flush to disk."""
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


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
    check_train_args(dataset, steps, epochs, precision, log_every, checkpoint_every, keep_every)
    if not dataset.schema.same_features(model.schema):
        raise ValueError("dataset schema does not match the model schema")
    device = default_device() if device is None else torch.device(device)
    model.to(device)
    data_seed, noise_seed = run_seeds(seed)
    sampler = EpochSampler(dataset, batch_size, seq_len, seed=data_seed)
    if steps is not None:
        total = int(steps)
    else:
        assert epochs is not None  # exactly one of them is given (checked above)
        total = int(epochs) * sampler.batches_per_epoch
    if total < 0:
        raise ValueError("steps/epochs must be non-negative")
    gen = torch.Generator(device=device)
    gen.manual_seed(noise_seed)
    # the single run is the one training loop with K = 1 member: the loop engine
    engine = make_engine(
        [model], dataset, batch_size=batch_size, seq_len=seq_len, lr=lr, grad_clip=grad_clip,
        precision=precision, compile=compile, capture=capture,
    )  # fmt: skip
    args = {"batch_size": batch_size, "seq_len": seq_len, "seed": seed, "lr": lr}

    start = 0
    opt_states = None
    ckdir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckdir is not None:
        ckdir.mkdir(parents=True, exist_ok=True)
        if resume and (ckdir / "latest" / "trainer_state.json").is_file():
            st = read_trainer_state(ckdir / "latest", model, args)
            model.load_state_dict(st.weights, strict=True)
            opt_states = {0: st.optimizer}
            gen.set_state(st.generator)
            sampler.load_state_dict(st.sampler)
            start = st.step
    engine.build([0], opt_states)
    gens = [gen]

    def save(step: int, alive: list[int]) -> None:
        assert ckdir is not None
        _, opt_state = engine.export(0)
        state = (gens[0].get_state(), sampler.state_dict())
        with replacing_dir(ckdir / "latest") as tmp:
            write_trainer_state(tmp, model, opt_state, *state, step, args)

    def keep(step: int, alive: list[int]) -> None:
        assert ckdir is not None
        save_checkpoint(model, kept_checkpoint_dir(ckdir, step))

    log = tee(
        CsvLog(log_csv, start, log_every) if log_csv is not None else None, tensorboard_dir, start
    )
    result = TrainResult(steps=start, resumed_from=start)
    model.train()
    run_loop(
        engine, [sampler], gens, [result], [0],
        start=start, total=total, log_every=log_every,
        checkpoint_every=checkpoint_every if ckdir is not None else None,
        save=save if ckdir is not None else None,
        keep_every=keep_every if ckdir is not None else None,
        keep=keep,
        logs=[log] if log is not None else None,
        keep_history=keep_history, progress=progress, desc="train", fail_fast=True,
        device=device,
    )  # fmt: skip
    if ckdir is not None:
        save_checkpoint(model, ckdir / "final")
    return result
