"""Loss terms against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from gdm_models.losses import adjacency_kl, free_bits, h_alignment, kl_dyn_rep, masked_mean
from gdm_models.rssm import categorical_kl, sample_onehot_st, unimix_probs


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
