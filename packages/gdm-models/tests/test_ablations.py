"""GDM ablations (paper, "Ablations"; issue 13): every variant sees the observed topology, and
each switch changes what it should, against the full GDM with the same weights and noise."""

from __future__ import annotations

import pytest
import torch
from gdm_models import get_hyperparameters
from gdm_models.adjacency import bernoulli_gate, hard_concrete_gate
from gdm_models.gdm import ABLATIONS, Noise
from gdm_models.reference import gdm_loss_tensors_reference
from gdm_models.reference import gdm_posterior_step_reference as posterior_step

VARIANTS = (
    ["gdm"]
    + [f"gdm:{a}" for a in sorted(ABLATIONS)]
    + ["gdm:no-graph-state+no-h-plus+no-recurrent-adj"]
)


def _rewired(adj: torch.Tensor, seed: int) -> torch.Tensor:
    """A different symmetric 0/1 adjacency with zero diagonal on the same real nodes."""
    g = torch.Generator().manual_seed(seed)
    a = torch.triu((torch.rand(adj.shape, generator=g) < 0.5).float(), 1)
    a = a + a.transpose(-1, -2)
    return torch.where(adj.sum(-1, keepdim=True) >= 0, a, adj)


def _posterior(m, batch, adjacency=None, steps=2):
    """Posterior outputs of the first ``steps`` window steps with fixed noise."""
    nm, pm = batch.node_mask, batch.pair_mask
    mask = (nm[:, :, None] & nm[:, None, :]).float()
    latent = m.cell.initial_latent(batch.batch_size, batch.num_nodes)
    noise = Noise(torch.Generator().manual_seed(0), m.device)
    outs = []
    with torch.no_grad():
        for t in range(steps):
            obs = batch.observation(t)
            if adjacency is not None:
                obs["adjacency"] = adjacency[:, t] * mask
            action = torch.zeros_like(nm, dtype=torch.float) if t == 0 else batch.action_nodes[
                :, t - 1
            ]  # fmt: skip
            latent, o = posterior_step(m, latent, action, obs, nm, pm, noise, t, t > 0)
            outs.append((latent, o))
    return outs


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_sees_the_observed_topology(make_tiny, dataset, name):
    m = make_tiny(name)
    b = dataset.make_batch([(0, 0), (1, 2)], seq_len=2)
    other = _rewired(b.adjacency, 1)
    assert not torch.equal(other * b.pair_mask[:, None].float(), b.adjacency)
    (lat0, o0), (_, o1) = _posterior(m, b)
    (lat0x, o0x), (_, o1x) = _posterior(m, b, other)
    # the node posterior of the very first step already depends on the observed graph
    assert (o0["q_n"] - o0x["q_n"]).abs().max() > 1e-4
    # and so does the next step's (GDM: also through h^+ of the changed z)
    assert (o1["q_n"] - o1x["q_n"]).abs().max() > 1e-4
    if m.config.recurrent_adjacency:  # the GDM's recurrent adjacency is the observed one
        assert torch.equal(lat0.adjacency, b.adjacency[:, 0])
        assert not torch.equal(lat0x.adjacency, lat0.adjacency)


def test_no_recurrent_adj_follows_the_grssm_presets():
    for env, layers in (("RGC", 1), ("OD", 1), ("SAR", 2), ("CF", 1)):
        assert get_hyperparameters("gdm", env)["model"]["encoder_gnn_layers"] == layers
        assert get_hyperparameters("g-rssm", env)["model"]["encoder_layers"] == layers


def test_no_recurrent_adj_has_an_unbiased_pair_dot_head(make_tiny):
    m = make_tiny("gdm:no-recurrent-adj", encoder_gnn_layers=2)
    assert m.cell.adjacency.adj_head.bias is None and not hasattr(m.cell.adjacency, "edge_mlp")
    assert len(m.cell.adjacency.obs_graph.root) == 2
    d = torch.randn(2, 5, m.config.hidden_dim)
    x = m.cell.adjacency.adj_head.proj(d)
    torch.testing.assert_close(
        m.cell.adjacency.adj_head(d), x @ x.transpose(-1, -2)
    )  # no extra bias


def _shared(full, ablated):
    """Copy the full model's weights into the ablated one wherever names and shapes match."""
    own = ablated.state_dict()
    shared = {k: v for k, v in full.state_dict().items() if k in own and own[k].shape == v.shape}
    ablated.load_state_dict(shared, strict=False)
    return len(shared)


def _terms(m, b, seed=0):
    with torch.no_grad():
        noise = Noise(torch.Generator().manual_seed(seed), m.device)
        return gdm_loss_tensors_reference(m, b, noise)


@pytest.fixture
def pair(make_tiny, dataset):
    """(full GDM, batch, factory of an ablation sharing the full model's weights)."""
    full = make_tiny(seed=3)
    torch.nn.init.constant_(full.cell.adjacency.edge_mlp.out.bias, 0.0)  # many edge updates
    b = dataset.make_batch([(0, 0), (1, 1)], seq_len=3)

    def ablated(variant: str):
        m = make_tiny(f"gdm:{variant}", seed=3)
        assert _shared(full, m) > 10
        return m

    return full, b, ablated


def test_no_beta_h_drops_exactly_the_h_term(pair):
    full, b, ablated = pair
    m = ablated("no-beta-h")
    total_f, t_f = _terms(full, b)
    total_a, t_a = _terms(m, b)
    for k in t_f:  # same weights, same noise: identical terms ...
        if k != "total":
            torch.testing.assert_close(t_a[k], t_f[k])
    # ... and the total loses exactly beta_h * L_h
    torch.testing.assert_close(total_a, total_f - full.config.beta_h * t_f["h"])
    assert t_f["h"] > 0


def test_no_h_plus_uses_the_prior_state_as_posterior(pair):
    full, b, ablated = pair
    m = ablated("no-h-plus")
    (_, o_f), _ = _posterior(full, b)
    (_, o_a), _ = _posterior(m, b)
    assert torch.equal(o_a["h_n_p"], o_a["h_n_m"]) and torch.equal(o_a["h_g_p"], o_a["h_g_m"])
    assert not torch.allclose(o_f["h_n_p"], o_f["h_n_m"])
    torch.testing.assert_close(o_a["h_n_m"], o_f["h_n_m"])  # the prior state is unchanged
    assert _terms(m, b)[1]["h"] == 0 and _terms(full, b)[1]["h"] > 0


def test_no_graph_state_removes_h_g_and_z_g(pair):
    full, b, ablated = pair
    m = ablated("no-graph-state")
    (lat_f, o_f), _ = _posterior(full, b)
    (lat_a, o_a), _ = _posterior(m, b)
    assert lat_a.h_g.shape[-1] == 0 and lat_a.z_g.shape[-1] == 0 and o_a["q_g"] is None
    assert lat_f.h_g.shape[-1] > 0
    # the node posterior no longer sees [h_g, z_g]: different probabilities
    assert (o_a["q_n"] - o_f["q_n"]).abs().max() > 1e-4
    _, t = _terms(m, b)
    assert t["kl_g_dyn"] == 0 and t["kl_g_rep"] == 0 and _terms(full, b)[1]["kl_g_dyn"] > 0


def test_all_pairs_mp_changes_only_the_prior_message_passing(pair):
    full, b, ablated = pair
    m = ablated("all-pairs-mp")
    _, (_, o_f) = _posterior(full, b)
    _, (_, o_a) = _posterior(m, b)
    # posterior path (observed A_t) and the edge logits are untouched ...
    for k in ("q_n", "h_n_p", "logits", "a_m", "p_g"):
        torch.testing.assert_close(o_a[k], o_f[k])
    # ... while the prior node distribution comes from all-pairs weighted message passing
    assert (o_a["p_n"] - o_f["p_n"]).abs().max() > 1e-4
    h, g = o_f["h_n_m"], torch.cat([o_f["h_g_m"], o_f["z_g_m"]], -1)
    w = torch.sigmoid(o_f["logits"] * (1 - 2 * b.adjacency[:, 0])) * b.pair_mask
    with torch.no_grad():
        m_all = m.cell.mp.forward_dense(h, g, w)
        zg = o_f["z_g_m"][:, None].expand(-1, m_all.shape[1], -1)
        want = m.cell.node_latent.prior_n(torch.cat([m_all, zg], -1))
    torch.testing.assert_close(o_a["p_n"], want)


def test_bernoulli_adj_changes_the_gate_distribution_not_its_open_probability(pair):
    full, b, ablated = pair
    m = ablated("bernoulli-adj")
    logits = torch.linspace(-3, 3, 7)[:, None].expand(7, 20_000)
    u = torch.rand(7, 20_000, generator=torch.Generator().manual_seed(0))
    pm = torch.ones_like(logits, dtype=torch.bool)
    a0 = torch.zeros_like(logits)
    with torch.no_grad():
        a_hc, _ = full.cell.adjacency.sample(logits, a0, pm, u)
        a_be, _ = m.cell.adjacency.sample(logits, a0, pm, u)
    # both open a gate with probability sigmoid(l) ...
    for a in (a_hc, a_be):
        torch.testing.assert_close(a.mean(1), torch.sigmoid(logits[:, 0]), atol=0.015, rtol=0)
    # ... but the Hard Concrete gate is continuous in (0, 1) for a good share of draws, while
    # the Bernoulli gate is exactly binary
    g_hc, g_be = hard_concrete_gate(logits, u), bernoulli_gate(logits, u)
    assert ((g_hc > 0) & (g_hc < 1)).float().mean() > 0.05
    assert set(g_be.unique().tolist()) <= {0.0, 1.0}
    # in the model, the sampled prior adjacency differs for the same logits and uniforms
    _, (_, o_f) = _posterior(full, b)
    _, (_, o_a) = _posterior(m, b)
    torch.testing.assert_close(o_a["logits"], o_f["logits"])
    assert not torch.equal(o_a["a_m"], o_f["a_m"])


def test_no_recurrent_adj_replaces_the_adjacency_kl_by_a_decoder_bce(pair):
    full, b, ablated = pair
    m = ablated("no-recurrent-adj")
    _, (lat_a, o_a) = _posterior(m, b)
    assert o_a["logits"] is None and o_a["a_m"] is None
    _, t = _terms(m, b)
    assert t["kl_adj"] == 0 and t["pred_adj"] > 0
    _, t_f = _terms(full, b)
    assert t_f["pred_adj"] == 0 and t_f["kl_adj"] > 0
