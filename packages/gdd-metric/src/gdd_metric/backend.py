"""Array backends: who runs the heavy kernel work (after POT's ``ot.backend``).

The GDD's cost is dominated by three pieces: the per-node continuous terms (O(T^2 N F)), the
per-node categorical matches (one-hot products) and the Jaccard intersection counts (products
of flattened edge indicators). A :class:`Backend` computes exactly these three; everything
else (graph-level terms, kernel assembly, the estimators) is cheap (T, T) numpy work shared by
all backends. Inputs and outputs are numpy float64 arrays whatever the backend, so the results
of different backends agree to round-off.

Backends are chosen explicitly by name with :func:`get_backend`: ``"numpy"`` (default, no
extra dependency) or ``"torch"`` (optional extra, ``pip install 'gdd-metric[torch]'``; runs
on a torch device such as ``"cuda"``). torch is imported only when a :class:`TorchBackend` is
made; it computes in float64 with the same formulas as :mod:`gdd_metric.kernels` and returns
numpy arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from . import kernels
from .kernels import pair_indices, symmetric_from_pairs

__all__ = ["BACKENDS", "Backend", "NumpyBackend", "TorchBackend", "get_backend", "load_torch"]

#: Names accepted by :func:`get_backend`.
BACKENDS = ("numpy", "torch")

# Bytes of one Jaccard column chunk (T rows of float32 edge indicators).
DEFAULT_CHUNK_BYTES = 64 * 2**20


class Backend(ABC):
    """The heavy per-node and per-edge work of the GDD kernels.

    Attributes:
        name: the backend's name (one of :data:`BACKENDS`).
        chunk_bytes: size of one Jaccard column chunk; the chunk loop itself lives in
            :func:`gdd_metric.grams.jaccard_gram` and is shared by every backend.
    """

    name: str
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    @abstractmethod
    def node_continuous_terms(
        self, x: np.ndarray, sigma: np.ndarray, multipliers: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Additive and distance sums of continuous node features, each (B, T, T).

        See :func:`gdd_metric.kernels.node_continuous_terms` for the formulas."""

    @abstractmethod
    def node_categorical_terms(
        self, x: np.ndarray, cardinalities: Sequence[int], lam: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Additive and distance sums of categorical node features, each (B, T, T).

        See :func:`gdd_metric.kernels.node_categorical_terms` for the formulas."""

    @abstractmethod
    def edge_counts(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Intersection counts (T, T) and edge counts (T,) of a float32 0/1 chunk (T, C)."""


class NumpyBackend(Backend):
    """The default backend: vectorised numpy on the CPU (:mod:`gdd_metric.kernels`)."""

    name = "numpy"

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes

    def node_continuous_terms(
        self, x: np.ndarray, sigma: np.ndarray, multipliers: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return kernels.node_continuous_terms(x, sigma, multipliers)

    def node_categorical_terms(
        self, x: np.ndarray, cardinalities: Sequence[int], lam: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return kernels.node_categorical_terms(x, cardinalities, lam)

    def edge_counts(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return kernels.edge_counts(z)


# ---------------------------------------------------------------------------- torch
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
            inv_var = (1.0 / float(sigma[f])) ** 2  # never overflows: sigma <= max float
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


def get_backend(name: str | Backend = "numpy", device: str | None = None) -> Backend:
    """The backend called ``name``.

    Args:
        name: ``"numpy"`` or ``"torch"``, or a :class:`Backend` instance (returned as is;
            ``device`` must then be ``None``).
        device: the torch device (``"cpu"``, ``"cuda"``, ...); the numpy backend accepts only
            ``None`` or ``"cpu"``.

    Raises:
        ValueError: an unknown name, or a device the numpy backend cannot use.
        ImportError: ``"torch"`` without PyTorch installed.
    """
    if isinstance(name, Backend):
        if device is not None:
            raise ValueError("device= applies to a backend name, not to a Backend instance")
        return name
    if name == "numpy":
        if device not in (None, "cpu"):
            raise ValueError(f"the numpy backend runs on the CPU; got device={device!r}")
        return NumpyBackend()
    if name == "torch":
        return TorchBackend(device)  # torch is imported only here
    raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
