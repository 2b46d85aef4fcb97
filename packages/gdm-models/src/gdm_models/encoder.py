"""Observation encoder and action embedding (paper, "Encoder" / "Recurrent Dynamics").

Each feature passes through its own learned linear map (continuous features are standardised
with the fitted :class:`~gdm_models.scaling.FeatureScaler` first; categorical features are
one-hot, i.e. an embedding lookup) and the node embedding e_v(o) (graph embedding e_g(o)) is
the mean of the node (graph) feature embeddings. The action mask is encoded as one more binary
node feature. With no graph features, e_g(o) = 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .member_ops import member_apply
from .scaling import FeatureScaler
from .schema import Schema

__all__ = ["FeatureEncoder", "ActionEmbedding", "ObservedGraphEncoder"]


class _FeatureSetEmbedding(nn.Module):
    """Mean of per-feature linear embeddings of continuous and one-hot categorical columns."""

    def __init__(self, num_cont: int, cards: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.num_cont, self.dim = num_cont, dim
        # x_f * w_f + b_f for each continuous feature f
        self.cont_weight = nn.Parameter(torch.randn(num_cont, dim) * 0.5)
        self.cont_bias = nn.Parameter(torch.zeros(num_cont, dim))
        # W_f onehot(x_f) == row lookup (the bias is absorbed in the rows)
        self.cat = nn.ModuleList([nn.Embedding(k, dim) for k in cards])
        self.count = num_cont + len(cards)

    def forward(self, cont: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        lead = cont.shape[:-1]
        if self.count == 0:
            return cont.new_zeros(*lead, self.dim)
        total = cont.new_zeros(*lead, self.dim)
        if self.num_cont:
            total = total + member_apply(
                lambda x, w, b: (x * w + b).sum(-2),
                cont[..., :, None],
                self.cont_weight,
                self.cont_bias,
                ndim=2,
            )
        for i, emb in enumerate(self.cat):
            total = total + emb(cat[..., i])
        return total / self.count


class FeatureEncoder(nn.Module):
    """Encoder producing node embeddings e_v(o) (..., N, E) and graph embedding e_g(o) (..., E)."""

    def __init__(self, schema: Schema, scaler: FeatureScaler, dim: int) -> None:
        super().__init__()
        self.scaler = scaler
        self.node = _FeatureSetEmbedding(
            schema.num_node_continuous, schema.node_cardinalities + (2,), dim
        )
        self.graph = _FeatureSetEmbedding(
            schema.num_graph_continuous, schema.graph_cardinalities, dim
        )

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        nc = self.scaler.scale_node(obs["node_continuous"])
        nk = torch.cat([obs["node_categorical"], obs["action_mask"].long()[..., None]], dim=-1)
        gc = self.scaler.scale_graph(obs["graph_continuous"])
        return self.node(nc, nk), self.graph(gc, obs["graph_categorical"])


class ActionEmbedding(nn.Module):
    """a_t(v) = W x_t(v) + b: linear map of the node-selection indicator x_t(v) in {0, 1}."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(1, dim)

    def forward(self, action_nodes: torch.Tensor) -> torch.Tensor:
        return self.lin(action_nodes[..., None].to(self.lin.weight.dtype))


class ObservedGraphEncoder(nn.Module):
    """GNN layers on the observed adjacency over the node embeddings, for the
    ``no-recurrent-adj`` ablation (paper, "Ablations": "as per G-RSSM", whose encoder runs GNN
    layers on the observed adjacency): per layer
    e <- LayerNorm(e + SiLU(W_root e + W_nb mean_{u in N(v)} e(u))), padded nodes kept at 0.
    """

    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.root = nn.ModuleList([nn.Linear(dim, dim) for _ in range(layers)])
        self.neigh = nn.ModuleList([nn.Linear(dim, dim, bias=False) for _ in range(layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in range(layers)])

    def forward(
        self, e: torch.Tensor, adjacency: torch.Tensor, node_mask: torch.Tensor
    ) -> torch.Tensor:
        """e (B, N, E), adjacency (B, N, N) 0/1, node_mask (B, N) -> (B, N, E)."""
        m = node_mask.to(e.dtype)[..., None]
        agg_w = adjacency / adjacency.sum(-1, keepdim=True).clamp_min(1.0)  # mean over N(v)
        e = e * m
        for root, neigh, norm in zip(self.root, self.neigh, self.norm, strict=True):
            e = norm(e + F.silu(root(e) + neigh(agg_w @ e))) * m
        return e
