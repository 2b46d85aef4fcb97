"""The training configuration: every hyperparameter of a training run, each default written once.

:func:`~gdm_models.training.trainer.train` and
:func:`~gdm_models.training.ensemble.train_ensemble` take a :class:`TrainConfig` whole; graphwm's
training jobs hold one (their key is derived from it), and anything else that needs a default
(cost estimates, memory bounds, the preset's ``[train]`` section) reads it from here
(``TrainConfig().batch_size``). Where a run's outputs go (log, checkpoints) is not a
hyperparameter: those stay arguments of ``train``.

A frozen dataclass rather than a pydantic model: the package has no pydantic dependency, the
checks are a handful of ranges, and a dataclass is hashable and ``dataclasses.replace``-able
(member k of an ensemble is ``replace(config, seed=seeds[k])``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["PRECISIONS", "STRATEGIES", "TrainConfig", "old_keywords_error"]

#: ``precision`` values: fp32, or the forward pass under bf16 autocast
PRECISIONS = ("fp32", "bf16")

#: ``strategy`` values: "auto" = "members" for a
#: :class:`~gdm_models.member_layers.MemberModel` unless ``compile`` is asked for, else "loop"
STRATEGIES = ("auto", "members", "loop")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class TrainConfig:
    """Every hyperparameter of a training run (paper, "Training Details": Adam, batches of 8
    windows of 20 transitions).

    Attributes:
        steps / epochs: training length; :func:`train` needs exactly one (an epoch visits every
            episode once, ``ceil(len(dataset) / batch_size)`` steps).
        batch_size, seq_len: B windows of L transitions per step.
        lr: Adam learning rate. grad_clip: max global gradient norm (``None``: no clipping).
        seed: seeds the data sampler and the model's noise generator of a single run (model
            initialisation is the caller's: seed torch before building the model);
            ``train_ensemble`` gives member k ``seeds[k]`` instead.
        device: ``None`` -> CUDA when available, else CPU (kept as a string).
        precision: "fp32", or "bf16" (forward pass under bf16 autocast; parameters,
            gradients and the optimizer stay fp32).
        compile: run the training step through ``torch.compile`` where the model supports it.
        capture: the static-shape step (batches padded to one shape, fused Adam), captured as
            one CUDA graph on CUDA. ``None``: on CUDA unless ``compile``.
        log_every: pull the loss terms to the host (log row) every ``log_every`` steps.
        checkpoint_every: steps between full-state checkpoints (``latest/``).
        keep_every: also keep the model checkpoint of every multiple of ``keep_every``
            (``None``: keep none).
        strategy: how an ensemble trains its members (:data:`STRATEGIES`).
        ensemble: the most seeds of one configuration trained together as one ensemble
            (graphwm's ``train.ensemble``; 1: every seed alone).
        threads: torch CPU threads while training (``None``: leave torch's setting).
    """

    steps: int | None = None
    epochs: int | None = None
    batch_size: int = 8
    seq_len: int = 20
    lr: float = 1e-3
    grad_clip: float | None = 100.0
    seed: int = 0
    device: str | None = None
    precision: str = "fp32"
    compile: bool = False
    capture: bool | None = None
    log_every: int = 1
    checkpoint_every: int = 1000
    keep_every: int | None = None
    strategy: str = "auto"
    ensemble: int = 1
    threads: int | None = None

    def __post_init__(self) -> None:
        def bad(name: str, what: str) -> ValueError:
            value = getattr(self, name)
            return ValueError(f"TrainConfig.{name} must be {what}, got {value!r}")

        for name, low in (("steps", 0), ("epochs", 0), ("keep_every", 1), ("threads", 1)):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < low):
                raise bad(name, f">= {low} (an integer, or None)")
        for name in ("batch_size", "seq_len", "log_every", "checkpoint_every", "ensemble"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise bad(name, ">= 1 (an integer)")
        if not _is_int(self.seed) or self.seed < 0:
            raise bad("seed", ">= 0 (an integer)")
        # inf or NaN would only fail at the first step's non-finite loss
        if not _is_number(self.lr) or not math.isfinite(self.lr) or self.lr <= 0:
            raise bad("lr", "a finite number > 0")
        clip = self.grad_clip
        if clip is not None and (not _is_number(clip) or math.isnan(clip) or clip <= 0):
            # 0 would scale every gradient to zero (no parameter would change); inf: no clipping
            zero = (
                " (0 clips every gradient to zero: no parameter would change)" if clip == 0 else ""
            )
            raise ValueError(
                f"TrainConfig.grad_clip must be a number > 0 (or None: no clipping), "
                f"got {clip!r}{zero}"
            )
        if self.precision not in PRECISIONS:
            raise bad("precision", f"one of {PRECISIONS}")
        if self.strategy == "vmap":
            raise ValueError(
                "TrainConfig.strategy 'vmap' was replaced by 'members' (issue 27: the K members "
                "as one model with member-dimension layers); use 'members' or 'auto'"
            )
        if self.strategy not in STRATEGIES:
            raise bad("strategy", f"one of {STRATEGIES}")
        for name in ("compile", "capture"):
            v = getattr(self, name)
            if not isinstance(v, bool) and not (name == "capture" and v is None):
                raise bad(name, "True or False" + (" or None" if name == "capture" else ""))
        if self.device is not None:
            import torch

            try:
                dev = torch.device(self.device)
            except (RuntimeError, TypeError) as err:
                raise bad("device", f"a torch device such as 'cpu' or 'cuda:0' ({err})") from None
            if not isinstance(self.device, str):  # a torch.device: kept as its string
                object.__setattr__(self, "device", str(dev))

    def check_length(self) -> None:
        """Raise unless exactly one of ``steps`` and ``epochs`` is given (a run needs one)."""
        if (self.steps is None) == (self.epochs is None):
            raise ValueError(
                "TrainConfig needs exactly one of steps and epochs, got "
                f"steps={self.steps!r}, epochs={self.epochs!r}"
            )


FIELDS = frozenset(f.name for f in fields(TrainConfig))


def old_keywords_error(fn: str, given: dict[str, Any]) -> TypeError:
    """The error of a call with keywords ``train``/``train_ensemble`` no longer take: the
    hyperparameters are the fields of a :class:`TrainConfig`, passed whole."""
    moved = sorted(k for k in given if k in FIELDS)
    unknown = sorted(k for k in given if k not in FIELDS)
    if unknown:
        return TypeError(f"{fn}() got unexpected keyword arguments {unknown}")
    example = ", ".join(f"{k}={given[k]!r}" for k in moved)
    return TypeError(
        f"{fn}() takes its hyperparameters in a TrainConfig: {', '.join(moved)} "
        f"{'is a field' if len(moved) == 1 else 'are fields'} of "
        f"gdm_models.training.TrainConfig; call {fn}(..., TrainConfig({example}))"
    )
