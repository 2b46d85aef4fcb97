"""Generic trainer for any :class:`~gdm_models.world_model.WorldModel` (paper, "Training Details").

Adam, gradient-norm clipping, batches of B windows of L transitions drawn epoch-wise from an
:class:`~gdm_models.data.EpisodeDataset` (see :class:`~gdm_models.data.EpochSampler`),
deterministic under a seed, tqdm progress bar, one CSV row of loss terms per step, periodic
checkpoints and exact resume. The trainer only calls ``model.training_loss(batch, generator)``.

Checkpoint layout (``checkpoint_dir``)::

    latest/            model checkpoint (weights.safetensors + checkpoint.json)
                       + trainer_state.pt (optimizer state, torch generator state; loaded
                         with weights_only=True) + trainer_state.json (step, sampler state,
                         training arguments)
    final/             model checkpoint written at the end of training

Resuming (``resume=True`` and ``latest/`` present) restores model, optimizer, data sampler and
model-noise generator states and the step counter, so an interrupted run continues exactly as
an uninterrupted one would (same weights bit for bit on the same device). The CSV log is
truncated to the resumed step.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from .checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    save_checkpoint,
    seal_checkpoint,
    verify_checkpoint,
)
from .compiling import CompileFallbackWarning
from .data import Batch, EpisodeDataset, EpochSampler
from .tensorboard_log import tee
from .world_model import WorldModel

__all__ = [
    "train",
    "TrainResult",
    "CsvLog",
    "PRECISIONS",
    "default_device",
    "verify_trainer_state",
]

TRAINER_STATE_FILES = ("trainer_state.pt", "trainer_state.json")


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class TrainResult:
    """Outcome of :func:`train`."""

    steps: int
    resumed_from: int
    last_terms: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


def _seeds(seed: int) -> tuple[int, int]:
    ss = np.random.SeedSequence(seed)
    a, b = ss.generate_state(2, dtype=np.uint64)
    return int(a >> 1), int(b >> 1)


def _write_trainer_state(
    path: Path,
    model: WorldModel,
    opt_state: Mapping[str, Any],
    gen_state: torch.Tensor,
    sampler_state: Mapping[str, Any],
    step: int,
    args: Mapping[str, Any],
) -> None:
    """Write a full trainer state into the new directory ``path``: the model checkpoint plus
    ``trainer_state.pt`` (optimizer and generator states) and ``trainer_state.json`` (step,
    sampler state, training arguments), sealed into the checkpoint's digest."""
    save_checkpoint(model, path)
    torch.save({"optimizer": opt_state, "generator": gen_state.cpu()}, path / "trainer_state.pt")
    (path / "trainer_state.json").write_text(
        json.dumps({"step": step, "sampler": dict(sampler_state), "args": dict(args)})
    )
    seal_checkpoint(path, TRAINER_STATE_FILES)  # the digest covers the trainer state too


def _replace_dir(tmp: Path, target: Path) -> None:
    """Move the finished directory ``tmp`` to ``target``, replacing it; the previous one is
    kept as ``.<name>_old`` until the new one is in place (a cut-short save leaves it)."""
    old = target.parent / f".{target.name}_old"
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    if old.exists():
        shutil.rmtree(old)


@contextlib.contextmanager
def _replacing_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh empty ``.<name>_tmp`` next to ``target``; once the body has written it,
    it replaces ``target`` (:func:`_replace_dir`). A save killed midway leaves ``target``
    untouched (or, between the two renames, only ``.<name>_old``), never a half-written one."""
    tmp = target.parent / f".{target.name}_tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    _replace_dir(tmp, target)


def _save_trainer_state(
    ckdir: Path,
    model: WorldModel,
    opt: torch.optim.Optimizer,
    sampler: EpochSampler,
    gen: torch.Generator,
    step: int,
    args: Mapping[str, Any],
) -> None:
    with _replacing_dir(ckdir / "latest") as tmp:
        _write_trainer_state(
            tmp, model, opt.state_dict(), gen.get_state(), sampler.state_dict(), step, args
        )


def verify_trainer_state(path: str | Path) -> dict[str, Any]:
    """Check that ``path`` is a complete, intact trainer state; return its
    ``trainer_state.json`` (step, sampler state, training arguments).

    The checkpoint must verify (:func:`~gdm_models.checkpoint.verify_checkpoint`: weights,
    manifest and the sealed trainer state), hold both trainer-state files, and they must load
    as resuming loads them (``trainer_state.pt`` with ``weights_only=True``, so a pickle is
    refused).

    Raises:
        CheckpointError: naming the checkpoint and what is wrong with it.
    """
    path = Path(path)
    manifest = verify_checkpoint(path)
    for name in TRAINER_STATE_FILES:
        if name not in manifest["files"]:
            raise CheckpointError(f"checkpoint {path} holds no trainer state ({name})")
    try:
        torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=True)
        meta = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
        step = int(meta["step"])
    except Exception as err:  # any failure to load is a corrupt state
        raise CheckpointError(
            f"trainer state in {path} does not load ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(meta.get("args"), dict) or step < 0:
        raise CheckpointError(f"trainer state in {path} holds no step or arguments")
    return meta


@dataclass
class _TrainerState:
    """A trainer state read back by :func:`_read_trainer_state` (weights on the model's
    device)."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    generator: torch.Tensor
    sampler: dict[str, Any]
    step: int


def _read_trainer_state(latest: Path, model: WorldModel, args: Mapping[str, Any]) -> _TrainerState:
    """Verify and read the trainer state in ``latest`` for ``model`` trained with ``args``."""
    manifest = verify_checkpoint(latest)  # weights, config, scaler and trainer state
    if manifest["model_name"] != model.model_name or manifest["config"] != model.config_dict():
        raise CheckpointError(
            f"cannot resume from {latest}: it holds a different model "
            f"({manifest['model_name']!r}) or config"
        )
    if manifest["schema"] != model.schema.to_dict():
        raise CheckpointError(f"cannot resume from {latest}: schema differs")
    meta = json.loads((latest / "trainer_state.json").read_text())
    saved_args = meta.get("args", {})
    for k in ("batch_size", "seq_len", "seed"):
        if k in saved_args and saved_args[k] != args[k]:
            raise CheckpointError(
                f"cannot resume: {k}={args[k]} differs from the checkpoint's {saved_args[k]}"
            )
    weights = load_file(str(latest / WEIGHTS_FILE), device=str(model.device))
    ts = torch.load(latest / "trainer_state.pt", map_location=model.device, weights_only=True)
    return _TrainerState(
        weights, ts["optimizer"], ts["generator"].cpu(), meta["sampler"], int(meta["step"])
    )


def _load_trainer_state(
    latest: Path,
    model: WorldModel,
    opt: torch.optim.Optimizer,
    sampler: EpochSampler,
    gen: torch.Generator,
    args: Mapping[str, Any],
) -> int:
    st = _read_trainer_state(latest, model, args)
    model.load_state_dict(st.weights, strict=True)
    opt.load_state_dict(st.optimizer)
    gen.set_state(st.generator)
    sampler.load_state_dict(st.sampler)
    return st.step


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


PRECISIONS = ("fp32", "bf16")


def _to_device(batch: Batch, device: torch.device) -> Batch:
    """Batch on ``device``; to CUDA through pinned memory without blocking the host."""
    if device.type != "cuda":
        return batch.to(device)
    return Batch(
        **{
            f.name: getattr(batch, f.name).pin_memory().to(device, non_blocking=True)
            for f in fields(batch)
        }
    )


def _enable_compile(model: WorldModel) -> None:
    enable = getattr(model, "enable_compile", None)
    if enable is None:
        warnings.warn(
            f"torch.compile: model {model.model_name!r} has no compiled path; running eager",
            CompileFallbackWarning,
            stacklevel=3,
        )
        return
    enable()


def _host_row(
    step: int, loss: torch.Tensor, gn: torch.Tensor, terms: Mapping[str, Any]
) -> dict[str, float]:
    """One log row, pulled from the device in a single transfer."""
    keys = list(terms)
    vals = [loss.detach().float(), gn.detach().float()] + [
        torch.as_tensor(terms[k], dtype=torch.float32, device=loss.device) for k in keys
    ]
    host = torch.stack([v.reshape(()) for v in vals]).tolist()
    row = {"step": step, "loss": host[0], "grad_norm": host[1]}
    row.update(zip(keys, host[2:], strict=True))
    return row


def _train_step(
    model: WorldModel,
    opt: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    batch: Batch,
    gen: torch.Generator,
    clip: float,
    autocast: torch.autocast,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """One optimisation step (loss, backward, gradient-norm clipping, Adam); returns the loss,
    the gradient norm before clipping and the loss terms (all on the device)."""
    with autocast:
        loss, terms = model.training_loss(batch, generator=gen)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    return loss, gn, terms


def _check_train_args(
    dataset: Any,
    steps: int | None,
    epochs: int | None,
    precision: str,
    log_every: int,
    checkpoint_every: int,
) -> None:
    """The argument checks :func:`train` and :func:`~gdm_models.ensemble.train_ensemble`
    share (a clear exception naming the bad argument)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if int(log_every) < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps= or epochs=")
    if not isinstance(dataset, EpisodeDataset):
        raise TypeError("dataset must be an EpisodeDataset")
    if checkpoint_every < 1:
        raise ValueError("checkpoint_every must be >= 1")


def train(
    model: WorldModel,
    dataset: EpisodeDataset,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 8,
    seq_len: int = 20,
    lr: float = 1e-3,
    grad_clip: float | None = 100.0,
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
    tensorboard_dir: str | Path | None = None,
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
        tensorboard_dir: also write each logged row as TensorBoard scalars (``train/loss``,
            ...) into this folder (:mod:`gdm_models.tensorboard_log`; needs the
            ``gdm-models[tensorboard]`` extra); the CSV stays the record.
    """
    _check_train_args(dataset, steps, epochs, precision, log_every, checkpoint_every)
    if not dataset.schema.same_features(model.schema):
        raise ValueError("dataset schema does not match the model schema")
    device = default_device() if device is None else torch.device(device)
    model.to(device)
    data_seed, noise_seed = _seeds(seed)
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
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    args = {"batch_size": batch_size, "seq_len": seq_len, "seed": seed, "lr": lr}

    start = 0
    ckdir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if ckdir is not None:
        ckdir.mkdir(parents=True, exist_ok=True)
        if resume and (ckdir / "latest" / "trainer_state.json").is_file():
            start = _load_trainer_state(ckdir / "latest", model, opt, sampler, gen, args)

    log = tee(
        CsvLog(log_csv, start, log_every) if log_csv is not None else None, tensorboard_dir, start
    )
    if compile:
        _enable_compile(model)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    params = [p for p in model.parameters() if p.requires_grad]
    clip = math.inf if grad_clip is None else grad_clip

    result = TrainResult(steps=start, resumed_from=start)
    model.train()
    bar = tqdm(total=total, initial=start, disable=not progress, desc="train", dynamic_ncols=True)
    nonfinite = torch.zeros((), dtype=torch.bool, device=device)  # on the device: no sync
    first_unchecked = start + 1
    try:
        for step in range(start + 1, total + 1):
            batch = _to_device(sampler.next_batch(), device)
            loss, gn, terms = _train_step(model, opt, params, batch, gen, clip, autocast)
            nonfinite |= ~torch.isfinite(loss.detach())
            result.steps = step
            do_log = step % log_every == 0 or step == total
            ck_here = ckdir if step % checkpoint_every == 0 or step == total else None
            if do_log or ck_here is not None:
                if bool(nonfinite):
                    raise FloatingPointError(
                        f"non-finite loss between steps {first_unchecked} and {step} "
                        f"(last loss {loss.item()}, terms {_host_row(step, loss, gn, terms)})"
                    )
                first_unchecked = step + 1
            if do_log:
                row = _host_row(step, loss, gn, terms)
                result.last_terms = row
                if keep_history:
                    result.history.append(row)
                if log is not None:
                    log.write(row)
                if progress:
                    bar.set_postfix(loss=f"{row['loss']:.4g}")
            bar.update(1)
            if ck_here is not None:
                if log is not None:
                    log.flush()
                _save_trainer_state(ck_here, model, opt, sampler, gen, step, args)
    finally:
        bar.close()
        if log is not None:
            log.close()
    if ckdir is not None:
        save_checkpoint(model, ckdir / "final")
    return result
