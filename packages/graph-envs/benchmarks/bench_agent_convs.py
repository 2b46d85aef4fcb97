"""Speed of the message-passing layers the graph agent could use (docs/agents.md).

Usage::

    uv run python packages/graph-envs/benchmarks/bench_agent_convs.py

Forward + backward of three layers of width 64 over a batch of 64 random graphs (edge
probability 0.2) at N = 20 and 50, one CPU thread: PyTorch Geometric's dense layers on the
(B, N, N) adjacency, and sparse layers on one PyG batch built from it (the conversion
included, as a policy would pay it every call). Milliseconds per call, and each layer's time
relative to ``DenseGraphConv`` measured in the same run.
"""

from __future__ import annotations

import time

import torch
from graphwm_envs.agents.network import make_conv
from torch import nn
from torch_geometric.nn import GATv2Conv, GINConv, GraphConv
from torch_geometric.utils import dense_to_sparse

HIDDEN, BATCH, LAYERS = 64, 64, 3


def _time(fn, reps: int = 20) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e3


def main() -> None:
    """Print the table."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    sparse = {
        "GraphConv": lambda: GraphConv(HIDDEN, HIDDEN, aggr="mean"),
        "GINConv": lambda: GINConv(
            nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))
        ),
        "GATv2Conv": lambda: GATv2Conv(HIDDEN, HIDDEN),
    }
    for n in (20, 50):
        adj = (torch.rand(BATCH, n, n, generator=gen) < 0.2).float()
        adj = ((adj + adj.transpose(1, 2)) > 0).float()
        x = torch.randn(BATCH, n, HIDDEN, generator=gen, requires_grad=True)
        res = {}
        for name in ("graphconv", "gin", "sage"):
            layers = nn.ModuleList(make_conv(name, HIDDEN) for _ in range(LAYERS))

            def dense(layers=layers, x=x, adj=adj):
                h = x
                for layer in layers:
                    h = torch.relu(layer(h, adj))
                h.sum().backward()

            res[f"dense {name}"] = _time(dense)
        for name, make in sparse.items():
            layers = nn.ModuleList(make() for _ in range(LAYERS))

            def sparse_fn(layers=layers, x=x, adj=adj, n=n):
                edge_index, _ = dense_to_sparse(adj)
                h = x.reshape(BATCH * n, HIDDEN)
                for layer in layers:
                    h = torch.relu(layer(h, edge_index))
                h.sum().backward()

            res[f"sparse {name}"] = _time(sparse_fn)
        ref = res["dense graphconv"]
        for name, ms in res.items():
            print(f"N = {n:3d}  {name:18s} {ms:7.2f} ms  ({ms / ref:4.1f}x DenseGraphConv)")


if __name__ == "__main__":
    main()
