"""Schultz-Heitzig-Kurths random growth model for power grids (the CF initial graph).

Schultz, Heitzig and Kurths (2014), "A random growth model for power grids and other spatially
embedded infrastructure networks". Paper appendix "Cascading Failures": parameters
``n0 = 0.5 N, p = 0.5, q = 0.5, r = 1/3, s = 0.1``.

Construction on the unit square (the model is scale invariant: only ratios of distances enter):

* I1: ``n0`` points uniform in the unit square.
* I2: the Euclidean minimum spanning tree of these points.
* I3: ``m = min(floor(n0 (1-s)(p+q)), n0(n0-1)/2 - (n0-1))`` redundant links, each the not yet
  linked pair ``(i, j)`` minimising ``f(i, j) = d_spatial(i, j) / (1 + d_graph(i, j))^r``
  (``d_graph`` in hops, updated after every added link).
* Growth, one node ``i`` at a time until N nodes (the split is sampled first, as in the
  authors' reference code "SyntheticNetworks"):

  - G5, with probability ``s``: pick an existing link ``a-b`` uniformly, place ``i`` at its
    midpoint, remove ``a-b`` and add ``i-a`` and ``i-b``;
  - otherwise G1/G2: place ``i`` uniformly and link it to its spatially nearest node; G3: with
    probability ``p`` add the link ``i-l`` minimising ``f(i, l)`` over the non-neighbours ``l``
    of ``i``; G4: with probability ``q`` draw a node ``i'`` uniformly among all current nodes
    (the new one included) and add its link minimising ``f(i', l')``. A G3/G4 step that finds
    no candidate (the node is already linked to every other node) adds nothing.

Expected mean degree for large N: ``2 (s + (1-s)(1+p+q))`` (3.8 for the paper's parameters).
The graph is connected by construction (every step keeps it connected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import rustworkx as rx
from scipy.sparse import csr_array
from scipy.sparse.csgraph import minimum_spanning_tree, shortest_path
from scipy.spatial.distance import pdist, squareform

from graphwm_envs.core.params import check_real


@dataclass(frozen=True)
class SHKParams:
    """Parameters of the SHK model (defaults: the paper's CF values).

    Args:
        n0_frac: size of the initial tree as a fraction of N (``n0 = ceil(n0_frac N)``, at
            least 2).
        p: probability of G3 (best extra link of the new node).
        q: probability of G4 (best extra link of a random node).
        r: exponent of the redundancy/cost trade-off in ``f``.
        s: probability of G5 (split a random link at its midpoint).
    """

    n0_frac: float = 0.5
    p: float = 0.5
    q: float = 0.5
    r: float = 1.0 / 3.0
    s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("n0_frac", "p", "q", "s"):
            check_real(self, name, low=0.0, high=1.0)
        check_real(self, "r", low=0.0)

    def initial_size(self, num_nodes: int) -> int:
        """``n0 = max(2, ceil(n0_frac * N))``, capped at N."""
        return min(num_nodes, max(2, math.ceil(self.n0_frac * num_nodes - 1e-9)))

    def redundant_links(self, n0: int) -> int:
        """Number of I3 links: ``min(floor(n0 (1-s)(p+q)), n0(n0-1)/2 - (n0-1))``."""
        wanted = math.floor(n0 * (1.0 - self.s) * (self.p + self.q) + 1e-9)
        return max(0, min(wanted, n0 * (n0 - 1) // 2 - (n0 - 1)))

    def expected_mean_degree(self) -> float:
        """Large-N mean degree ``2 (s + (1-s)(1+p+q))`` (every step finding a candidate)."""
        return 2.0 * (self.s + (1.0 - self.s) * (1.0 + self.p + self.q))


@dataclass
class SHKGraph:
    """An SHK graph: boolean (N, N) adjacency and (N, 2) node positions in the unit square."""

    adjacency: np.ndarray
    positions: np.ndarray


def _initial_phase(pos: np.ndarray, params: SHKParams) -> np.ndarray:
    """Steps I2 (MST) and I3 (redundant links) on the first n0 points; returns the adjacency."""
    n0 = len(pos)
    dist = squareform(pdist(pos))
    adj = np.zeros((n0, n0), dtype=bool)
    if n0 < 2:
        return adj
    tree = minimum_spanning_tree(csr_array(dist)).tocoo()
    adj[tree.row, tree.col] = True
    adj |= adj.T
    m = params.redundant_links(n0)
    if m == 0:
        return adj
    # hop distances on the tree; kept exact under link additions (see the block update below)
    hops = shortest_path(csr_array(adj.astype(np.int8)), unweighted=True, directed=False)
    hops = hops.astype(np.int64)
    inv_pow = (1.0 + np.arange(n0 + 1, dtype=np.float64)) ** (-params.r)
    # f(i, j) = d_spatial / (1 + d_graph)^r  (Schultz et al. 2014, eq. 1); linked pairs excluded
    score = dist * inv_pow[hops]
    score[adj] = np.inf
    np.fill_diagonal(score, np.inf)
    for _ in range(m):
        flat = int(np.argmin(score))
        a, b = divmod(flat, n0)
        adj[a, b] = adj[b, a] = True
        # A new link a-b shortens d(i, j) only for i closer to a (d(i,a)+1 < d(i,b)) and
        # j closer to b (d(b,j)+1 < d(a,j)); update that block and its transpose.
        rows = np.flatnonzero(hops[:, a] + 1 < hops[:, b])
        cols = np.flatnonzero(hops[b, :] + 1 < hops[a, :])
        block = hops[np.ix_(rows, cols)]
        via = hops[rows, a][:, None] + 1 + hops[b, cols][None, :]
        improved = via < block
        if improved.any():
            new_block = np.where(improved, via, block)
            hops[np.ix_(rows, cols)] = new_block
            hops[np.ix_(cols, rows)] = new_block.T
            ri, ci = np.nonzero(improved)
            r_idx, c_idx = rows[ri], cols[ci]
            new_score = dist[r_idx, c_idx] * inv_pow[new_block[ri, ci]]
            score[r_idx, c_idx] = new_score
            score[c_idx, r_idx] = new_score
        score[a, b] = score[b, a] = np.inf
    return adj


def _hop_distances(graph: rx.PyGraph, source: int, num_nodes: int) -> np.ndarray:
    """Hop distance from ``source`` to the first ``num_nodes`` nodes (graph is connected)."""
    hops = np.full(num_nodes, np.iinfo(np.int64).max // 4, dtype=np.int64)
    for depth, layer in enumerate(rx.bfs_layers(graph, [source])):
        hops[np.asarray(layer, dtype=np.int64)] = depth
    return hops


def _best_link(
    node: int,
    present: int,
    pos: np.ndarray,
    adj: np.ndarray,
    graph: rx.PyGraph,
    r: float,
) -> int | None:
    """The non-neighbour ``l`` of ``node`` among the first ``present`` nodes minimising
    ``d_spatial(node, l) / (1 + d_graph(node, l))^r``; ``None`` if there is no candidate."""
    candidate = ~adj[node, :present]
    candidate[node] = False
    if not candidate.any():
        return None
    d_spatial = np.linalg.norm(pos[:present] - pos[node], axis=1)
    hops = _hop_distances(graph, node, present)
    score = np.where(candidate, d_spatial / (1.0 + hops) ** r, np.inf)
    return int(np.argmin(score))


def shk_graph(
    rng: np.random.Generator, num_nodes: int, params: SHKParams | None = None
) -> SHKGraph:
    """Sample an SHK graph with exactly ``num_nodes`` nodes (connected for N >= 2).

    Args:
        rng: source of every random choice (the result is a pure function of its state).
        num_nodes: number of nodes N (>= 2).
        params: model parameters; the paper's CF values by default.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int | np.integer):
        raise TypeError(f"num_nodes must be an int, got {num_nodes!r}")
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    params = params or SHKParams()
    n = int(num_nodes)
    n0 = params.initial_size(n)
    pos = np.zeros((n, 2), dtype=np.float64)
    pos[:n0] = rng.random((n0, 2))  # I1
    adj = np.zeros((n, n), dtype=bool)
    adj[:n0, :n0] = _initial_phase(pos[:n0], params)

    graph = rx.PyGraph(multigraph=False)
    graph.add_nodes_from(range(n0))
    rows, cols = np.nonzero(np.triu(adj[:n0, :n0], k=1))
    graph.add_edges_from_no_data(list(zip(rows.tolist(), cols.tolist(), strict=True)))

    def link(u: int, v: int) -> None:
        adj[u, v] = adj[v, u] = True
        graph.add_edge(u, v, None)

    for i in range(n0, n):
        graph.add_node(i)
        present = i + 1
        if rng.random() < params.s and graph.num_edges() > 0:
            # G5: split a uniformly chosen link at its midpoint
            a, b = graph.edge_list()[int(rng.integers(graph.num_edges()))]
            pos[i] = 0.5 * (pos[a] + pos[b])
            adj[a, b] = adj[b, a] = False
            graph.remove_edge(a, b)
            link(i, a)
            link(i, b)
            continue
        pos[i] = rng.random(2)  # G1
        nearest = int(np.argmin(np.linalg.norm(pos[:i] - pos[i], axis=1)))  # G2
        link(i, nearest)
        if rng.random() < params.p:  # G3
            best = _best_link(i, present, pos, adj, graph, params.r)
            if best is not None:
                link(i, best)
        if rng.random() < params.q:  # G4
            other = int(rng.integers(present))
            best = _best_link(other, present, pos, adj, graph, params.r)
            if best is not None:
                link(other, best)
    return SHKGraph(adjacency=adj, positions=pos)
