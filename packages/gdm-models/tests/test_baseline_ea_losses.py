"""EA-GWM's extra losses on hand-computed tiny cases, and switching them off recovers Vanilla GWM
exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gdm_models import EpisodeDataset, FeatureScaler, make_model
from gdm_models.baselines.ea_losses import (
    critical_node_loss,
    critical_node_weights,
    normalized_adjacency,
    power_iteration,
    rollout_consistency_loss,
    spectral_loss,
)
from gdm_models.synthetic import schema_episode

SCHEMA = {
    "node_continuous": ["x"],
    "node_categorical": {"c": 3},
    "graph_continuous": ["k"],
    "graph_categorical": {},
}
EA_ON = {"rollout_weight": 0.5, "spectral_weight": 0.01, "critical_weight": 0.1}


@pytest.fixture(scope="module")
def batch_and_scaler():
    rng = np.random.default_rng(0)
    eps = [schema_episode(SCHEMA, n, 5, rng) for n in (4, 6, 5)]
    ds = EpisodeDataset(eps, SCHEMA, seq_len=4)
    return ds.make_batch([(0, 0), (1, 1), (2, 3)]), FeatureScaler.fit(eps, SCHEMA)


# ------------------------------------------------------------------------------ spectral
def test_power_iteration_and_spectral_loss_hand_computed():
    w1 = torch.diag(torch.tensor([3.0, 1.0, 0.5])).requires_grad_(True)
    w2 = (0.5 * torch.eye(3)).requires_grad_(True)
    u0 = torch.ones(3)
    sigma, u = power_iteration(w1, u0, 30)
    assert sigma.item() == pytest.approx(3.0, rel=1e-6)
    assert torch.allclose(u.abs(), torch.tensor([1.0, 0.0, 0.0]), atol=1e-5)
    loss, us = spectral_loss([w1, w2], [u0, u0], num_iterations=30)
    assert loss.item() == pytest.approx((3 - 1) ** 2 + (0.5 - 1) ** 2, rel=1e-6)  # 4.25
    loss.backward()
    # d/dW (sigma - 1)^2 = 2 (sigma - 1) v u^T with the top singular vectors
    expected = torch.zeros(3, 3)
    expected[0, 0] = 2 * (3 - 1)
    torch.testing.assert_close(w1.grad, expected, atol=1e-4, rtol=0)
    assert len(us) == 2


def test_spectral_power_iteration_warm_start_converges():
    torch.manual_seed(0)
    w = torch.randn(6, 6)
    true = torch.linalg.matrix_norm(w, ord=2).item()
    u = torch.ones(6)
    for _ in range(40):  # one iteration per call, warm-started like the model's buffers
        sigma, u = power_iteration(w, u, 1)
    assert sigma.item() == pytest.approx(true, rel=1e-4)


def _ea_gwm(sc, seed: int = 0, **config):
    """A small EA-GWM (hidden 8) built from torch seed ``seed``."""
    torch.manual_seed(seed)
    return make_model("ea-gwm", SCHEMA, sc, hidden_dim=8, **config)


def test_model_spectral_term_matches_matrix_norms(batch_and_scaler):
    batch, sc = batch_and_scaler
    model = _ea_gwm(sc, mp_layers=2, power_iterations=100, rollout_weight=0.0, critical_weight=0.0)
    _, terms = model.loss(batch)
    expected = sum(
        (torch.linalg.matrix_norm(w.weight.detach(), ord=2).item() - 1.0) ** 2
        for w in model.mp_weights
    )
    assert terms["spectral"] == pytest.approx(expected, rel=1e-4)


# ------------------------------------------------------------------------------ critical nodes
def test_critical_weights_degree_hand_computed():
    # path 0-1-2 plus a padded node 3; degrees (1, 2, 1) -> mean 4/3
    adj = torch.zeros(1, 4, 4)
    adj[0, 0, 1] = adj[0, 1, 0] = adj[0, 1, 2] = adj[0, 2, 1] = 1
    mask = torch.tensor([[True, True, True, False]])
    c = critical_node_weights(adj, mask, "degree")
    torch.testing.assert_close(c, torch.tensor([[0.75, 1.5, 0.75, 0.0]]))
    # no edges -> uniform weights
    c0 = critical_node_weights(torch.zeros(1, 4, 4), mask, "degree")
    torch.testing.assert_close(c0, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    # loss: (0.75 * 1 + 1.5 * 2 + 0.75 * 3) / 3 = 2 (padded node ignored)
    per_node = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    assert critical_node_loss(per_node, c, mask).item() == pytest.approx(2.0)


def test_critical_weights_normalized_adjacency_hand_computed():
    adj = torch.zeros(1, 3, 3)
    adj[0, 0, 1] = adj[0, 1, 0] = adj[0, 1, 2] = adj[0, 2, 1] = 1
    mask = torch.ones(1, 3, dtype=torch.bool)
    # D~ = diag(2, 3, 2) with self-loops: A~_ij = 1 / sqrt(d_i d_j)
    a_t = normalized_adjacency(adj, mask, self_loops=True)
    r6 = 1 / math.sqrt(6)
    expected = torch.tensor([[0.5, r6, 0.0], [r6, 1 / 3, r6], [0.0, r6, 0.5]])
    torch.testing.assert_close(a_t[0], expected)
    rows = torch.tensor([0.5 + r6, 2 * r6 + 1 / 3, 0.5 + r6])
    c = critical_node_weights(adj, mask, "normalized")
    torch.testing.assert_close(c[0], rows / rows.mean())
    # without self-loops: D = diag(1, 2, 1) -> A~_01 = 1/sqrt(2)
    torch.testing.assert_close(
        normalized_adjacency(adj, mask, self_loops=False)[0, 0, 1], torch.tensor(2**-0.5)
    )


# ------------------------------------------------------------------------------ rollout
def test_rollout_consistency_loss_hand_computed_and_teacher_free():
    start = torch.tensor([0.0, 10.0])
    targets = {
        1: torch.tensor([1.0, 11.0]),
        2: torch.tensor([2.0, 13.0]),
        3: torch.tensor([4.0, 99.0]),
    }
    valid = {
        1: torch.tensor([True, True]),
        2: torch.tensor([True, True]),
        3: torch.tensor([True, False]),
    }
    seen = []

    def step(x, j):  # prediction: x + 1
        seen.append(x.clone())
        return x + 1.0

    def loss(pred, j):
        return (pred - targets[j]) ** 2, valid[j]

    out = rollout_consistency_loss(start, 3, step, lambda x, pred: pred, loss)
    # predictions 1, 2, 3 and 11, 12, (13): errors 0, 0, 1 and 0, 1, (invalid) -> 2 / 5
    assert out.item() == pytest.approx(0.4)
    # teacher-free: step 3 starts from the prediction 2 / 12, not from the observation
    torch.testing.assert_close(seen[2], torch.tensor([2.0, 12.0]))
    with pytest.raises(ValueError, match="k"):
        rollout_consistency_loss(start, 0, step, lambda x, p: p, loss)


def test_model_rollout_with_one_step_equals_the_one_step_loss(batch_and_scaler):
    batch, sc = batch_and_scaler
    model = _ea_gwm(sc, rollout_steps=1, spectral_weight=0.0, critical_weight=0.0)
    _, terms = model.loss(batch)
    assert terms["rollout"] == pytest.approx(terms["pred"], rel=1e-6)
    model2 = _ea_gwm(sc, rollout_steps=3)
    model2.load_state_dict(model.state_dict())
    _, terms2 = model2.loss(batch)
    assert terms2["rollout"] != pytest.approx(terms2["pred"], rel=1e-3)


# ------------------------------------------------------------------------------ switching off
def _pair(sc, **ea):
    torch.manual_seed(123)
    vanilla = make_model("vanilla-gwm", SCHEMA, sc, hidden_dim=8)
    ea_model = _ea_gwm(sc, seed=123, **ea)
    return vanilla, ea_model


def test_all_ea_losses_off_is_vanilla_gwm_exactly(batch_and_scaler):
    batch, sc = batch_and_scaler
    vanilla, ea = _pair(sc, rollout_weight=0.0, spectral_weight=0.0, critical_weight=0.0)
    sv, se = vanilla.state_dict(), ea.state_dict()
    assert list(sv) == list(se)
    assert all(torch.equal(sv[k], se[k]) for k in sv)
    lv, tv = vanilla.loss(batch)
    le, te = ea.loss(batch)
    assert lv.item() == le.item() and tv == te
    lv.backward()
    le.backward()
    for pv, pe in zip(vanilla.parameters(), ea.parameters(), strict=True):
        assert (pv.grad is None and pe.grad is None) or torch.equal(pv.grad, pe.grad)


@pytest.mark.parametrize("term", ["rollout", "spectral", "critical"])
def test_each_ea_loss_switches_off_independently(batch_and_scaler, term):
    batch, sc = batch_and_scaler
    vanilla, full = _pair(sc, **EA_ON)
    _, without = _pair(sc, **{**EA_ON, f"{term}_weight": 0.0})
    for m in (vanilla, full, without):
        m.eval()  # keeps the spectral warm-start buffers fixed between calls
    lf, tf = full.loss(batch)
    lw, tw = without.loss(batch)
    lv, tv = vanilla.loss(batch)
    assert tf[term] > 0 and tw[term] == 0.0
    tol = 4 * torch.finfo(torch.float32).eps * abs(lf.item())  # float32 cancellation
    diff = lf.item() - lw.item()
    assert diff == pytest.approx(EA_ON[f"{term}_weight"] * tf[term], rel=1e-4, abs=tol)
    extra = sum(EA_ON[f"{k}_weight"] * tf[k] for k in ("rollout", "spectral", "critical"))
    assert lf.item() - lv.item() == pytest.approx(extra, rel=1e-4, abs=tol)
    assert tf["pred"] == tv["pred"]
