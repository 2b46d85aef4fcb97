"""Vanilla GWM / EA-GWM hyperparameters (plain data; :mod:`.gwm` has the model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config_checks import check_config_types

__all__ = ["EA_DEFAULTS", "GWMConfig"]

#: EA-GWM loss weights and settings from the public code of Song and Cai (the paper is silent).
EA_DEFAULTS: dict[str, Any] = {
    "rollout_weight": 0.5,
    "rollout_steps": 4,
    "spectral_weight": 0.01,
    "critical_weight": 0.1,
}


@dataclass
class GWMConfig:
    """Hyperparameters of Vanilla GWM / EA-GWM (paper, final hyperparameter table).

    Attributes:
        hidden_dim: dim(h), width of node embeddings and GNN layers.
        mp_layers: L, number of GNN layers.
        beta_adj: weight of the adjacency BCE in the prediction loss.
        beta_q: weight of the norm regulariser (||Q_s||_F - 1)^2, Q_s = (Q + Q^T) / 2.
        self_loops: use D~^-1/2 (A + I) D~^-1/2 (GCN renormalisation) instead of D^-1/2 A D^-1/2.
        rollout_weight: lambda of the k-step rollout-consistency loss (0 = off).
        rollout_steps: k.
        spectral_weight: lambda of the spectral loss (0 = off).
        spectral_target: the spectral norm each GNN weight is pushed towards.
        power_iterations: power-iteration steps per loss evaluation (warm-started).
        critical_weight: lambda of the critical-node loss (0 = off).
        critical_weighting: ``"degree"`` (paper) or ``"normalized"`` (row sums of A~, code).
    """

    hidden_dim: int = 128
    mp_layers: int = 2
    beta_adj: float = 1.0
    beta_q: float = 1.0
    self_loops: bool = False  # paper's A~ = D^-1/2 A D^-1/2; True = the public code's A + I
    rollout_weight: float = 0.0
    rollout_steps: int = 4
    spectral_weight: float = 0.0
    spectral_target: float = 1.0
    power_iterations: int = 4
    critical_weight: float = 0.0
    critical_weighting: str = "degree"

    def __post_init__(self) -> None:
        check_config_types(self)  # types first: 8.5, True or '0.1' named, not compared
        if self.hidden_dim < 1 or self.mp_layers < 1:
            raise ValueError("hidden_dim and mp_layers must be >= 1")
        if self.rollout_steps < 1 or self.power_iterations < 1:
            raise ValueError("rollout_steps and power_iterations must be >= 1")
        for name in ("beta_adj", "beta_q", "rollout_weight", "spectral_weight", "critical_weight"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.critical_weighting not in ("degree", "normalized"):
            raise ValueError(
                "critical_weighting must be 'degree' or 'normalized', "
                f"got {self.critical_weighting!r}"
            )
