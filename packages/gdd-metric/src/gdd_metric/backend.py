"""Array backends: who runs the heavy kernel work (after POT's ``ot.backend``).

The GDD's cost is dominated by three pieces: the per-node continuous terms (O(T^2 N F)), the
per-node categorical matches (one-hot products) and the Jaccard intersection counts (products
of flattened edge indicators). A :class:`Backend` computes exactly these three; everything
else (graph-level terms, kernel assembly, the estimators) is cheap (T, T) numpy work shared by
all backends. Inputs and outputs are numpy float64 arrays whatever the backend, so the results
of different backends agree to round-off.

Backends are chosen explicitly by name with :func:`get_backend`: ``"numpy"`` (default, no
extra dependency) or ``"torch"`` (optional extra; runs on a torch device such as ``"cuda"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from . import kernels

__all__ = ["BACKENDS", "Backend", "NumpyBackend", "get_backend"]

#: Names accepted by :func:`get_backend`.
BACKENDS = ("numpy", "torch")

# Bytes of one Jaccard column chunk (T rows of float32 edge indicators).
DEFAULT_CHUNK_BYTES = 64 * 2**20


class Backend(ABC):
    """The heavy per-node and per-edge work of the GDD kernels.

    Attributes:
        name: the backend's name (one of :data:`BACKENDS`).
        chunk_bytes: size of one Jaccard column chunk; the chunk loop itself lives in
            :func:`gdd_metric.kernels.jaccard_gram` and is shared by every backend.
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
        from .torch_backend import TorchBackend  # torch is imported only here

        return TorchBackend(device)
    raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
