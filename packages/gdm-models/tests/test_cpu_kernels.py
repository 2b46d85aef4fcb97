"""The compiled CPU loops of imagination (gdm_models.cpu_kernels) against the torch code they
stand for, and the no-autograd shortcuts of the gate and the message passing."""

from __future__ import annotations

import pytest
import torch
from gdm_models import adjacency, cpu_kernels
from gdm_models.adjacency import (
    EdgeUpdateMLP,
    hard_concrete_gate,
    hard_concrete_open,
    symmetric_uniform,
)
from gdm_models.backends import use_backend
from gdm_models.gdm.config import GDMConfig
from gdm_models.gdm.parts import AdjacencyPart
from gdm_models.reference import edge_logits_reference

#: bit-for-bit claims against torch's own kernels, which differ by CPU instruction set
pytestmark = pytest.mark.exact_float


def _sym_adjacency(b: int, n: int, p: float, gen: torch.Generator) -> torch.Tensor:
    a = torch.triu((torch.rand(b, n, n, generator=gen) < p).float(), 1)
    return a + a.transpose(1, 2)


def _counting(monkeypatch, module, name: str) -> list[int]:
    calls: list[int] = []
    fn = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or fn(*a, **k))
    return calls


@pytest.mark.parametrize("seed", range(12))
def test_compiled_edge_mlp_is_the_reference_function(seed, monkeypatch):
    """forward_chunked through the compiled loop (existing edges, graph term or none, any N,
    hidden width) gives the concatenated-input reference's logits up to float rounding, and
    computes no SiLU by torch (the loop did the work)."""
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 41, (1,), generator=gen))
    hid = [1, 7, 33][seed % 3]
    graph_dim = 4 if seed % 2 else 0
    torch.manual_seed(seed)
    m = EdgeUpdateMLP(6, graph_dim, hid)
    with torch.no_grad():
        m.out.weight.normal_(generator=gen)
        m.b1.normal_(generator=gen)
    h, g = 2 * torch.randn(3, n, 6, generator=gen), torch.randn(3, graph_dim, generator=gen)
    a = _sym_adjacency(3, n, float(torch.rand(1, generator=gen)), gen)
    with torch.no_grad():
        ref = edge_logits_reference(m, h, g, a)
    loops = _counting(monkeypatch, cpu_kernels, "pair_logits")
    silus = _counting(monkeypatch, adjacency.F, "silu")
    fast = m.forward_chunked(h, g, a)
    assert loops == [1] and silus == []
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(fast, fast.transpose(1, 2))


def test_compiled_edge_mlp_matches_the_torch_blocks_within_rounding():
    """The loop and the torch blocks (the backend's loops off) compute the same units; only
    the order of the second layer's sum differs."""
    torch.manual_seed(0)
    m = EdgeUpdateMLP(16, 8, 32)
    h, g = torch.randn(4, 50, 16), torch.randn(4, 8)
    a = _sym_adjacency(4, 50, 0.05, torch.Generator().manual_seed(1))
    fast = m.forward_chunked(h, g, a)
    with use_backend("compiled", loops=False):
        blocks = m.forward_chunked(h, g, a)
    assert not torch.equal(fast, blocks)  # really two computations
    torch.testing.assert_close(fast, blocks, rtol=2e-6, atol=2e-6)


def test_pair_logits_writes_only_the_named_graphs():
    torch.manual_seed(1)
    pc, q = torch.randn(3, 5, 4), torch.randn(3, 5, 4)
    w_a, w2 = torch.randn(4), torch.randn(4)
    a = _sym_adjacency(3, 5, 0.4, torch.Generator().manual_seed(2))
    out = torch.full((3, 5, 5), float("nan"))
    cpu_kernels.pair_logits(pc, q, w_a, w2, 0.25, a, [0, 2], out)
    assert torch.isnan(out[1]).all() and not torch.isnan(out[[0, 2]]).any()
    x = pc[:, :, None, :] + q[:, None, :, :] + a[..., None] * w_a
    want = torch.nn.functional.silu(x) @ w2 + 0.25
    torch.testing.assert_close(out[[0, 2]], want[[0, 2]], rtol=1e-5, atol=1e-6)


def test_graphs_with_equal_projections_but_other_edges_are_not_shared():
    """Sharing copies a graph's logits only when its A_{t-1} is the same too (the existing
    edges are part of the compiled pass)."""
    torch.manual_seed(2)
    m = EdgeUpdateMLP(6, 0, 7)
    h, g = torch.randn(3, 9, 6), torch.zeros(3, 0)
    h[1] = h[0]
    h[2] = h[0]
    a = _sym_adjacency(3, 9, 0.3, torch.Generator().manual_seed(3))
    a[2] = a[0]
    a[1, 0, 1] = a[1, 1, 0] = 1.0 - a[0, 0, 1]  # graph 1: one edge differs from graph 0
    shared = m.forward_chunked(h, g, a)
    with use_backend("compiled", share_identical=False):
        plain = m.forward_chunked(h, g, a)
    assert torch.equal(shared, plain)
    assert torch.equal(shared[2], shared[0]) and not torch.equal(shared[1], shared[0])


def test_edge_weight_beyond_the_split_bound_takes_the_torch_path(monkeypatch):
    """|P + w_A| above EXP_SPLIT_BOUND (e^-(P + w_A) e^-Q could overflow): not the loop; the
    result is still the reference function."""
    torch.manual_seed(4)
    m = EdgeUpdateMLP(6, 0, 7)
    with torch.no_grad():
        m.w_a.fill_(60.0)
    h, g = torch.randn(2, 8, 6), torch.zeros(2, 0)
    a = _sym_adjacency(2, 8, 0.3, torch.Generator().manual_seed(5))
    loops = _counting(monkeypatch, cpu_kernels, "pair_logits")
    with torch.no_grad():
        out = m.forward_chunked(h, g, a)
        ref = edge_logits_reference(m, h, g, a)
    assert loops == [] and torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 130])
def test_symmetrise_and_mirror_are_bitwise_the_torch_expressions(n):
    gen = torch.Generator().manual_seed(n)
    f = torch.randn(2, n, n, generator=gen)
    want = 0.5 * (f + f.transpose(-1, -2))
    assert torch.equal(cpu_kernels.symmetrise_(f.clone()), want)
    u = torch.rand(2, n, n, generator=gen)
    upper = torch.triu(u, 1)
    want = upper + upper.transpose(-1, -2) + 0.5 * torch.eye(n)
    assert torch.equal(cpu_kernels.mirror_upper_(u.clone()), want)


def test_symmetric_uniform_draws_what_it_drew_before():
    """Same generator, same uniforms bit for bit as the torch construction (any leading
    axes), so imagined samples keep their seeds."""
    shape = (2, 3, 17, 17)
    u = torch.rand(shape, generator=torch.Generator().manual_seed(7))
    upper = torch.triu(u, 1)
    want = upper + upper.transpose(-1, -2) + 0.5 * torch.eye(17)
    with torch.no_grad():  # the compiled pass
        got = symmetric_uniform(shape, torch.Generator().manual_seed(7), "cpu")
    assert torch.equal(got, want)
    assert torch.equal(symmetric_uniform(shape, torch.Generator().manual_seed(7), "cpu"), want)


def test_kernels_name_bad_input():
    with pytest.raises(ValueError, match="float32"):
        cpu_kernels.symmetrise_(torch.zeros(1, 3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(B, N, N\)"):
        cpu_kernels.mirror_upper_(torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="do not match"):
        z = torch.zeros(1, 3, 4)
        cpu_kernels.pair_logits(z, z, torch.zeros(5), torch.zeros(4), 0.0, z, [0], z)
    z = torch.zeros(2, 3, 3)
    with torch.no_grad(), pytest.raises(ValueError, match="pair mask"):
        cpu_kernels.open_xor_(z, z, z, torch.ones(2, 3, 3), 1e-6)  # a float mask


@pytest.mark.parametrize("hc", [(2 / 3, -0.1, 1.1), (0.3, -0.5, 1.7), (1.5, -0.01, 1.02)])
def test_gate_open_event_is_the_gates_support(hc):
    """1[c > 0] of the Hard Concrete gate is 1[u > sigmoid(-l)] for any beta > 0, gamma < 0,
    zeta > 1: equal except within float rounding of the boundary logit(u) + l = 0."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 60, 60, generator=gen) * 4
    u = torch.rand(20, 60, 60, generator=gen)
    u[0, 0, :4] = torch.tensor([0.0, 1.0, 1e-9, 1 - 1e-9])  # the clamped ends
    with torch.no_grad():
        support = hard_concrete_gate(logits, u, *hc) > 0
        fast = hard_concrete_open(logits, u)
    differ = support != fast
    uc = u.clamp(adjacency.EPS, 1 - adjacency.EPS)
    margin = (torch.log(uc) - torch.log1p(-uc) + logits).abs()
    assert differ.sum() <= 2 and bool((margin[differ] < 1e-5).all())
    assert 0.2 < fast.float().mean() < 0.8  # both events occur


@pytest.mark.parametrize("sampler", ["hard_concrete", "bernoulli"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # compiled pass, torch
def test_no_grad_sampling_is_the_gate_and_xor(dtype, sampler, monkeypatch):
    """AdjacencyPart.sample without autograd (the open event, one xor) gives the A_t of the
    gate-and-xor path, for either gate; the diagonal never toggles."""
    loops = _counting(monkeypatch, cpu_kernels, "open_xor_")
    part = AdjacencyPart(GDMConfig(adjacency_sampler=sampler), 8)
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(6, 30, 30, generator=gen) * 3).to(dtype)
    logits = 0.5 * (logits + logits.transpose(1, 2))
    u = symmetric_uniform((6, 30, 30), gen, "cpu").to(dtype)
    a_prev = _sym_adjacency(6, 30, 0.2, gen).to(dtype)
    pm = ~torch.eye(30, dtype=torch.bool)[None]
    with torch.no_grad():
        a_fast, b_fast = part.sample(logits, a_prev, pm, u)
    with torch.enable_grad():
        a_ref, _ = part.sample(logits.clone().requires_grad_(), a_prev, pm, u)
    assert torch.equal(a_fast, a_ref.detach()) and torch.equal(b_fast, a_fast)
    assert torch.equal(a_fast, a_fast.transpose(1, 2))
    assert not a_fast.diagonal(dim1=1, dim2=2).any()
    assert not torch.equal(a_fast, a_prev)  # something toggled
    assert len(loops) == (dtype == torch.float32)


@pytest.mark.parametrize("seed", range(6))
def test_symmetric_bernoulli_draw_is_bitwise_the_torch_draw(seed, monkeypatch):
    """The baselines' adjacency draw (one Bernoulli per unordered pair of real nodes) through
    the compiled pass equals the torch construction bit for bit, padded nodes included."""
    from gdm_models.baselines import common

    gen = torch.Generator().manual_seed(seed)
    n = [1, 2, 17, 64, 65, 100][seed]
    logits = torch.randn(3, n, n, generator=gen) * 2
    mask = torch.rand(3, n, generator=gen) < 0.8
    loops = _counting(monkeypatch, cpu_kernels, "upper_draw_")
    with torch.no_grad():
        fast = common.sample_symmetric_bernoulli(logits, mask, torch.Generator().manual_seed(9))
        with torch.enable_grad():  # the torch construction (autograd on, a leaf logit)
            slow = common.sample_symmetric_bernoulli(
                logits.clone().requires_grad_(), mask, torch.Generator().manual_seed(9)
            )
    assert loops == [1]
    assert torch.equal(fast, slow.detach())
    assert torch.equal(fast, fast.transpose(1, 2)) and not fast.diagonal(0, 1, 2).any()
    assert not fast[~mask].any()  # no edge on a padded node
    if n > 10:
        assert fast.any()


@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_gcn_normalisation_is_bitwise_the_torch_one(seed, self_loops, monkeypatch):
    """D^-1/2 (A + I) D^-1/2 of a 0/1 adjacency through the compiled passes equals the torch
    operations bit for bit (padded nodes, isolated nodes, a non-zero diagonal ignored); edge
    probabilities take the torch operations."""
    from gdm_models.baselines import ea_losses

    gen = torch.Generator().manual_seed(seed)
    n = [1, 9, 64, 130][seed]
    a = _sym_adjacency(3, n, 0.1, gen)
    a[0, 0, 0] = 1.0  # a self-loop in the input: ignored by both
    mask = torch.rand(3, n, generator=gen) < 0.8
    loops = _counting(monkeypatch, cpu_kernels, "gcn_normalised")
    with torch.no_grad():
        fast = ea_losses.normalized_adjacency(a, mask, self_loops)
    slow = ea_losses.normalized_adjacency(a.clone().requires_grad_(), mask, self_loops)
    assert loops == [1] and torch.equal(fast, slow.detach())
    probs = a * 0.5
    with torch.no_grad():
        soft = ea_losses.normalized_adjacency(probs, mask, self_loops)
    ref = ea_losses.normalized_adjacency(probs.clone().requires_grad_(), mask, self_loops)
    assert len(loops) == 2 and torch.equal(soft, ref.detach())


@pytest.mark.parametrize("density", [0.0, 0.05, 0.3, 1.0])
def test_neighbour_lists_give_the_sparse_backends_numbers(density):
    """Message passing over compiled neighbour lists equals the torch_geometric backend bit
    for bit (same edges, same order of each node's sum) and the dense product to float
    rounding, isolated nodes included."""
    from gdm_models.message_passing import GraphMessagePassing

    torch.manual_seed(0)
    mp = GraphMessagePassing(16, 4, 2)
    h, g = torch.randn(3, 25, 16), torch.randn(3, 4)
    a = _sym_adjacency(3, 25, density, torch.Generator().manual_seed(1))
    a[0, 3] = a[0, :, 3] = 0.0  # an isolated node
    with torch.no_grad():
        fast = mp.forward_neighbours(h, g, a)
        sparse = mp.forward_sparse(h, g, a)
        dense = mp.forward_dense(h, g, a)
    assert torch.equal(fast, sparse)
    torch.testing.assert_close(fast, dense, rtol=1e-5, atol=1e-5)
    nb = cpu_kernels.Neighbours(a)
    assert nb.num_edges == int(a.sum())
    with pytest.raises(ValueError, match="on graphs"):
        nb.mean(torch.zeros(3, 24, 16))


def test_imagination_takes_the_neighbour_lists_below_their_density(monkeypatch):
    """GDMCell.message_passing on a sampled graph without autograd: neighbour lists up to
    NEIGHBOURS_MAX_DENSITY, the dense product above it."""
    from gdm_models.gdm import cell as cell_module
    from gdm_models.message_passing import GraphMessagePassing

    calls: list[str] = []
    for name in ("forward_neighbours", "forward_sparse", "forward_dense"):
        fn = getattr(GraphMessagePassing, name)
        monkeypatch.setattr(
            GraphMessagePassing,
            name,
            lambda self, *a, _n=name, _f=fn: calls.append(_n) or _f(self, *a),
        )
    cell = cell_module.GDMCell
    holder = type("Cell", (), {"mp": GraphMessagePassing(8, 0, 1)})()
    holder._message_passing_cpu = cell._message_passing_cpu.__get__(holder)
    h, g = torch.randn(2, 20, 8), torch.zeros(2, 0)
    sparse = _sym_adjacency(2, 20, 0.1, torch.Generator().manual_seed(2))
    full = (1.0 - torch.eye(20)).expand(2, 20, 20).contiguous()
    with torch.no_grad():
        alone = [cell.message_passing(holder, h, g, hard=a, weights=None) for a in (sparse, full)]
        assert calls == ["forward_neighbours", "forward_dense"]
        # a batch of both: each graph its own path, the result of each graph alone
        mixed = torch.stack([sparse[0], full[1]])
        both = cell.message_passing(holder, h, g, hard=mixed, weights=None)
    assert calls[2:] == ["forward_neighbours", "forward_dense"]
    assert torch.equal(both[0], alone[0][0]) and torch.equal(both[1], alone[1][1])


def test_transition_of_equal_rows_is_computed_once(monkeypatch):
    """Imagination's first step (S copies of one latent, one action): the transition runs
    on one row and is repeated, the values of the S-row computation within float rounding;
    rows that differ are computed as they are."""
    import numpy as np
    from gdm_models import FeatureScaler, make_model
    from gdm_models.data import OBS_KEYS
    from gdm_models.gdm import cell as cell_module
    from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode

    ep = random_episode(8, 6, np.random.default_rng(0))
    scaler = FeatureScaler.fit([ep], SYNTHETIC_SCHEMA)
    torch.manual_seed(0)
    model = make_model("gdm", SYNTHETIC_SCHEMA, scaler, hidden_dim=16, embed_dim=16)
    latent = model.observe({k: ep[k][:3] for k in OBS_KEYS}, ep["action_nodes"][:2])
    cell = model.cell
    a_emb = cell.embed.action_embed(torch.as_tensor(ep["action_nodes"][2:3], dtype=torch.float32))
    nm = torch.ones(5, 8, dtype=torch.bool)
    sizes: list[int] = []
    gru = cell_module.fused_transition

    def counted(g, z, a, h):
        sizes.append(h.shape[0])
        return gru(g, z, a, h)

    monkeypatch.setattr(cell_module, "fused_transition", counted)
    with torch.no_grad():
        shared = cell.transition(latent.expand(5), a_emb.expand(5, -1, -1), nm)
        assert set(sizes) == {1}
        with torch.enable_grad():  # the S-row computation
            full = cell.transition(latent.expand(5), a_emb.expand(5, -1, -1), nm)
        assert set(sizes[-2:]) == {5}
        other = latent.expand(5)
        other.h_n[3] += 1.0  # rows 0, 1, 2, 4 equal, row 3 its own
        mixed = cell.transition(other, a_emb.expand(5, -1, -1), nm)
        assert sizes[-4:] == [1, 1, 1, 1]  # once per distinct row, each alone
        assert torch.equal(mixed[0][4], shared[0][0]) and not torch.equal(mixed[0][3], shared[0][3])
        distinct = latent.expand(2)
        distinct.h_n[1] += 1.0
        cell.transition(distinct, a_emb.expand(2, -1, -1), nm[:2])
        assert set(sizes[-2:]) == {2}  # all rows distinct: one product over the batch
    for x, y in zip(shared, full, strict=True):
        torch.testing.assert_close(x, y.detach(), rtol=1e-6, atol=1e-6)
