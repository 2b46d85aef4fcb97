"""One GDM step and its loss terms against a slow reference written from the paper's formulas.

The reference reuses only the model's leaf modules (linear layers, GRU cells, LayerNorms, MLPs)
and composes them exactly as section "Graph Dynamics Model" / "Training" writes them, with the
model's recorded noise replayed. It checks the wiring symbol for symbol: the GRU inputs, h^+,
p_g / q_g, the edge-update logit, Hard Concrete + XOR, message passing with [h_g, z_g]
injected, p_n / q_n, the decoder on the *prior* h^- with E_p[z], and every loss normalisation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gdm_models.gdm import Noise
from gdm_models.reference import edge_logits_reference, gdm_transition_terms_reference
from gdm_models.reference import gdm_posterior_step_reference as posterior_step

BETA, GAMMA, ZETA = 2.0 / 3.0, -0.1, 1.1


def _unimix(logits: torch.Tensor, groups: int, classes: int) -> torch.Tensor:
    p = torch.softmax(logits.reshape(*logits.shape[:-1], groups, classes), -1)
    return 0.99 * p + 0.01 / classes


def _sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Categorical sample by the Gumbel-max trick with the replayed uniforms."""
    g = -torch.log(-torch.log(u.clamp(1e-7, 1 - 1e-7)))
    idx = (torch.log(probs.clamp_min(1e-7)) + g).argmax(-1)
    return F.one_hot(idx, probs.shape[-1]).to(probs.dtype).flatten(-2)


def _gru(mod, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """LayerNorm(GRU(x | h)) with the model's cell and norm."""
    lead = h.shape[:-1]
    out = mod.cell(x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1]))
    return mod.norm(out).reshape(*lead, -1)


def _mp(model, h: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """m^(l+1) = LayerNorm(W_root m^(l) + sum_j alpha_ij W m_j), alpha = w / row sum,
    [h_g, z_g] injected into the first layer."""
    n = h.shape[1]
    m = torch.cat([h, g[:, None, :].expand(-1, n, -1)], -1)
    deg = w.sum(-1, keepdim=True)
    alpha = torch.where(deg > 0, w / torch.where(deg > 0, deg, 1.0), 0.0)
    for layer in model.cell.mp.layers:
        m = layer.norm(layer.root(m) + alpha @ layer.lin(m))
    return m


@pytest.fixture
def step(make_tiny, dataset):
    """A GDM with 2 message-passing layers, many edge updates, and one window step t = 1."""
    m = make_tiny(mp_layers=2, free_bits=0.05)
    torch.nn.init.constant_(m.cell.adjacency.edge_mlp.out.bias, 0.5)  # many gates open
    ep = int(np.argmax(dataset.node_counts))
    b = dataset.make_batch([(ep, 0), (ep, 2)], seq_len=1)  # same N: no padding
    nm, pm = b.node_mask, b.pair_mask
    B, N = b.batch_size, b.num_nodes
    noise = Noise(torch.Generator().manual_seed(3), m.device)
    with torch.no_grad():
        prev, _ = posterior_step(
            m,
            m.cell.initial_latent(B, N),
            torch.zeros(B, N),
            b.observation(0),
            nm,
            pm,
            noise,
            0,
            False,
        )
        obs = b.observation(1)
        lat, o = posterior_step(m, prev, b.action_nodes[:, 0], obs, nm, pm, noise, 1, True)
        terms = gdm_transition_terms_reference(m, b, 1, obs, prev, o, nm, pm, nm.sum(1))
    return m, b, prev, obs, lat, o, terms, noise.record


@torch.no_grad()
def test_one_step_follows_the_method_section(step):
    m, b, prev, obs, lat, o, _, rec = step
    emb, deter, gl, nl = m.cell.embed, m.cell.deter, m.cell.graph_latent, m.cell.node_latent
    c = m.config
    Gn, Cn, Gg, Cg = (
        c.node_latent_groups,
        c.node_latent_classes,
        c.graph_latent_groups,
        c.graph_latent_classes,
    )
    x = b.action_nodes[:, 0]
    # a_t(v): linear map of the node-selection indicator; Pool = mean
    a = x[..., None] * emb.action_embed.lin.weight[:, 0] + emb.action_embed.lin.bias
    # h^-(v) = LN(GRU_n(z_{t-1}(v), a_t(v) | h_{t-1}(v)));  h_g^- = LN(GRU_g(z_g, Pool a | h_g))
    h_m = _gru(deter.gru_n, torch.cat([prev.z_n, a], -1), prev.h_n)
    hg_m = _gru(deter.gru_g, torch.cat([prev.z_g, a.mean(1)], -1), prev.h_g)
    torch.testing.assert_close(o["h_n_m"], h_m)
    torch.testing.assert_close(o["h_g_m"], hg_m)
    # h^+ = h^- + sigmoid(g) * dh;  [dh || g] = MLP+_n(h^-, e_v, e_g), MLP+_g(h_g^-, e_g, Pool e_v)
    e_v, e_g = emb.encoder(obs)
    n = h_m.shape[1]
    dh, g = deter.post_h_n(torch.cat([h_m, e_v, e_g[:, None].expand(-1, n, -1)], -1)).chunk(2, -1)
    h_p = h_m + torch.sigmoid(g) * dh
    dhg, gg = deter.post_h_g(torch.cat([hg_m, e_g, e_v.mean(1)], -1)).chunk(2, -1)
    hg_p = hg_m + torch.sigmoid(gg) * dhg
    torch.testing.assert_close(o["h_n_p"], h_p)
    torch.testing.assert_close(o["h_g_p"], hg_p)
    assert not torch.allclose(h_p, h_m)  # the correction is active
    # q_g(z_g | h_g^+, Pool h^+, e_g);  p_g(z_g | h_g^-, Pool h^-)
    q_g = _unimix(gl.post_g.mlp(torch.cat([hg_p, h_p.mean(1), e_g], -1)), Gg, Cg)
    p_g = _unimix(gl.prior_g.mlp(torch.cat([hg_m, h_m.mean(1)], -1)), Gg, Cg)
    torch.testing.assert_close(o["q_g"], q_g)
    torch.testing.assert_close(o["p_g"], p_g)
    zg_p = _sample(q_g, rec["1/zg_post"])
    zg_m = _sample(p_g, rec["1/zg_prior"])
    torch.testing.assert_close(o["z_g_p"], zg_p)
    torch.testing.assert_close(o["z_g_m"], zg_m)
    # posterior path: message passing on the observed A_t (b_ij = A_t(i,j)), m^(0) = h^+
    a_obs = obs["adjacency"]
    m_p = _mp(m, h_p, torch.cat([hg_p, zg_p], -1), a_obs)
    q_n = _unimix(
        nl.post_n.mlp(torch.cat([m_p, zg_p[:, None].expand(-1, n, -1), e_v], -1)),
        Gn,
        Cn,
    )
    torch.testing.assert_close(o["q_n"], q_n)
    torch.testing.assert_close(o["z_n_p"], _sample(q_n, rec["1/zn_post"]))
    assert torch.equal(lat.adjacency, a_obs)  # teacher forcing
    # prior path: l_ij = MLP_adj(h_i^-, h_j^-, h_g^-, z_g^-, A_{t-1}(i,j)) (symmetrised)
    a_prev = prev.adjacency
    logits = edge_logits_reference(
        m.cell.adjacency.edge_mlp, h_m, torch.cat([hg_m, zg_m], -1), a_prev
    )
    torch.testing.assert_close(o["logits"], logits, atol=1e-5, rtol=1e-5)
    # Hard Concrete: l~ = l + beta log(-gamma/zeta), s = sigmoid((log u - log(1-u) + l~)/beta),
    # c = clip(s (zeta - gamma) + gamma); A_t = A_{t-1} xor 1[c > 0]
    u = rec["1/adj"].clamp(1e-6, 1 - 1e-6)
    l_tilde = logits + BETA * math.log(-GAMMA / ZETA)
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + l_tilde) / BETA)
    gate = torch.clamp(s * (ZETA - GAMMA) + GAMMA, 0, 1) * b.pair_mask
    a_t = torch.logical_xor(a_prev > 0, gate > 0).float()
    assert torch.equal(o["a_m"], a_t)
    assert torch.equal(a_t, a_t.transpose(-1, -2))
    assert (a_t != a_prev).any()  # some edges were updated
    m_m = _mp(m, h_m, torch.cat([hg_m, zg_m], -1), a_t)  # forward of b_bar = A_t
    p_n = _unimix(
        nl.prior_n.mlp(torch.cat([m_m, zg_m[:, None].expand(-1, n, -1)], -1)),
        Gn,
        Cn,
    )
    torch.testing.assert_close(o["p_n"], p_n, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o["z_n_m"], _sample(p_n, rec["1/zn_prior"]))


@torch.no_grad()
def test_step_loss_terms_follow_the_training_section(step):
    m, b, prev, obs, _, o, terms, _ = step
    dec = m.cell.decoder
    c, s, sc = m.config, m.schema, m.scaler
    B, N = b.batch_size, b.num_nodes
    # decoder on the PRIOR h^- with the posterior z minus E_p[z] (prior probabilities)
    h_m, z_p, p_n = o["h_n_m"], o["z_n_p"], o["p_n"].flatten(-2)
    d_n = dec.dec_n.theta(h_m) + dec.dec_n.innovation(torch.cat([h_m, z_p - p_n], -1))
    hg_m, zg_p, p_g = o["h_g_m"], o["z_g_p"], o["p_g"].flatten(-2)
    d_g = dec.dec_g.theta(hg_m) + dec.dec_g.innovation(torch.cat([hg_m, zg_p - p_g], -1))
    # L_pred node part: 1/(|V| |F_n|) sum_v sum_f l_f (MSE standardised / CE)
    want_node = torch.zeros(B)
    z_nc = (obs["node_continuous"] - torch.tensor(sc.node_mean).float()) / torch.tensor(
        sc.node_std
    ).float()
    pred_nc = dec.node_heads.cont(d_n)
    for bi in range(B):
        tot = 0.0
        for v in range(N):
            for f in range(s.num_node_continuous):
                tot += (pred_nc[bi, v, f] - z_nc[bi, v, f]) ** 2
            for f, head in enumerate(dec.node_heads.cat):
                logp = torch.log_softmax(head(d_n[bi, v]), -1)
                tot += -logp[obs["node_categorical"][bi, v, f]]
        want_node[bi] = tot / (N * s.num_node_features)
    torch.testing.assert_close(terms["pred_node"], want_node, atol=1e-5, rtol=1e-5)
    # graph part: 1/|F_g| sum_f l_f
    z_gc = (obs["graph_continuous"] - torch.tensor(sc.graph_mean).float()) / torch.tensor(
        sc.graph_std
    ).float()
    want_graph = (dec.graph_heads.cont(d_g) - z_gc).pow(2).sum(-1)
    for f, head in enumerate(dec.graph_heads.cat):
        want_graph = want_graph - torch.log_softmax(head(d_g), -1).gather(
            -1, obs["graph_categorical"][:, f : f + 1]
        ).squeeze(-1)
    torch.testing.assert_close(
        terms["pred_graph"], want_graph / s.num_graph_features, atol=1e-5, rtol=1e-5
    )
    # action mask BCE (mean over nodes), reward MSE (standardised), continuation BCE
    am = torch.sigmoid(dec.node_heads.action_mask(d_n).squeeze(-1))
    y = obs["action_mask"]
    want_am = -(y * torch.log(am) + (1 - y) * torch.log(1 - am)).mean(1)
    torch.testing.assert_close(terms["pred_action"], want_am, atol=1e-5, rtol=1e-5)
    r = (b.reward[:, 0] - sc.reward_mean) / sc.reward_std
    torch.testing.assert_close(terms["pred_reward"], (dec.graph_heads.reward(d_g)[:, 0] - r) ** 2)
    pc = torch.sigmoid(dec.graph_heads.continuation(d_g)[:, 0])
    yc = b.continuation[:, 0]
    want_c = -(yc * torch.log(pc) + (1 - yc) * torch.log(1 - pc))
    torch.testing.assert_close(terms["pred_cont"], want_c, atol=1e-5, rtol=1e-5)
    # node / graph KL: [mean_v KL]_FB with KL summed over the latent groups
    q_n, pn = o["q_n"], o["p_n"]
    kl_n = (q_n * (q_n.log() - pn.log())).sum((-1, -2)).mean(1)
    kl_g = (o["q_g"] * (o["q_g"].log() - o["p_g"].log())).sum((-1, -2))
    fb = c.free_bits
    for k in ("kl_n_dyn", "kl_n_rep"):
        torch.testing.assert_close(terms[k], kl_n.clamp_min(fb), atol=1e-5, rtol=1e-5)
    for k in ("kl_g_dyn", "kl_g_rep"):
        torch.testing.assert_close(terms[k], kl_g.clamp_min(fb), atol=1e-5, rtol=1e-5)
    # adjacency KL: q_ij = A_t(i,j) (teacher-forced); p_ij = sigmoid(l) if A_{t-1}(i,j) = 0,
    # 1 - sigmoid(l) if A_{t-1}(i,j) = 1; sum over i != j divided by |V|^2
    a_prev, a_obs, lg = prev.adjacency, obs["adjacency"], o["logits"]
    want_adj = torch.zeros(B)
    for bi in range(B):
        tot = 0.0
        for i in range(N):
            for j in range(N):
                if i == j:
                    continue
                sig = 1 / (1 + math.exp(-float(lg[bi, i, j])))
                p = sig if a_prev[bi, i, j] == 0 else 1 - sig
                q = float(a_obs[bi, i, j])
                tot += -math.log(p) if q == 1 else -math.log(1 - p)
        want_adj[bi] = tot / N**2
    torch.testing.assert_close(terms["kl_adj"], want_adj, atol=1e-5, rtol=1e-4)
    # 2 L_h = 1/|V| sum_v (|h^- - sg h^+|^2 + |h^+ - h^-|^2) + |h_g^- - sg h_g^+|^2
    #         + |h_g^+ - h_g^-|^2
    d2 = (o["h_n_m"] - o["h_n_p"]).pow(2).sum(-1)
    dg2 = (o["h_g_m"] - o["h_g_p"]).pow(2).sum(-1)
    want_h = 0.5 * ((d2 + d2).sum(1) / N + dg2 + dg2)
    torch.testing.assert_close(terms["h"], want_h, atol=1e-5, rtol=1e-5)
    assert (want_h > 0).all() and (want_adj > 0).all()
