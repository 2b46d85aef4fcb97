"""GDM hyperparameters and the named ablations of the paper (plain data: no network code)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config_checks import check_config_types

__all__ = ["ABLATIONS", "GDMConfig"]

#: ablation name -> config overrides (names usable as "gdm:<name>", combinable with "+").
ABLATIONS: dict[str, dict[str, Any]] = {
    "no-graph-state": {"graph_state": False},
    "no-beta-h": {"beta_h": 0.0},
    "no-h-plus": {"h_plus": False},
    "bernoulli-adj": {"adjacency_sampler": "bernoulli"},
    "all-pairs-mp": {"message_passing": "all_pairs"},
    "no-recurrent-adj": {"recurrent_adjacency": False},
}


@dataclass
class GDMConfig:
    """GDM hyperparameters (defaults: the paper's SAR/CF column; OD differs in beta_rep = 0.05).

    Ablation switches: ``graph_state`` (False: no h_g/z_g), ``h_plus`` (False: no posterior
    correction, h^+ = h^-), ``adjacency_sampler`` ("hard_concrete" | "bernoulli"),
    ``message_passing`` ("sparse_gat" | "all_pairs": all pairs weighted by the next-edge
    probabilities), ``recurrent_adjacency`` (False: no adjacency in the state, uniform
    all-pairs message passing, the observed adjacency enters through ``encoder_gnn_layers``
    GNN layers in the encoder and the adjacency comes from a bias-free pair-dot decoder head,
    as in G-RSSM); ``beta_h = 0``.
    """

    embed_dim: int = 128  # dim(e), also the action embedding size
    hidden_dim: int = 128  # dim(h)
    mlp_hidden: int = 0  # hidden width of every MLP; 0 -> hidden_dim
    node_latent_groups: int = 16
    node_latent_classes: int = 16
    graph_latent_groups: int = 8
    graph_latent_classes: int = 8
    mp_layers: int = 1  # L
    unimix: float = 0.01
    beta_pred: float = 1.0
    beta_dyn: float = 1.0
    beta_rep: float = 0.1
    beta_n: float = 1.0
    beta_g: float = 1.0
    beta_adj: float = 1.0
    beta_h: float = 1.0
    free_bits: float = 0.01
    hc_beta: float = 2.0 / 3.0
    hc_gamma: float = -0.1
    hc_zeta: float = 1.1
    graph_state: bool = True
    h_plus: bool = True
    adjacency_sampler: str = "hard_concrete"
    message_passing: str = "sparse_gat"
    recurrent_adjacency: bool = True
    # GNN layers on the observed adjacency in the observation encoder; used only without the
    # recurrent adjacency (ablation "no-recurrent-adj", as G-RSSM's encoder; the hyperparameters
    # set G-RSSM's depth of the environment)
    encoder_gnn_layers: int = 1
    # block size (floats) of the no-grad pairwise edge MLP; 0 = by the device's memory budget
    # (adjacency.EDGE_CHUNK_BYTES: cache sized on the CPU, hundreds of MB on a GPU)
    edge_chunk_elems: int = 0

    def __post_init__(self) -> None:
        check_config_types(self)  # types first: 8.5, True or '0.1' named, not compared
        for name in (
            "embed_dim",
            "hidden_dim",
            "node_latent_groups",
            "node_latent_classes",
            "graph_latent_groups",
            "graph_latent_classes",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"GDMConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.node_latent_classes < 2 or self.graph_latent_classes < 2:
            raise ValueError("latent class counts must be >= 2")
        for name in ("mp_layers", "mlp_hidden", "edge_chunk_elems", "encoder_gnn_layers"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"GDMConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.unimix < 1.0:
            raise ValueError(f"unimix must be in [0, 1), got {self.unimix}")
        for name in (
            "beta_pred", "beta_dyn", "beta_rep", "beta_n", "beta_g", "beta_adj", "beta_h",
            "free_bits",
        ):  # fmt: skip
            v = float(getattr(self, name))
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"GDMConfig.{name} must be finite and >= 0, got {v}")
        if not (self.hc_beta > 0 and self.hc_gamma < 0 and self.hc_zeta > 1):
            raise ValueError("Hard Concrete needs beta > 0, gamma < 0, zeta > 1")
        if self.adjacency_sampler not in ("hard_concrete", "bernoulli"):
            raise ValueError(f"unknown adjacency_sampler {self.adjacency_sampler!r}")
        if self.message_passing not in ("sparse_gat", "all_pairs"):
            raise ValueError(f"unknown message_passing {self.message_passing!r}")

    @property
    def mlp_width(self) -> int:
        """Hidden width of the MLPs."""
        return self.mlp_hidden or self.hidden_dim
