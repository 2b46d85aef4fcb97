"""The pieces of one training step shared by :func:`~gdm_models.trainer.train` and the
ensemble engines: the eager step (loss, backward, clipping, Adam), batches to the device, the
host log row, argument checks, and the seeds a run derives from its seed."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from .compiling import CompileFallbackWarning
from .data import Batch, EpisodeDataset
from .world_model import WorldModel

__all__ = [
    "PRECISIONS",
    "batch_to_device",
    "check_train_args",
    "default_device",
    "enable_model_compile",
    "host_row",
    "run_seeds",
    "train_step",
]


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_seeds(seed: int) -> tuple[int, int]:
    """The data-sampler seed and the model-noise seed a run derives from its ``seed``."""
    ss = np.random.SeedSequence(seed)
    a, b = ss.generate_state(2, dtype=np.uint64)
    return int(a >> 1), int(b >> 1)


PRECISIONS = ("fp32", "bf16")


def batch_to_device(batch: Batch, device: torch.device) -> Batch:
    """Batch on ``device``; to CUDA through pinned memory without blocking the host."""
    if device.type != "cuda":
        return batch.to(device)
    return Batch(
        **{
            f.name: getattr(batch, f.name).pin_memory().to(device, non_blocking=True)
            for f in fields(batch)
        }
    )


def enable_model_compile(model: WorldModel) -> None:
    enable = getattr(model, "enable_compile", None)
    if enable is None:
        warnings.warn(
            f"torch.compile: model {model.model_name!r} has no compiled path; running eager",
            CompileFallbackWarning,
            stacklevel=3,
        )
        return
    enable()


def host_row(
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


def train_step(
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


def check_train_args(
    dataset: Any,
    steps: int | None,
    epochs: int | None,
    precision: str,
    log_every: int,
    checkpoint_every: int,
    keep_every: int | None = None,
    lr: float = 1e-3,
    grad_clip: float | None = None,
) -> None:
    """The argument checks :func:`train` and :func:`~gdm_models.ensemble.train_ensemble`
    share (a clear exception naming the bad argument), all before any step: ``lr`` a finite
    number > 0 (inf or NaN would only fail at the first step's non-finite loss) and
    ``grad_clip`` ``None`` or a number > 0 (NaN clips nothing; 0 would scale every gradient
    to zero, so no parameter would ever change; ``inf`` means no clipping)."""
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if grad_clip is not None and (
        isinstance(grad_clip, bool)
        or not isinstance(grad_clip, int | float)
        or math.isnan(grad_clip)
        or grad_clip <= 0
    ):
        raise ValueError(
            f"grad_clip must be a number > 0 (or None: no clipping), got {grad_clip!r}"
            + (
                " (0 clips every gradient to zero: no parameter would change)"
                if grad_clip == 0
                else ""
            )
        )
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
    if keep_every is not None and keep_every < 1:
        raise ValueError(f"keep_every must be >= 1 (or None: keep none), got {keep_every}")
