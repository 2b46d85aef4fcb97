"""SparseGAT-style message passing on the sampled adjacency (paper, "Adjacency Prediction and
Message Passing"; Ye & Ji 2019).

Layer l:  m^(l+1) = LayerNorm(W_root^(l) m^(l) + SparseGAT^(l)(m^(l))),  m^(0) = h,
with SparseGAT^(l)(m)_i = sum_j alpha_ij W^(l) m_j and alpha_ij = w_ij / sum_k w_ik, where the
edge weights w_ij are the straight-through next-edge weights b_bar_ij (teacher-forced A_t(i,j)
on the posterior path). The normalised weights are shared by every attention head and layer,
so the concatenation of K heads W_k m_j equals a single linear map W m_j; it is implemented
as one. [h_g, z_g] is injected in the first layer by concatenating it to every node's input.
A node without neighbours (sum_k w_ik = 0) receives no message.

Two equivalent backends: :meth:`GraphMessagePassing.forward_dense` (batched matrix products;
used in training, where the gradient must reach every edge weight including the zero ones of
non-edges, and for the all-pairs ablations) and :meth:`GraphMessagePassing.forward_sparse`
(a gather and ``scatter_add_`` over the sampled edges, the same operations in the same order
as torch_geometric's ``MessagePassing(aggr="add")``, so the two agree bit for bit; used for
imagination on large sparse graphs). torch_geometric itself is not imported: its import
(torch._dynamo included) took seconds in the driver and in every worker.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .member_ops import loop_bias, loop_norm, member_mm

__all__ = [
    "normalise_weights",
    "SparseGATLayer",
    "GraphMessagePassing",
    "dense_to_edges",
    "FlatMessagePassing",
]


def normalise_weights(w: torch.Tensor) -> torch.Tensor:
    """alpha_ij = w_ij / sum_k w_ik over the last axis; rows summing to 0 stay 0."""
    s = w.sum(dim=-1, keepdim=True)
    return w / torch.where(s > 0, s, torch.ones_like(s))


def dense_to_edges(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Edges of a (B, N, N) hard adjacency as a PyG ``edge_index`` (messages j -> i) over the
    flattened B*N nodes, with weights alpha_ij = 1 / deg(i)."""
    b, n, _ = a.shape
    bi, i, j = torch.nonzero(a, as_tuple=True)
    deg = a.sum(-1)
    w = (1.0 / deg[bi, i]).to(a.dtype)
    edge_index = torch.stack([bi * n + j, bi * n + i])  # source j, target i
    return edge_index, w


class SparseGATLayer(nn.Module):
    """One layer: LayerNorm(W_root x_i + sum_j alpha_ij W x_j)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.root = nn.Linear(in_dim, out_dim, bias=True)
        self.norm = nn.LayerNorm(out_dim)

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor
    ) -> torch.Tensor:
        """Sparse: x (M, in), edge_index (2, E) (source, target), edge_weight (E,) alpha."""
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
        return self.norm(self.root(x) + self.propagate(edge_index, self.lin(x), edge_weight))

    @staticmethod
    def propagate(
        edge_index: torch.Tensor, x: torch.Tensor, edge_weight: torch.Tensor
    ) -> torch.Tensor:
        """sum_j alpha_ij x_j for every target i of ``edge_index`` (M, out): torch_geometric's
        ``MessagePassing(aggr="add")`` path (gather the sources with ``index_select``, weight
        them, ``scatter_add_`` into zeros along the node axis with the target index expanded
        over the features), so the sums run in the same order."""
        msg = edge_weight[:, None] * x.index_select(-2, edge_index[0])
        index = edge_index[1].view(-1, 1).expand_as(msg)
        return msg.new_zeros(x.shape).scatter_add_(-2, index, msg)

    def forward_dense(self, x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """Dense: x (B, N, in), alpha (B, N, N) normalised weights (row i receives)."""
        return self.norm(self.root(x) + torch.matmul(alpha, self.lin(x)))


class GraphMessagePassing(nn.Module):
    """L SparseGAT-style layers with [h_g, z_g] injected into the first layer."""

    def __init__(self, node_dim: int, inject_dim: int, layers: int) -> None:
        super().__init__()
        if layers < 0:
            raise ValueError("layers must be >= 0")
        self.inject_dim = inject_dim
        self.layers = nn.ModuleList(
            [
                SparseGATLayer(node_dim + (inject_dim if k == 0 else 0), node_dim)
                for k in range(layers)
            ]
        )

    def _inject(self, h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        if self.inject_dim == 0:
            return h
        return torch.cat([h, g[:, None, :].expand(-1, h.shape[1], -1)], dim=-1)

    def forward_dense(
        self, h: torch.Tensor, g: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """h (B, N, H), g (B, inject_dim), weights (B, N, N) unnormalised w_ij -> (B, N, H)."""
        if not self.layers:
            return h
        return self.forward_normalised(h, g, normalise_weights(weights))

    def forward_normalised(
        self, h: torch.Tensor, g: torch.Tensor, alpha: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward_dense` with precomputed normalised weights alpha (B, N, N)."""
        if not self.layers:
            return h
        m = self._inject(h, g)
        for layer in self.layers:
            assert isinstance(layer, SparseGATLayer)
            m = layer.forward_dense(m, alpha)
        return m

    def forward_neighbours(
        self, h: torch.Tensor, g: torch.Tensor, adjacency: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward_sparse` on the CPU without autograd: the mean over each node's
        neighbours in a compiled loop over neighbour lists made once for every layer
        (:class:`gdm_models.cpu_kernels.Neighbours`), float32."""
        if not self.layers:
            return h
        from .cpu_kernels import Neighbours

        nb = Neighbours(adjacency)
        m = self._inject(h, g)
        for layer in self.layers:
            assert isinstance(layer, SparseGATLayer)
            m = layer.norm(layer.root(m) + nb.mean(layer.lin(m)))
        return m

    def forward_sparse(
        self, h: torch.Tensor, g: torch.Tensor, adjacency: torch.Tensor
    ) -> torch.Tensor:
        """Same as :meth:`forward_dense` for a hard 0/1 adjacency (B, N, N), via PyG."""
        if not self.layers:
            return h
        b, n, _ = h.shape
        edge_index, w = dense_to_edges(adjacency)
        m = self._inject(h, g).reshape(b * n, -1)
        for layer in self.layers:
            m = layer(m, edge_index, w)
        return m.reshape(b, n, -1)


class FlatMessagePassing:
    """:meth:`GraphMessagePassing.forward_normalised` in the flat form of a recurrence (node
    states (B*N, H) or, in a member model, (K, B*N/K, H)), with each layer's two linear maps
    W and W_root stacked into one product [W | W_root] (paper, "Adjacency Prediction and
    Message Passing": m <- LayerNorm(W_root m + alpha (W m))). Made once per recurrence from
    the module (its weights transposed and shaped once).

    The first layer's input is [m, h_g, z_g]; :attr:`first` holds its node rows as the
    block ``([W | W_root]^T node rows, [0 | b_root])`` and :attr:`first_g` its h_g and z_g
    rows, for a :class:`~gdm_models.layers.FusedLinear` of every map that reads the same
    state: the caller passes layer 0's product ``y`` to :meth:`__call__`."""

    def __init__(self, mp: GraphMessagePassing, node_dim: int, hg_dim: int, zg_dim: int) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor | None, Any]] = []
        self.first_g: tuple[torch.Tensor, torch.Tensor] | None = None
        for k, layer in enumerate(mp.layers):
            assert isinstance(layer, SparseGATLayer)
            w = torch.cat([layer.lin.weight, layer.root.weight], -2)
            b = torch.cat([torch.zeros_like(layer.root.bias), layer.root.bias], -1)
            sizes = [node_dim, hg_dim, zg_dim] if k == 0 else [node_dim, 0, 0]
            w_h, w_hg, w_zg = (p.transpose(-1, -2) for p in w.split(sizes, -1))
            if k == 0:
                self.first = (w_h, b)
                self.first_g = (w_hg, w_zg)
            self.layers.append((w_h, loop_bias(b, w_h), loop_norm(layer.get_submodule("norm"))))

    def __bool__(self) -> bool:
        return bool(self.layers)

    def __call__(
        self, y: torch.Tensor, alpha: torch.Tensor, b: int, n: int, rows: tuple[int, ...]
    ) -> torch.Tensor:
        """m^(L) from layer 0's products ``y`` = [W m | W_root m + b_root] ([h_g, z_g]
        included), ``alpha`` (B, N, N) normalised weights; ``rows``: the node rows' shape,
        (B*N,), or (K, B*N/K) in a member model."""
        hid = y.shape[-1] // 2
        m = y
        for k, (w_h, bias, norm) in enumerate(self.layers):
            if k > 0:
                y = member_mm(m, w_h, bias)
            lin, root = y.view(b, n, 2 * hid).split([hid, hid], -1)
            agg = torch.baddbmm(root, alpha, lin)
            if len(rows) == 1:
                m = norm(agg).view(b * n, hid)
            else:  # a member model: the norm on the (K, rows, hid) view
                m = norm(agg.view(*rows, hid))
        return m
