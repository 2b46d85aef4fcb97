"""Generic trainer for any :class:`~gdm_models.api.WorldModel` (paper, "Training Details").

Adam, gradient-norm clipping, batches of B windows of L transitions drawn epoch-wise from an
:class:`~gdm_models.data.EpisodeDataset` (see :class:`~gdm_models.data.EpochSampler`),
deterministic under a seed, tqdm progress bar, one CSV row of loss terms per step, periodic
checkpoints and exact resume. The trainer only calls ``model.loss(batch, generator)``.

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

import csv
import json
import math
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from .api import WorldModel
from .checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    save_checkpoint,
    seal_checkpoint,
    verify_checkpoint,
)
from .data import EpisodeDataset, EpochSampler

__all__ = ["train", "TrainResult", "default_device"]

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


def _save_trainer_state(
    ckdir: Path,
    model: WorldModel,
    opt: torch.optim.Optimizer,
    sampler: EpochSampler,
    gen: torch.Generator,
    step: int,
    args: Mapping[str, Any],
) -> None:
    tmp = ckdir / ".latest_tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(model, tmp)
    torch.save(
        {"optimizer": opt.state_dict(), "generator": gen.get_state().cpu()},
        tmp / "trainer_state.pt",
    )
    (tmp / "trainer_state.json").write_text(
        json.dumps({"step": step, "sampler": sampler.state_dict(), "args": dict(args)})
    )
    seal_checkpoint(tmp, TRAINER_STATE_FILES)  # the digest covers the trainer state too
    latest = ckdir / "latest"
    old = ckdir / ".latest_old"
    if old.exists():
        shutil.rmtree(old)
    if latest.exists():
        os.replace(latest, old)
    os.replace(tmp, latest)
    if old.exists():
        shutil.rmtree(old)


def _load_trainer_state(
    latest: Path,
    model: WorldModel,
    opt: torch.optim.Optimizer,
    sampler: EpochSampler,
    gen: torch.Generator,
    args: Mapping[str, Any],
) -> int:
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
    state = load_file(str(latest / WEIGHTS_FILE), device=str(model.device))
    model.load_state_dict(state, strict=True)
    ts = torch.load(latest / "trainer_state.pt", map_location=model.device, weights_only=True)
    opt.load_state_dict(ts["optimizer"])
    gen.set_state(ts["generator"].cpu())
    sampler.load_state_dict(meta["sampler"])
    return int(meta["step"])


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
        log_csv: CSV path; one row per step with ``step``, ``loss`` and every loss term.
        checkpoint_dir, checkpoint_every: periodic full-state checkpoints (``latest/``) and a
            ``final/`` model checkpoint.
        resume: continue from ``checkpoint_dir/latest`` if present.
        progress: show a tqdm progress bar.
        keep_history: also return every logged row in ``TrainResult.history``.
    """
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps= or epochs=")
    if not isinstance(dataset, EpisodeDataset):
        raise TypeError("dataset must be an EpisodeDataset")
    if not dataset.schema.same_features(model.schema):
        raise ValueError("dataset schema does not match the model schema")
    if checkpoint_every < 1:
        raise ValueError("checkpoint_every must be >= 1")
    device = default_device() if device is None else torch.device(device)
    model.to(device)
    data_seed, noise_seed = _seeds(seed)
    sampler = EpochSampler(dataset, batch_size, seq_len, seed=data_seed)
    total = int(steps) if steps is not None else int(epochs) * sampler.batches_per_epoch
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

    writer = None
    fh = None
    fieldnames: list[str] | None = None
    if log_csv is not None:
        log_csv = Path(log_csv)
        log_csv.parent.mkdir(parents=True, exist_ok=True)
        if start > 0 and log_csv.is_file():
            with open(log_csv, newline="") as f:
                rows = list(csv.DictReader(f))
            if rows:
                fieldnames = list(rows[0].keys())
            rows = [r for r in rows if int(r["step"]) <= start]
            with open(log_csv, "w", newline="") as f:
                if fieldnames:
                    w = csv.DictWriter(f, fieldnames=fieldnames)
                    w.writeheader()
                    w.writerows(rows)
        elif log_csv.exists():
            log_csv.unlink()
        fh = open(log_csv, "a", newline="")

    result = TrainResult(steps=start, resumed_from=start)
    model.train()
    bar = tqdm(total=total, initial=start, disable=not progress, desc="train", dynamic_ncols=True)
    try:
        for step in range(start + 1, total + 1):
            batch = sampler.next_batch().to(device)
            loss, terms = model.loss(batch, generator=gen)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {loss.item()} at step {step}: {terms}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            else:
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
            opt.step()
            row = {"step": step, "loss": float(loss.item()), "grad_norm": float(gn.item())}
            row.update({k: float(v) for k, v in terms.items()})
            result.last_terms = row
            if keep_history:
                result.history.append(row)
            if fh is not None:
                if writer is None:
                    fieldnames = fieldnames or list(row.keys())
                    writer = csv.DictWriter(fh, fieldnames=fieldnames, extrasaction="ignore")
                    if fh.tell() == 0:
                        writer.writeheader()
                writer.writerow(row)
            bar.update(1)
            if progress:
                bar.set_postfix(loss=f"{row['loss']:.4g}")
            result.steps = step
            if ckdir is not None and (step % checkpoint_every == 0 or step == total):
                if fh is not None:
                    fh.flush()
                _save_trainer_state(ckdir, model, opt, sampler, gen, step, args)
    finally:
        bar.close()
        if fh is not None:
            fh.close()
    if ckdir is not None:
        save_checkpoint(model, ckdir / "final")
    return result
