"""Feature scaling fitted on the training data (paper, appendix "Feature Scaling").

For every continuous (scalar) node and graph feature f the mean mu_f and the *population*
standard deviation sigma_f are computed over all stored pre- and post-transition observations
(i.e. every observation of every episode, every node for node features); the reward statistics
are fitted separately over all transition rewards. A feature that is constant throughout the
training data gets sigma_f = 1. Decoder heads predict in standardised units z = (x - mu) / sigma
and predictions are mapped back with x = sigma * z + mu.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .schema import Schema

__all__ = ["FeatureScaler"]


def _rows(values: Any, width: int) -> np.ndarray:
    """Flatten stored feature values to (M, width) rows; works for zero-width features too."""
    a = np.asarray(values, np.float64)
    return a.reshape(-1, width) if width else np.zeros((0, 0))


def _mean_std(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and population std of a (M, F) float64 array; std=1 for constant columns."""
    if values.shape[0] == 0:
        f = values.shape[1]
        return np.zeros(f), np.ones(f)
    mean = values.mean(axis=0)
    std = values.std(axis=0)  # ddof=0: population standard deviation
    # a target that is constant throughout the training data gets sigma = 1 (paper)
    const = np.all(values == values[:1], axis=0)
    std = np.where(const | (std == 0), 1.0, std)
    return mean, std


def _transforming() -> bool:
    """Inside a ``torch.func`` transform (vmap, grad) or a ``torch.compile`` trace, where new
    tensors are wrapped or traced and must not be cached."""
    return torch._C._functorch.peek_interpreter_stack() is not None or bool(
        torch.compiler.is_compiling()
    )


@dataclass
class FeatureScaler:
    """Per-feature standardisation statistics (float64 numpy arrays).

    Attributes:
        node_mean, node_std: shape (Fnc,).
        graph_mean, graph_std: shape (Fgc,).
        reward_mean, reward_std: scalars.
    """

    node_mean: np.ndarray
    node_std: np.ndarray
    graph_mean: np.ndarray
    graph_std: np.ndarray
    reward_mean: float = 0.0
    reward_std: float = 1.0
    #: device copies of the statistics, made once per (statistic, device, dtype) so a
    #: training step copies nothing from the host (a host copy blocks CUDA-graph capture)
    _device_cache: dict[tuple[int, str, torch.dtype], tuple[Any, torch.Tensor]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name in ("node_mean", "node_std", "graph_mean", "graph_std"):
            a = np.asarray(getattr(self, name), dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"FeatureScaler.{name} contains NaN or infinite values")
            setattr(self, name, a)
        if self.node_mean.shape != self.node_std.shape:
            raise ValueError("node_mean and node_std must have the same length")
        if self.graph_mean.shape != self.graph_std.shape:
            raise ValueError("graph_mean and graph_std must have the same length")
        if np.any(self.node_std <= 0) or np.any(self.graph_std <= 0):
            raise ValueError("standard deviations must be positive")
        self.reward_mean = float(self.reward_mean)
        self.reward_std = float(self.reward_std)
        if not np.isfinite(self.reward_mean) or not (self.reward_std > 0):
            raise ValueError("reward statistics must be finite with reward_std > 0")

    # ------------------------------------------------------------------ construction
    @classmethod
    def identity(cls, schema: Mapping[str, Any] | Schema) -> FeatureScaler:
        """A scaler with mean 0 and std 1 everywhere (no scaling)."""
        s = Schema.from_dict(schema)
        return cls(
            np.zeros(s.num_node_continuous),
            np.ones(s.num_node_continuous),
            np.zeros(s.num_graph_continuous),
            np.ones(s.num_graph_continuous),
        )

    @classmethod
    def fit(
        cls, episodes: Sequence[Mapping[str, Any]], schema: Mapping[str, Any] | Schema
    ) -> FeatureScaler:
        """Fit the statistics on training episodes (see module docstring)."""
        s = Schema.from_dict(schema)
        if len(episodes) == 0:
            raise ValueError("FeatureScaler.fit needs at least one episode")
        node = [_rows(ep["node_continuous"], s.num_node_continuous) for ep in episodes]
        graph = [_rows(ep["graph_continuous"], s.num_graph_continuous) for ep in episodes]
        reward = np.concatenate(
            [np.asarray(ep["reward"], np.float64).reshape(-1) for ep in episodes]
        )
        nm, ns = _mean_std(np.concatenate(node, axis=0))
        gm, gs = _mean_std(np.concatenate(graph, axis=0))
        rm, rs = _mean_std(reward[:, None])
        for name, arr in (("node_continuous", nm), ("graph_continuous", gm), ("reward", rm)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"training data {name} contains NaN or infinite values")
        return cls(nm, ns, gm, gs, float(rm[0]), float(rs[0]))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "node_mean": self.node_mean.tolist(),
            "node_std": self.node_std.tolist(),
            "graph_mean": self.graph_mean.tolist(),
            "graph_std": self.graph_std.tolist(),
            "reward_mean": self.reward_mean,
            "reward_std": self.reward_std,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FeatureScaler:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(
                np.asarray(d["node_mean"], np.float64),
                np.asarray(d["node_std"], np.float64),
                np.asarray(d["graph_mean"], np.float64),
                np.asarray(d["graph_std"], np.float64),
                float(d["reward_mean"]),
                float(d["reward_std"]),
            )
        except KeyError as e:
            raise ValueError(f"scaler dict is missing key {e}") from None

    def check_schema(self, schema: Mapping[str, Any] | Schema) -> None:
        """Raise ``ValueError`` if the statistics do not match the schema's feature counts."""
        s = Schema.from_dict(schema)
        if self.node_mean.shape[0] != s.num_node_continuous:
            raise ValueError(
                f"scaler has {self.node_mean.shape[0]} node statistics, schema has "
                f"{s.num_node_continuous} continuous node features"
            )
        if self.graph_mean.shape[0] != s.num_graph_continuous:
            raise ValueError(
                f"scaler has {self.graph_mean.shape[0]} graph statistics, schema has "
                f"{s.num_graph_continuous} continuous graph features"
            )

    # ------------------------------------------------------------------ transforms (torch)
    def _t(self, a: np.ndarray | float, like: torch.Tensor) -> torch.Tensor:
        """``a`` as a tensor of ``like``'s dtype on its device, copied from the host only the
        first time (the cache entry is keyed by the statistic's identity, so replacing an
        attribute with new statistics makes a new copy)."""
        if isinstance(a, torch.Tensor) and a.device == like.device and a.dtype == like.dtype:
            return a
        key = (id(a), str(like.device), like.dtype)
        hit = self._device_cache.get(key)
        if hit is not None and hit[0] is a:
            return hit[1]
        t = torch.as_tensor(a, dtype=like.dtype, device=like.device)
        if not _transforming():  # a tensor made inside vmap/grad or a trace must not outlive it
            self._device_cache[key] = (a, t)
        return t

    def scale_node(self, x: torch.Tensor) -> torch.Tensor:
        """Environment units -> standardised units for node continuous features (last axis)."""
        return (x - self._t(self.node_mean, x)) / self._t(self.node_std, x)

    def unscale_node(self, z: torch.Tensor) -> torch.Tensor:
        """Standardised -> environment units, x = sigma z + mu."""
        return z * self._t(self.node_std, z) + self._t(self.node_mean, z)

    def scale_graph(self, x: torch.Tensor) -> torch.Tensor:
        """Environment units -> standardised units for graph continuous features."""
        return (x - self._t(self.graph_mean, x)) / self._t(self.graph_std, x)

    def unscale_graph(self, z: torch.Tensor) -> torch.Tensor:
        """Standardised -> environment units for graph continuous features."""
        return z * self._t(self.graph_std, z) + self._t(self.graph_mean, z)

    def scale_reward(self, r: torch.Tensor) -> torch.Tensor:
        """Reward in environment units -> standardised units."""
        return (r - self.reward_mean) / self.reward_std

    def unscale_reward(self, z: torch.Tensor) -> torch.Tensor:
        """Standardised reward -> environment units."""
        return z * self.reward_std + self.reward_mean
