"""Where the compiled CPU loops of :mod:`gdm_models.cpu_kernels` apply (this check imports no
numba, so callers ask it before importing the loops)."""

from __future__ import annotations

import torch

__all__ = ["compiled_loops_apply"]


def compiled_loops_apply(*tensors: torch.Tensor) -> bool:
    """True for inference on the CPU: autograd off, not inside ``torch.compile``, and every
    tensor a float32 CPU tensor. The training step (autograd on, possibly compiled or
    captured) and every other device keep their torch operations."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
