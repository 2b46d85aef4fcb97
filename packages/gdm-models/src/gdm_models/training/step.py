"""The one training step of every engine, eager or static, single or K members
(:func:`train_step`: loss, backward, clipping, Adam), the one gradient-norm clipping
(:func:`clip_grad_norms_`), Adam's two implementations (:func:`make_adam`,
:func:`configure_adam`), batches to the device, the host log row, argument checks, and the
seeds a run derives from its seed."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from ..compiling import CompileFallbackWarning
from ..data import Batch
from ..world_model import WorldModel
from .config import PRECISIONS

__all__ = [
    "PRECISIONS",
    "StepOutput",
    "batch_to_device",
    "clip_grad_norms_",
    "configure_adam",
    "default_device",
    "enable_model_compile",
    "host_row",
    "make_adam",
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


StepOutput = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]


def clip_grad_norms_(
    params: Sequence[torch.nn.Parameter], max_norm: float, members: int | None = None
) -> torch.Tensor:
    """Gradient-norm clipping (the formula of :func:`torch.nn.utils.clip_grad_norm_`, 2-norm),
    the one clipping of every training step: the total norm is the 2-norm of the parameters'
    gradient 2-norms, and the gradients are scaled in place by ``min(1, max_norm / (norm +
    1e-6))``. Returns the norm before clipping (a device tensor: no host sync).

    ``members=None``: one model; the per-parameter norms in one foreach op (torch's version
    also moves each norm to the first device, one op per parameter, which a launch-bound step
    pays for; the numbers are the same). ``members=K``: member-stacked gradients (each [K,
    ...], member k's is ``g[k]``), one norm and one scale per member, returned as [K]; a
    member's non-finite norm touches only its own gradients. ``max_norm=math.inf``: no
    clipping (the scale is 1).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:  # nothing to clip: a zero norm where the parameters live
        device = params[0].device if params else None
        return torch.zeros(() if members is None else (members,), device=device)
    per_param: Sequence[torch.Tensor]
    if members is None:
        per_param = torch._foreach_norm(grads, 2.0)
    else:
        per_param = [torch.linalg.vector_norm(g.reshape(members, -1), 2, dim=1) for g in grads]
    stacked = torch.stack(per_param)
    total = (
        torch.linalg.vector_norm(stacked, 2.0)
        if members is None
        else torch.linalg.vector_norm(stacked, 2.0, dim=0)
    )
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if members is None:
        torch._foreach_mul_(grads, coef)
    else:
        for g in grads:
            g.mul_(coef.reshape(members, *([1] * (g.dim() - 1))))
    return total


def train_step(
    loss_fn: Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]],
    opt: torch.optim.Optimizer,
    params: Sequence[torch.nn.Parameter],
    clip: float,
    autocast: AbstractContextManager[Any],
    members: int | None = None,
) -> StepOutput:
    """The training step, the one body of every engine: ``loss_fn()`` (under ``autocast``),
    backward, gradient-norm clipping (:func:`clip_grad_norms_`) and the optimizer's step.

    Eager, it runs on a batch on the device; the static step (:mod:`.capture`) runs it on
    padded device buffers, captured as one CUDA graph on CUDA (then nothing here may read a
    value on the host). ``members=K``: ``loss_fn`` returns the K members' losses [K] of a
    member model; one backward of their sum gives each member exactly its own gradients.
    Returns the loss (detached), the gradient norm before clipping and the loss terms, all on
    the device.
    """
    opt.zero_grad(set_to_none=True)
    with autocast:
        loss, terms = loss_fn()
    (loss if members is None else loss.sum()).backward()
    norm = clip_grad_norms_(params, clip, members)
    opt.step()
    return loss.detach(), norm, terms


def make_adam(
    params: Sequence[torch.nn.Parameter], lr: float, device: torch.device, static: bool = True
) -> torch.optim.Adam:
    """Adam for the static step (``static``): the fused kernel, capturable on CUDA (step
    counters on the device: no ``item()`` per parameter). For the eager step: the multi-tensor
    (``foreach``) implementation on every device, torch's default on CUDA only: the same
    arithmetic as the per-parameter loop (bit for bit, tested), a few calls in all instead of
    about ten per parameter (on the CPU, 1,000 of a small GDM step's 8,400 operations)."""
    if static:
        return torch.optim.Adam(params, lr=lr, fused=True, capturable=device.type == "cuda")
    return torch.optim.Adam(params, lr=lr, foreach=True)


def configure_adam(opt: torch.optim.Optimizer, *, fused: bool, capturable: bool) -> None:
    """Set ``opt``'s implementation flags after ``load_state_dict`` (which restores the flags
    saved with the state: a checkpoint written by an eager run would otherwise turn a captured
    run's Adam back into the host-synchronising one) and put the step counters where that
    implementation keeps them (on the parameter's device for fused or capturable Adam, on the
    host otherwise). The numbers are unchanged."""
    for group in opt.param_groups:
        group["fused"] = fused or None
        group["capturable"] = capturable
        group["foreach"] = None if fused else True  # make_adam's eager implementation
        for p in group["params"]:
            st = opt.state.get(p)
            if not st or "step" not in st:
                continue
            step = st["step"]
            dtype = step.dtype if isinstance(step, torch.Tensor) else torch.float32
            dev = p.device if (fused or capturable) else torch.device("cpu")
            st["step"] = torch.as_tensor(step, dtype=dtype).to(dev)
