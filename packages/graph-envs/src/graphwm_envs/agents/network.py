"""The graph network behind the agents: node encoder, message passing, node/pair/value heads.

Everything here is per node or pooled over nodes, so the same weights apply at any number of
nodes N and permuting the nodes of an observation permutes the logits (the value is invariant).

Inputs per node (:class:`ObservationEncoder`): continuous node features scaled to [0, 1] by the
observation space's finite bounds (as they are where a bound is infinite), categorical node
features one-hot (cardinalities from the space), the action mask, the degree / (N - 1), and the
graph features (scaled / one-hot the same way) broadcast to every node.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch_geometric.nn import DenseGINConv, DenseGraphConv, DenseSAGEConv

ConvName = Literal["graphconv", "gin", "sage"]
CONVS: tuple[str, ...] = ("graphconv", "gin", "sage")


def _continuous_scaler(box: spaces.Space) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column (offset, scale) mapping finite bounds to [0, 1]; (0, 1) for infinite ones."""
    if not isinstance(box, spaces.Box):
        raise TypeError(f"continuous features need a Box space, got {box}")
    low = np.asarray(box.low, dtype=np.float64).reshape(-1, box.shape[-1])[0]
    high = np.asarray(box.high, dtype=np.float64).reshape(-1, box.shape[-1])[0]
    finite = np.isfinite(low) & np.isfinite(high) & (high - low > 1e-6)
    offset = np.where(finite, low, 0.0)
    scale = np.where(finite, high - low, 1.0)
    return torch.tensor(offset, dtype=torch.float32), torch.tensor(scale, dtype=torch.float32)


def _cardinalities(space: spaces.Space) -> list[int]:
    """Categories per column of an integer Box (N, C) or a MultiDiscrete (C,)."""
    if isinstance(space, spaces.MultiDiscrete):
        return [int(c) for c in np.asarray(space.nvec).reshape(-1)]
    if isinstance(space, spaces.Box):
        high = np.asarray(space.high).reshape(-1, space.shape[-1])[0]
        return [int(h) + 1 for h in high]
    raise TypeError(f"cannot read categorical cardinalities from {space}")


def _one_hot(codes: torch.Tensor, cards: list[int]) -> torch.Tensor:
    """Concatenated one-hot encodings of the last axis' columns (codes clamped into range)."""
    codes = codes.long()
    parts = [
        nn.functional.one_hot(codes[..., c].clamp(0, card - 1), card).float()
        for c, card in enumerate(cards)
    ]
    return torch.cat(parts, dim=-1)


class ObservationEncoder(nn.Module):
    """Turns a batched observation dict into node inputs (B, N, F) and graph inputs (B, G).

    Built from the observation space of any N (only per-feature information is read), so it
    is N-independent; the cardinalities and bounds are stored as buffers.
    """

    # buffers registered in __init__ (declared so that type checkers know they are tensors)
    node_continuous_offset: torch.Tensor
    node_continuous_scale: torch.Tensor
    graph_continuous_offset: torch.Tensor
    graph_continuous_scale: torch.Tensor

    def __init__(self, observation_space: spaces.Dict) -> None:
        super().__init__()
        if (
            not isinstance(observation_space, spaces.Dict)
            or "adjacency" not in observation_space.spaces
        ):
            raise ValueError(
                "the graph agents need a graphwm_envs observation space (a Dict with "
                f"'adjacency' and 'action_mask'), got {observation_space}"
            )
        sp = observation_space.spaces
        self.has = {k: k in sp for k in ("node_continuous", "node_categorical")}
        self.has.update({k: k in sp for k in ("graph_continuous", "graph_categorical")})
        self.node_cards = (
            _cardinalities(sp["node_categorical"]) if self.has["node_categorical"] else []
        )
        self.graph_cards = (
            _cardinalities(sp["graph_categorical"]) if self.has["graph_categorical"] else []
        )
        for key in ("node_continuous", "graph_continuous"):
            if self.has[key]:
                offset, scale = _continuous_scaler(sp[key])
            else:
                offset, scale = torch.zeros(0), torch.ones(0)
            self.register_buffer(f"{key}_offset", offset)
            self.register_buffer(f"{key}_scale", scale)
        self.graph_dim = int(self.graph_continuous_offset.numel() + sum(self.graph_cards))
        self.node_dim = int(
            self.node_continuous_offset.numel() + sum(self.node_cards) + 2 + self.graph_dim
        )

    def forward(
        self, obs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(node_inputs (B, N, F), graph_inputs (B, G), adjacency (B, N, N) float)``."""
        adj = obs["adjacency"].float()
        if adj.dim() == 2:
            adj = adj.unsqueeze(0)
        batch, n = adj.shape[0], adj.shape[-1]
        mask = obs["action_mask"].float().reshape(batch, n, 1)
        degree = adj.sum(-1, keepdim=True) / max(n - 1, 1)
        parts = []
        if self.has["node_continuous"]:
            x = obs["node_continuous"].float().reshape(batch, n, -1)
            parts.append((x - self.node_continuous_offset) / self.node_continuous_scale)
        if self.has["node_categorical"]:
            parts.append(_one_hot(obs["node_categorical"].reshape(batch, n, -1), self.node_cards))
        graph_parts = []
        if self.has["graph_continuous"]:
            g = obs["graph_continuous"].float().reshape(batch, -1)
            graph_parts.append((g - self.graph_continuous_offset) / self.graph_continuous_scale)
        if self.has["graph_categorical"]:
            graph_parts.append(
                _one_hot(obs["graph_categorical"].reshape(batch, -1), self.graph_cards)
            )
        graph = torch.cat(graph_parts, -1) if graph_parts else adj.new_zeros(batch, 0)
        parts += [mask, degree, graph.unsqueeze(1).expand(batch, n, graph.shape[-1])]
        return torch.cat(parts, -1), graph, adj


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, out))


def make_conv(conv: str, hidden: int) -> nn.Module:
    """One dense PyG message-passing layer ``(x, adj) -> x`` of width ``hidden``."""
    if conv == "graphconv":
        return DenseGraphConv(hidden, hidden, aggr="mean")
    if conv == "gin":
        return DenseGINConv(_mlp(hidden, hidden, hidden), train_eps=True)
    if conv == "sage":
        return DenseSAGEConv(hidden, hidden)
    raise ValueError(f"conv must be one of {CONVS}, got {conv!r}")


class GraphNet(nn.Module):
    """Node embeddings by message passing, then per-node logits and a pooled value.

    Args:
        observation_space: the env's observation space (any N).
        pair: score unordered node pairs (RGC's ``action_mode="pair"``) instead of nodes.
        hidden_dim: embedding width.
        num_layers: message-passing layers; 0 switches message passing off (each node then
            sees only its own inputs and the graph features: a baseline, not for use).
        conv: the PyG layer, one of :data:`CONVS`.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        *,
        pair: bool = False,
        hidden_dim: int = 64,
        num_layers: int = 3,
        conv: str = "graphconv",
    ) -> None:
        super().__init__()
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        self.encoder = ObservationEncoder(observation_space)
        self.embed = _mlp(self.encoder.node_dim, hidden_dim, hidden_dim)
        self.convs = nn.ModuleList(make_conv(conv, hidden_dim) for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden_dim) for _ in range(num_layers))
        self.pair = pair
        ctx = hidden_dim  # mean-pooled embedding, a graph context for every node's score
        if pair:
            # additive pair scorer: w . relu(A h_i + A h_j + C mean) costs N^2 H, not N^2 H^2
            self.pair_node = nn.Linear(hidden_dim, hidden_dim)
            self.pair_ctx = nn.Linear(ctx, hidden_dim, bias=False)
            self.pair_out = nn.Linear(hidden_dim, 1)
        else:
            self.node_head = _mlp(hidden_dim + ctx, hidden_dim, 1)
        self.value_head = nn.Sequential(
            _mlp(2 * hidden_dim + self.encoder.graph_dim, hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, 1),
        )

    def embeddings(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node embeddings (B, N, H), graph inputs (B, G))``."""
        x, graph, adj = self.encoder(obs)
        h = self.embed(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(h + torch.relu(conv(h, adj)))  # residual keeps depth cheap to train
        return h, graph

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, value)``: logits (B, N), one per node, or (B, M) over the M = N(N-1)/2
        pairs (row-major upper triangle) in pair mode; value (B, 1).

        ``MultiDiscrete([N] * k)`` actions use the node logits for every slot: k changes with N
        (OD's k = ceil(0.05 N)), so slot-specific heads could not transfer across N."""
        h, graph = self.embeddings(obs)
        batch, n, width = h.shape
        mean = h.mean(1)
        ctx = mean.unsqueeze(1).expand(batch, n, width)
        if self.pair:
            rows, cols = torch.triu_indices(n, n, offset=1, device=h.device)
            a = self.pair_node(h) + 0.5 * self.pair_ctx(mean).unsqueeze(1)  # (B, N, H)
            # symmetric in (i, j)
            logits = self.pair_out(torch.relu(a[:, rows] + a[:, cols])).squeeze(-1)
        else:
            logits = self.node_head(torch.cat([h, ctx], -1)).squeeze(-1)
        value = self.value_head(torch.cat([mean, h.max(1).values, graph], -1))
        return logits, value
