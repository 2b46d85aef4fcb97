"""Loss terms against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gdm_models.layers import categorical_kl, sample_onehot_st, unimix_probs
from gdm_models.losses import adjacency_kl, free_bits, h_alignment, kl_dyn_rep, masked_mean


def test_categorical_kl_by_hand_and_dyn_rep_gradients():
    q = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]], requires_grad=True)
    p = torch.tensor([[[0.25, 0.75], [0.5, 0.5]]], requires_grad=True)
    want = (0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)) + (
        0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    )
    assert categorical_kl(q, p).item() == pytest.approx(want, rel=1e-6)
    dyn, rep = kl_dyn_rep(q, p)
    assert dyn.item() == pytest.approx(want, rel=1e-6) and rep.item() == pytest.approx(
        want, rel=1e-6
    )
    (dq,) = torch.autograd.grad(dyn.sum(), q, retain_graph=True, allow_unused=True)
    assert dq is None  # sg(q) in the dynamics KL
    (dp,) = torch.autograd.grad(rep.sum(), p, allow_unused=True)
    assert dp is None  # sg(p) in the representation KL


def test_free_bits():
    x = torch.tensor([0.001, 0.5], requires_grad=True)
    y = free_bits(x, 0.01)
    assert y.tolist() == pytest.approx([0.01, 0.5])
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0]  # below the floor: no gradient
    assert torch.equal(free_bits(x, 0.0), x)


def test_adjacency_kl_by_hand():
    # one graph, N = 2: pairs (0,1) and (1,0); soft q to exercise both terms
    q = torch.tensor([[[0.0, 0.8], [0.8, 0.0]]])
    lam = torch.tensor([[[5.0, 0.3], [0.3, 5.0]]])
    pm = torch.tensor([[[False, True], [True, False]]])
    p = 1 / (1 + math.exp(-0.3))
    per_pair = 0.8 * math.log(0.8 / p) + 0.2 * math.log(0.2 / (1 - p))
    got = adjacency_kl(q, lam, pm, torch.tensor([2])).item()
    assert got == pytest.approx(2 * per_pair / 4, rel=1e-5)
    # hard (teacher-forced) q: KL = -log p for an edge, -log(1-p) for a non-edge
    qh = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    assert adjacency_kl(qh, lam, pm, torch.tensor([2])).item() == pytest.approx(
        -2 * math.log(p) / 4, rel=1e-5
    )


def test_h_alignment_value_and_gradient():
    hm = torch.tensor([1.0, 2.0], requires_grad=True)
    hp = torch.tensor([0.0, 4.0], requires_grad=True)
    v = h_alignment(hm, hp)
    assert v.item() == pytest.approx(0.5 * (5 + 5))
    v.backward()
    # d/dh^- [ |h^- - sg h^+|^2 + |h^+ - h^-|^2 ] / 2 = 2 (h^- - h^+)
    assert hm.grad.tolist() == pytest.approx([2.0, -4.0])
    # only the second term reaches h^+: (h^+ - h^-)
    assert hp.grad.tolist() == pytest.approx([-1.0, 2.0])


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0, 100.0]])
    assert masked_mean(x, torch.tensor([[True, True, False]]), 1).item() == 1.5


def test_unimix_and_straight_through_sample():
    probs = unimix_probs(torch.tensor([[10.0, -10.0, -10.0]]), 0.01)
    assert probs[0, 1].item() == pytest.approx(0.01 / 3, rel=1e-3)
    logits = torch.zeros(4000, 3, requires_grad=True)
    p = unimix_probs(logits * torch.tensor([1.0, 0.0, 0.0]) + torch.tensor([1.0, 0.0, -1.0]), 0.01)
    z = sample_onehot_st(p, torch.rand(4000, 3, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(z.detach().sum(-1), torch.ones(4000))
    freq = z.detach().mean(0)
    torch.testing.assert_close(freq, p[0].detach(), atol=0.03, rtol=0)
    (z * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert logits.grad.abs().sum() > 0


def _loop_prediction_loss(pred, target, node_mask, scaler, nodes_squared):
    """L_pred per graph from the paper's formula with Python loops (slow reference)."""
    out = {k: [] for k in ("node", "graph", "adjacency", "action_mask", "reward", "continuation")}

    def bce(logit, y):
        p = 1.0 / (1.0 + math.exp(-logit))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    def ce(logits, k):
        return -math.log(math.exp(logits[k]) / sum(math.exp(v) for v in logits))

    B, N = node_mask.shape
    nm, ns = scaler.node_mean, scaler.node_std
    gm, gs = scaler.graph_mean, scaler.graph_std
    for b in range(B):
        real = [v for v in range(N) if node_mask[b, v]]
        n_f = pred.node_continuous.shape[-1] + len(pred.node_categorical)
        node = 0.0
        for v in real:
            for f in range(pred.node_continuous.shape[-1]):
                z = (float(target["node_continuous"][b, v, f]) - nm[f]) / ns[f]
                node += (float(pred.node_continuous[b, v, f]) - z) ** 2
            for i, logits in enumerate(pred.node_categorical):
                node += ce(logits[b, v].tolist(), int(target["node_categorical"][b, v, i]))
        out["node"].append(node / (len(real) * n_f))
        g_f = pred.graph_continuous.shape[-1] + len(pred.graph_categorical)
        graph = 0.0
        for f in range(pred.graph_continuous.shape[-1]):
            z = (float(target["graph_continuous"][b, f]) - gm[f]) / gs[f]
            graph += (float(pred.graph_continuous[b, f]) - z) ** 2
        for i, logits in enumerate(pred.graph_categorical):
            graph += ce(logits[b].tolist(), int(target["graph_categorical"][b, i]))
        out["graph"].append(graph / g_f)
        adj = sum(
            bce(float(pred.adjacency_logit[b, u, v]), int(target["adjacency"][b, u, v]))
            for u in real
            for v in real
            if u != v
        )
        n = len(real)
        out["adjacency"].append(adj / (n * n if nodes_squared else n * (n - 1)))
        am = sum(
            bce(float(pred.action_mask_logit[b, v]), int(target["action_mask"][b, v])) for v in real
        )
        out["action_mask"].append(am / n)
        r = (float(target["reward"][b]) - scaler.reward_mean) / scaler.reward_std
        out["reward"].append((float(pred.reward[b]) - r) ** 2)
        out["continuation"].append(
            bce(float(pred.continuation_logit[b]), int(target["continuation"][b]))
        )
    return out


@pytest.mark.parametrize("nodes_squared", [False, True])
def test_prediction_loss_equals_the_papers_formula_by_loops(nodes_squared):
    """L_pred (paper, "Training") of every model: 1/(N|F_n|) sum_v sum_f l_f + 1/|F_g| sum_f l_f
    + l_adj + l_action + l_reward + l_continue, MSE in standardised units, on padded graphs."""
    from gdm_models.losses import NodeMasks, Prediction, prediction_loss
    from gdm_models.scaling import FeatureScaler

    g = torch.Generator().manual_seed(0)
    B, N = 3, 5
    node_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    sym = torch.randn(B, N, N, generator=g)
    pred = Prediction(
        node_continuous=torch.randn(B, N, 2, generator=g),
        node_categorical=[torch.randn(B, N, 3, generator=g), torch.randn(B, N, 2, generator=g)],
        action_mask_logit=torch.randn(B, N, generator=g),
        adjacency_logit=sym + sym.transpose(1, 2),
        graph_continuous=torch.randn(B, 1, generator=g),
        graph_categorical=[torch.randn(B, 4, generator=g)],
        reward=torch.randn(B, generator=g),
        continuation_logit=torch.randn(B, generator=g),
    )
    up = torch.triu(torch.rand(B, N, N, generator=g) < 0.5, 1)
    target = {
        "adjacency": (up | up.transpose(1, 2)).to(torch.int8),
        "node_continuous": 3 * torch.randn(B, N, 2, generator=g) + 1,
        "node_categorical": torch.stack(
            [torch.randint(0, 3, (B, N), generator=g), torch.randint(0, 2, (B, N), generator=g)], -1
        ),
        "graph_continuous": torch.randn(B, 1, generator=g),
        "graph_categorical": torch.randint(0, 4, (B, 1), generator=g),
        "action_mask": torch.randint(0, 2, (B, N), generator=g).to(torch.int8),
        "reward": torch.randn(B, generator=g),
        "continuation": torch.randint(0, 2, (B,), generator=g),
    }
    scaler = FeatureScaler(
        node_mean=np.array([1.0, -0.5]),
        node_std=np.array([2.0, 3.0]),
        graph_mean=np.array([0.2]),
        graph_std=np.array([0.5]),
        reward_mean=0.3,
        reward_std=1.5,
    )
    norm = "nodes_squared" if nodes_squared else "pairs"
    masks = NodeMasks.of(node_mask, torch.float32)
    got = prediction_loss(pred, target, masks, scaler, adjacency_norm=norm)
    want = _loop_prediction_loss(pred, target, node_mask, scaler, nodes_squared)
    for k, v in want.items():
        assert torch.allclose(got[k].double(), torch.tensor(v, dtype=torch.float64), atol=1e-5), k
    # the per-node means are zero on padding and average to the node term
    assert (got["node_per_node"][~node_mask] == 0).all()
    assert torch.allclose(got["node_per_node"].sum(-1) / node_mask.sum(-1), got["node"])
    # without an adjacency head the term is 0; an unknown normalisation is refused by name
    pred.adjacency_logit = None
    assert (prediction_loss(pred, target, masks, scaler)["adjacency"] == 0).all()
    with pytest.raises(ValueError, match="adjacency_norm"):
        prediction_loss(pred, target, masks, scaler, adjacency_norm="mean")
