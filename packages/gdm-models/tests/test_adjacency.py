"""Hard Concrete gates, XOR update, straight-through weights, edge MLP implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gdm_models import adjacency
from gdm_models.adjacency import (
    HC_BETA,
    HC_GAMMA,
    HC_ZETA,
    EdgeUpdateMLP,
    bernoulli_gate,
    hard_concrete_gate,
    hard_concrete_prob_open,
    next_edge_signed_logit,
    symmetric_uniform,
    xor_update,
)
from gdm_models.backends import use_backend
from gdm_models.reference import edge_logits_reference


def test_hard_concrete_range_and_exact_zeros_and_ones():
    g = torch.Generator().manual_seed(0)
    logits = torch.linspace(-3, 3, 13).repeat(2000)
    c = hard_concrete_gate(logits, torch.rand(logits.shape, generator=g))
    assert c.min() >= 0 and c.max() <= 1
    assert (c == 0).any() and (c == 1).any()
    assert ((c > 0) & (c < 1)).any()


@pytest.mark.parametrize("logit", [-2.0, -0.5, 0.0, 1.0, 2.5])
def test_hard_concrete_open_probability_matches_closed_form(logit):
    g = torch.Generator().manual_seed(int(10 * logit) + 100)
    n = 200_000
    c = hard_concrete_gate(torch.full((n,), logit), torch.rand(n, generator=g))
    emp = (c > 0).double().mean().item()
    # the gate is increasing in u, so P(c > 0) = 1 - u* with u* the root of c(u) = 0+ : find
    # u* by bisection on the gate itself (independent of any closed form)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        x = torch.tensor([logit, mid], dtype=torch.float64)
        opened = hard_concrete_gate(x[:1], x[1:]).item() > 0
        lo, hi = (lo, mid) if opened else (mid, hi)
    p_open = 1.0 - hi
    closed = 1 / (1 + math.exp(-logit))  # the paper's claim: with the shift, P(c > 0) = sigmoid(l)
    assert p_open == pytest.approx(closed, rel=1e-5, abs=1e-6)
    # the Hard Concrete closed form of Louizos et al.: P(c > 0) = sigmoid(l~ - beta log(-g/z))
    l_tilde = logit + HC_BETA * math.log(-HC_GAMMA / HC_ZETA)
    assert hard_concrete_prob_open(torch.tensor(logit)).item() == pytest.approx(closed, rel=1e-6)
    assert hard_concrete_prob_open(torch.tensor(l_tilde), shifted=True).item() == pytest.approx(
        closed, rel=1e-6
    )
    se = math.sqrt(closed * (1 - closed) / n)
    assert abs(emp - closed) < 5 * se


def test_hard_concrete_gate_formula_by_hand():
    u, logit = 0.3, 0.7
    l_tilde = logit + HC_BETA * math.log(-HC_GAMMA / HC_ZETA)
    s = 1 / (1 + math.exp(-(math.log(u) - math.log(1 - u) + l_tilde) / HC_BETA))
    want = min(1.0, max(0.0, s * (HC_ZETA - HC_GAMMA) + HC_GAMMA))
    got = hard_concrete_gate(torch.tensor([logit]), torch.tensor([u])).item()
    assert got == pytest.approx(want, rel=1e-6)


def test_xor_update_truth_table_and_straight_through():
    a_prev = torch.tensor([0.0, 0.0, 1.0, 1.0])
    logits = torch.tensor([-1.0, 2.0, -1.0, 2.0], requires_grad=True)
    u = torch.tensor([0.05, 0.3, 0.05, 0.3])
    c = hard_concrete_gate(logits, u)
    assert c[0] == 0 and c[2] == 0 and c[1] > 0 and c[3] > 0
    a_t, b_bar = xor_update(a_prev, c)
    assert a_t.tolist() == [0.0, 1.0, 1.0, 0.0]
    torch.testing.assert_close(b_bar.detach(), a_t)  # forward equals the hard adjacency
    b = (1 - a_prev) * c + a_prev * (1 - c)
    torch.testing.assert_close(b_bar - b, (a_t - b).detach())
    (b_bar * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    # gradient reaches the logits wherever the gate is strictly inside (0, 1)
    inside = (c > 0) & (c < 1)
    assert inside.any()
    assert (logits.grad[inside] != 0).all()
    # toggling off an existing edge: d b / d c = -1 -> opposite sign to adding an edge
    assert inside[1] and inside[3]
    assert torch.sign(logits.grad[1]) == -torch.sign(logits.grad[3])


def test_bernoulli_gate_probability_and_gradient():
    g = torch.Generator().manual_seed(0)
    logits = torch.full((100_000,), 0.4, requires_grad=True)
    gate = bernoulli_gate(logits, torch.rand(logits.shape, generator=g))
    assert set(gate.detach().unique().tolist()) <= {0.0, 1.0}
    assert gate.detach().mean().item() == pytest.approx(1 / (1 + math.exp(-0.4)), abs=0.01)
    gate.sum().backward()
    assert (logits.grad > 0).all()


def test_symmetric_uniform_one_draw_per_pair():
    u = symmetric_uniform((3, 6, 6), torch.Generator().manual_seed(0), "cpu")
    torch.testing.assert_close(u, u.transpose(-1, -2))
    assert len(torch.unique(u[0][torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)])) == 15


def test_signed_logit_next_edge_probability():
    logits = torch.tensor([1.5, 1.5])
    p = torch.sigmoid(next_edge_signed_logit(logits, torch.tensor([0.0, 1.0])))
    s = 1 / (1 + math.exp(-1.5))
    assert p.tolist() == pytest.approx([s, 1 - s])


@pytest.mark.parametrize("graph_dim", [0, 5])
def test_edge_mlp_dense_chunked_naive_agree(graph_dim):
    torch.manual_seed(0)
    m = EdgeUpdateMLP(6, graph_dim, 7)
    h, g = torch.randn(3, 9, 6), torch.randn(3, graph_dim)
    a = (torch.rand(3, 9, 9) < 0.3).float()
    a = torch.triu(a, 1)
    a = a + a.transpose(1, 2)
    dense = m.forward_dense(h, g, a)
    naive = edge_logits_reference(m, h, g, a)
    chunked = m.forward_chunked(h, g, a, chunk_elems=7 * 9 * 2)  # 2 rows per chunk
    torch.testing.assert_close(dense, naive)
    torch.testing.assert_close(chunked, naive)
    torch.testing.assert_close(dense, dense.transpose(1, 2))
    # slow reference: the MLP applied to each ordered pair's concatenated input
    i, j, b = 2, 5, 1
    x = torch.cat([h[b, i], h[b, j], g[b], a[b, i, j : j + 1]])
    w1 = torch.cat([m.w_i.weight, m.w_j.weight, *([m.w_g.weight] if graph_dim else [])], 1)
    w1 = torch.cat([w1, m.w_a[:, None]], 1)

    def f(x):
        return m.out(torch.nn.functional.silu(w1 @ x + m.b1))

    xr = torch.cat([h[b, j], h[b, i], g[b], a[b, j, i : i + 1]])
    want = 0.5 * (f(x) + f(xr))
    torch.testing.assert_close(dense[b, i, j : j + 1], want)


def test_edge_mlp_init_is_sparse_update():
    m = EdgeUpdateMLP(4, 0, 8)
    logits = m.forward_dense(torch.zeros(1, 3, 4), torch.zeros(1, 0), torch.zeros(1, 3, 3))
    p = torch.sigmoid(logits)
    assert np.allclose(p.detach().numpy(), p[0, 0, 1].item()) and p.max() < 0.1


def _sym_adjacency(b: int, n: int, p: float) -> torch.Tensor:
    a = torch.triu((torch.rand(b, n, n) < p).float(), 1)
    return a + a.transpose(1, 2)


@pytest.mark.parametrize("n", [1, 5, 23, 64])
@pytest.mark.parametrize("chunk_elems", [1, 7 * 3, 7 * 64, 7 * 64 * 64 * 2, 0])
def test_edge_mlp_chunked_equals_dense_at_any_budget(n, chunk_elems):
    # budgets: below one row (1 float), a few rows, one row at N=64, two whole graphs at
    # N=64 (several graphs per block at small N), and the device default
    torch.manual_seed(n)
    m = EdgeUpdateMLP(6, 4, 7)
    h, g = torch.randn(3, n, 6), torch.randn(3, 4)
    a = _sym_adjacency(3, n, 0.2)
    with torch.no_grad():
        dense = m.forward_dense(h, g, a)
    chunked = m.forward_chunked(h, g, a, chunk_elems=chunk_elems)
    torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-6)
    assert torch.equal(chunked, chunked.transpose(1, 2))


@pytest.mark.parametrize("checkpointed", [False, True])
def test_edge_mlp_dense_blocks_keep_values_and_gradients(checkpointed, monkeypatch):
    if checkpointed:  # any total size is "large": every block is checkpointed
        monkeypatch.setitem(adjacency.DENSE_CHECKPOINT_BYTES, "cpu", 0)
    torch.manual_seed(0)
    m = EdgeUpdateMLP(6, 4, 7)
    h = torch.randn(5, 8, 6, requires_grad=True)
    g = torch.randn(5, 4, requires_grad=True)
    a = _sym_adjacency(5, 8, 0.3)
    w = torch.randn(5, 8, 8)
    whole = m.forward_dense(h, g, a)
    grads = torch.autograd.grad((whole * w).sum(), [h, g, *m.parameters()])
    calls = []
    block = m._dense_block
    m._dense_block = lambda *args: calls.append(1) or block(*args)
    # a budget of two graphs -> 3 blocks
    blocks = m.forward_dense(h, g, a, block_elems=2 * 8 * 8 * 7)
    assert len(calls) == 3
    grads_b = torch.autograd.grad((blocks * w).sum(), [h, g, *m.parameters()])
    assert len(calls) == (6 if checkpointed else 3)  # checkpointed blocks are recomputed
    torch.testing.assert_close(blocks, whole)
    for x, y in zip(grads, grads_b, strict=True):
        torch.testing.assert_close(x, y)


def test_no_grad_gate_and_xor_equal_the_autograd_path_exactly():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 40, 40, generator=g) * 3
    u = torch.rand(3, 40, 40, generator=g)
    u[0, 0, :4] = torch.tensor([0.0, 1.0, 1e-9, 1 - 1e-9])  # the clamped ends
    u_before = u.clone()
    a_prev = (torch.rand(3, 40, 40, generator=g) < 0.3).float()
    with torch.no_grad():
        fast = hard_concrete_gate(logits, u)
        a_fast, b_fast = xor_update(a_prev, fast)
    assert torch.equal(u, u_before)  # the caller's uniforms are not modified
    ref = hard_concrete_gate(logits.requires_grad_(), u)
    a_ref, b_ref = xor_update(a_prev, ref)
    assert torch.equal(fast, ref.detach()) and torch.equal(a_fast, a_ref)
    torch.testing.assert_close(b_fast, b_ref.detach())  # forward of b_bar = A_t


@pytest.mark.exact_float
def test_forward_chunked_shares_bitwise_equal_graphs():
    """Graphs whose projections are equal bit for bit (the kappa samples of one imagination
    without a graph state) compute their pairwise block once: same result, bit for bit."""
    from gdm_models.adjacency import same_rows

    torch.manual_seed(0)
    m = EdgeUpdateMLP(6, 4, 7)
    h = torch.randn(4, 9, 6)
    h[2] = h[0]
    g = torch.randn(4, 4)
    g[2] = g[0]
    g[3] = g[1]  # same graph term, other node states: not shared
    a = _sym_adjacency(4, 9, 0.2)
    with torch.no_grad():
        pc, q = m.w_i(h) + m.w_g(g)[:, None], m.w_j(h)
    assert same_rows(pc, q) == [0, 1, 0, 3]
    shared = m.forward_chunked(h, g, a, chunk_elems=9 * 7 * 2)  # row blocks
    with use_backend("compiled", share_identical=False):
        plain = m.forward_chunked(h, g, a, chunk_elems=9 * 7 * 2)
    assert torch.equal(shared, plain)
    assert not torch.equal(shared[0], shared[1])


@pytest.mark.parametrize("chunk_elems", [7 * 9 * 2, 0])  # row blocks, whole graphs
def test_exp_split_is_the_silu_up_to_rounding_and_computes_no_pairwise_silu(
    chunk_elems, monkeypatch
):
    """forward_chunked's pairwise SiLUs from per-node exponentials, silu(P_i + Q_j) =
    (P_i + Q_j) / (1 + e^-P_i e^-Q_j), in torch blocks (the compiled loop off): the same
    logits up to float rounding, and no SiLU over the (pairs x hidden) block (only the few
    existing edges' rows)."""
    torch.manual_seed(3)
    m = EdgeUpdateMLP(6, 4, 7)
    h, g = 2 * torch.randn(3, 9, 6), torch.randn(3, 4)
    a = _sym_adjacency(3, 9, 0.2)
    exact = torch.nn.functional.silu
    sizes: list[int] = []
    monkeypatch.setattr(
        adjacency.F, "silu", lambda x, **kw: sizes.append(x.numel()) or exact(x, **kw)
    )
    with use_backend("compiled", loops=False):
        split = m.forward_chunked(h, g, a, chunk_elems=chunk_elems)
    assert max(sizes) == int(a.sum()) * 7  # the existing edges' recomputed rows only
    sizes.clear()
    with use_backend("compiled", loops=False, exp_split=False):
        plain = m.forward_chunked(h, g, a, chunk_elems=chunk_elems)
    assert max(sizes) >= 9 * 7  # the plain path's SiLU over whole rows of pairs
    torch.testing.assert_close(split, plain, rtol=1e-6, atol=1e-6)
    assert torch.equal(split, split.transpose(1, 2))


@pytest.mark.exact_float
def test_exp_split_falls_back_to_silu_beyond_its_bound():
    """|P| or |Q| above EXP_SPLIT_BOUND (e^-P e^-Q could overflow or underflow): the plain
    SiLU, bit for bit, and still the dense path's function."""
    torch.manual_seed(4)
    m = EdgeUpdateMLP(6, 0, 7)
    h, g = torch.randn(2, 8, 6), torch.zeros(2, 0)
    h[1, 3] = 500.0  # projections of hundreds
    a = _sym_adjacency(2, 8, 0.3)
    with torch.no_grad():
        assert m.w_i(h).abs().max() > adjacency.EXP_SPLIT_BOUND
        dense = m.forward_dense(h, g, a)
    split = m.forward_chunked(h, g, a)
    assert torch.equal(split, m.forward_chunked(h, g, a, chunk_elems=8 * 7))
    with use_backend("compiled", exp_split=False):
        plain = m.forward_chunked(h, g, a)
    assert torch.equal(split, plain) and torch.isfinite(split).all()
    torch.testing.assert_close(split, dense, rtol=1e-5, atol=1e-4)
