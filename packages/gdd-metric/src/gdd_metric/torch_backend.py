"""Optional PyTorch backend (e.g. for a GPU): the heavy per-node and Jaccard work in torch.

Selected with ``gdd(..., backend="torch", device="cuda")`` (see :mod:`gdd_metric.backend`).
Needs ``pip install 'gdd-metric[torch]'``; torch is imported only here and only when this
backend is used.
Computations run in float64 (the same formulas as :mod:`gdd_metric.kernels`), results come
back as numpy arrays, and the cheap (T, T) graph-level terms and the estimators stay in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .backend import DEFAULT_CHUNK_BYTES, Backend
from .kernels import pair_indices, symmetric_from_pairs

__all__ = ["TorchBackend", "load_torch"]


def load_torch() -> ModuleType:
    """Import torch or raise an ImportError that says how to install it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "backend='torch' needs PyTorch; install it with pip install 'gdd-metric[torch]'"
        ) from err
    return torch


class TorchBackend(Backend):
    """Torch versions of the node-level terms and the Jaccard counts on ``device``."""

    name = "torch"

    def __init__(self, device: str | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.torch = load_torch()
        self.device = self.torch.device(device or "cpu")
        self.chunk_bytes = chunk_bytes

    def _t(self, a: np.ndarray, dtype: Any = None) -> Any:
        """``a`` as a contiguous tensor on this backend's device."""
        return self.torch.as_tensor(np.ascontiguousarray(a), device=self.device, dtype=dtype)

    def node_continuous_terms(
        self, x: np.ndarray, sigma: np.ndarray, multipliers: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """See :func:`gdd_metric.kernels.node_continuous_terms`."""
        torch = self.torch
        b, t, n, f_count = x.shape
        if f_count == 0 or n == 0:
            z = np.zeros((b, t, t))
            return z, z
        i_all, j_all = (self._t(ix, torch.long) for ix in pair_indices(t))
        p = i_all.numel()
        xt = self._t(np.moveaxis(x, 3, 1), torch.float64)  # (B, F, T, N)
        add = torch.zeros((b, p), dtype=torch.float64, device=self.device)
        dist = torch.zeros((b, p), dtype=torch.float64, device=self.device)
        step = max(1, self.chunk_bytes // (8 * b * n))
        for f in range(f_count):
            xf = xt[:, f]
            inv_var = 1.0 / float(sigma[f]) ** 2
            for start in range(0, p, step):
                sl = slice(start, start + step)
                u = (xf[:, i_all[sl]] - xf[:, j_all[sl]]) ** 2 * inv_var
                dist[:, sl] += u.sum(-1)
                acc = sum(torch.exp(u * (-0.5 / float(r) ** 2)).sum(-1) for r in multipliers)
                add[:, sl] += acc / len(multipliers)
        return (
            symmetric_from_pairs(add.cpu().numpy(), t, float(n * f_count)),
            symmetric_from_pairs(dist.cpu().numpy() / f_count, t, 0.0),
        )

    def node_categorical_terms(
        self, x: np.ndarray, cardinalities: Sequence[int], lam: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """See :func:`gdd_metric.kernels.node_categorical_terms` (one-hot products)."""
        torch = self.torch
        b, t, n, f_count = x.shape
        add = torch.zeros((b, t, t), dtype=torch.float64, device=self.device)
        dist = torch.zeros((b, t, t), dtype=torch.float64, device=self.device)
        if f_count == 0 or n == 0:
            return add.cpu().numpy(), dist.cpu().numpy()
        codes = self._t(x, torch.long)
        for f in range(f_count):
            oh = torch.nn.functional.one_hot(codes[..., f], int(cardinalities[f]))
            oh = oh.to(torch.float64).reshape(b, t, -1)
            matches = oh @ oh.transpose(1, 2)
            mismatches = n - matches
            add += matches + mismatches * float(np.exp(-float(lam[f])))
            dist += float(lam[f]) * mismatches
        return add.cpu().numpy(), dist.cpu().numpy() / f_count

    def edge_counts(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See :func:`gdd_metric.kernels.edge_counts` (float32 products count exactly)."""
        zt = self._t(z, self.torch.float32)
        inter = (zt @ zt.T).double().cpu().numpy()
        sizes = zt.sum(1, dtype=self.torch.float64).cpu().numpy()
        return inter, sizes
