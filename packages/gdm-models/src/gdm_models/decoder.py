"""Decoder D(h^-, z) = theta(h^-) + I(h^-, z - E_p[z]) and the feature heads (paper, "Decoder").

The deterministic prior state h^- is always used, so the decoder cannot bypass the stochastic
state through the observation-informed h^+. The shared decoder state feeds linear heads; since
the heads are linear, every head output splits the same way into a deterministic mean
head(theta(h^-)) plus a stochastic innovation head(I(...)).
"""

from __future__ import annotations

import torch
from torch import nn

from .layers import MLP
from .member_ops import member_apply
from .schema import Schema

__all__ = ["InnovationDecoder", "NodeHeads", "GraphHeads", "PairDotAdjacencyHead"]


class InnovationDecoder(nn.Module):
    """D(h, z) = theta(h) + I(h, z - E_p[z])."""

    def __init__(self, h_dim: int, z_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.theta = MLP(h_dim, hidden, out_dim)
        self.innovation = MLP(h_dim + z_dim, hidden, out_dim)

    def forward(self, h: torch.Tensor, z: torch.Tensor, z_mean: torch.Tensor) -> torch.Tensor:
        return self.theta(h) + self.innovation(torch.cat([h, z - z_mean], dim=-1))


class _FeatureHeads(nn.Module):
    """Continuous (standardised) and categorical-logit heads of one factor (nodes or graph)."""

    def __init__(self, num_cont: int, cardinalities: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.num_cont = num_cont
        self.cont = nn.Linear(dim, num_cont) if num_cont else None
        self.cat = nn.ModuleList([nn.Linear(dim, k) for k in cardinalities])

    def _features(self, d: torch.Tensor, factor: str) -> dict[str, object]:
        return {
            f"{factor}_continuous": self.cont(d) if self.cont is not None else d[..., :0],
            f"{factor}_categorical": [head(d) for head in self.cat],
        }


class NodeHeads(_FeatureHeads):
    """Per-node heads: continuous features (standardised), categorical logits, action mask."""

    def __init__(self, schema: Schema, dim: int) -> None:
        super().__init__(schema.num_node_continuous, schema.node_cardinalities, dim)
        self.action_mask = nn.Linear(dim, 1)

    def forward(self, d: torch.Tensor) -> dict[str, object]:
        return {**self._features(d, "node"), "action_mask": self.action_mask(d).squeeze(-1)}


class GraphHeads(_FeatureHeads):
    """Graph heads: continuous (standardised), categorical logits, reward, continuation."""

    def __init__(self, schema: Schema, dim: int) -> None:
        super().__init__(schema.num_graph_continuous, schema.graph_cardinalities, dim)
        self.reward = nn.Linear(dim, 1)
        self.continuation = nn.Linear(dim, 1)

    def forward(self, d: torch.Tensor) -> dict[str, object]:
        return {
            **self._features(d, "graph"),
            "reward": self.reward(d).squeeze(-1),
            "continuation": self.continuation(d).squeeze(-1),
        }


class PairDotAdjacencyHead(nn.Module):
    """Ablation "no-recurrent-adj": adjacency logits from the node decoder states only,
    l_uv = (W_adj d_u)^T (W_adj d_v), G-RSSM's size-independent decoder as in the paper (the
    ablation follows the G-RSSM hyperparameters, which have no learned bias; ``bias=True`` adds a
    learned scalar c to every logit)."""

    def __init__(self, dim: int, proj: int, bias: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, proj, bias=False)
        self.bias = nn.Parameter(torch.zeros(())) if bias else None

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        x = self.proj(d)
        logits = torch.matmul(x, x.transpose(-1, -2))
        if self.bias is None:
            return logits
        return member_apply(torch.add, logits, self.bias, ndim=0)
