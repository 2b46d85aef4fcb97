"""Tests of the baselines Vanilla GWM, EA-GWM and G-RSSM behind the common WorldModel API.

Synthetic episodes are generated here (no graphwm_envs import): nodes 0 and 1 carry role 1 and
the edge (0, 1) is present with probability p at every step, independently; there are no other
edges.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import (
    CheckpointError,
    DataError,
    EpisodeDataset,
    FeatureScaler,
    TrainConfig,
    available_models,
    get_hyperparameters,
    load_checkpoint,
    make_model,
    train,
)
from gdm_models.baselines import GRSSM, GWM, GRSSMLatent
from gdm_models.baselines.common import (
    sample_categorical,
    sample_symmetric_bernoulli,
    state_from_observation,
)
from gdm_models.baselines.ea_losses import normalized_adjacency
from gdm_models.data import OBS_KEYS, observation_to_tensors

BASELINES = ("vanilla-gwm", "ea-gwm", "g-rssm")
FULL = {  # every feature type present (SAR-like)
    "node_continuous": ["x", "y"],
    "node_categorical": {"role": 2, "kind": 3},  # unsorted names: column order kept
    "graph_continuous": ["k"],
    "graph_categorical": {"mode": 2},
}
EMPTY: dict = {}  # RGC-like: no node or graph features at all
ROLE = {"node_categorical": {"role": 2}}


def tiny(name: str, **kw) -> dict:
    if name == "g-rssm":
        base = dict(hidden_dim=16, embed_dim=16, latent_groups=2, latent_classes=4, attn_heads=2)
    else:
        base = dict(hidden_dim=16)
    return {**base, **kw}


def make_episode(schema: dict, n: int, T: int, rng: np.random.Generator, p: float = 0.3) -> dict:
    """Episode of T transitions on n nodes; edge (0,1) ~ Bernoulli(p) i.i.d. per step."""
    fnc = len(schema.get("node_continuous", []))
    cards = list(schema.get("node_categorical", {}).values())
    fgc = len(schema.get("graph_continuous", []))
    gcards = list(schema.get("graph_categorical", {}).values())
    adj = np.zeros((T + 1, n, n), np.int8)
    on = (rng.random(T + 1) < p).astype(np.int8)
    adj[:, 0, 1] = adj[:, 1, 0] = on
    nk = np.zeros((T + 1, n, len(cards)), np.int64)
    for c, k in enumerate(cards):
        nk[..., c] = rng.integers(0, k, (T + 1, n))
    if cards:
        nk[..., 0] = (np.arange(n) < 2)[None]  # role
    gk = np.zeros((T + 1, len(gcards)), np.int64)
    for c, k in enumerate(gcards):
        gk[:, c] = rng.integers(0, k, T + 1)
    an = np.zeros((T, n), np.int8)
    an[np.arange(T), rng.integers(0, n, T)] = 1
    return {
        "adjacency": adj,
        "node_continuous": (3.0 + 2.0 * rng.normal(size=(T + 1, n, fnc))).astype(np.float32),
        "node_categorical": nk,
        "graph_continuous": rng.normal(size=(T + 1, fgc)).astype(np.float32),
        "graph_categorical": gk,
        "action_mask": (rng.random((T + 1, n)) < 0.8).astype(np.int8),
        "action_nodes": an,
        "reward": rng.normal(size=T).astype(np.float32),
        "terminated": np.zeros(T, bool),
        "truncated": np.r_[np.zeros(T - 1, bool), True],
    }


def obs_part(ep: dict, stop: int | None = None) -> dict:
    return {k: ep[k][:stop] for k in OBS_KEYS}


def dataset(schema: dict, sizes, T: int = 6, seed: int = 0, p: float = 0.3) -> tuple:
    rng = np.random.default_rng(seed)
    eps = [make_episode(schema, int(n), T, rng, p) for n in sizes]
    return eps, EpisodeDataset(eps, schema, seq_len=4), FeatureScaler.fit(eps, schema)


def check_prediction(pred: dict, schema: dict, S: int, n: int) -> None:
    fnc = len(schema.get("node_continuous", []))
    cards = list(schema.get("node_categorical", {}).values())
    gcards = list(schema.get("graph_categorical", {}).values())
    exp = {
        "adjacency": ((S, n, n), np.int8),
        "node_continuous": ((S, n, fnc), np.float32),
        "node_categorical": ((S, n, len(cards)), np.int64),
        "graph_continuous": ((S, len(schema.get("graph_continuous", []))), np.float32),
        "graph_categorical": ((S, len(gcards)), np.int64),
        "action_mask": ((S, n), np.int8),
        "reward": ((S,), np.float32),
        "continuation": ((S,), np.int64),
    }
    assert set(pred) == set(exp)
    for k, (shape, dt) in exp.items():
        assert pred[k].shape == shape, k
        assert pred[k].dtype == dt, k
    a = pred["adjacency"]
    assert np.array_equal(a, a.transpose(0, 2, 1))
    assert not np.diagonal(a, axis1=1, axis2=2).any()
    assert set(np.unique(a)) <= {0, 1}
    assert set(np.unique(pred["action_mask"])) <= {0, 1}
    assert set(np.unique(pred["continuation"])) <= {0, 1}
    for c, k in enumerate(cards):
        assert pred["node_categorical"][..., c].min() >= 0
        assert pred["node_categorical"][..., c].max() < k
    for c, k in enumerate(gcards):
        assert (
            0 <= pred["graph_categorical"][:, c].min() <= pred["graph_categorical"][:, c].max() < k
        )
    for k in ("node_continuous", "graph_continuous", "reward"):
        assert np.all(np.isfinite(pred[k]))


# ------------------------------------------------------------------------------ registry
def test_registry_and_presets_follow_the_final_table():
    assert set(BASELINES) <= set(available_models())
    p = get_hyperparameters("ea-gwm", "OD")
    assert p["model"] == {"mp_layers": 4, "hidden_dim": 64, "beta_adj": 1.0}
    assert p["train"] == {"lr": 1e-4, "batch_size": 8, "seq_len": 20}
    assert get_hyperparameters("ea-gwm", "RGC")["train"]["lr"] == 1e-3
    assert get_hyperparameters("vanilla-gwm", "CF")["model"] == {
        "mp_layers": 1,
        "hidden_dim": 128,
        "beta_adj": 0.1,
    }
    assert get_hyperparameters("vanilla-gwm", "RGC")["train"]["lr"] == 5e-4
    g = get_hyperparameters("g-rssm", "RGC")["model"]
    assert (g["mp_layers"], g["encoder_layers"], g["beta_adj"], g["free_bits"]) == (3, 1, 10.0, 0.0)
    g = get_hyperparameters("g-rssm", "SAR")["model"]
    assert (g["mp_layers"], g["encoder_layers"], g["beta_adj"], g["free_bits"]) == (
        1,
        2,
        10.0,
        0.01,
    )
    assert get_hyperparameters("g-rssm", "CF")["model"]["beta_adj"] == 0.1
    for name in BASELINES:
        for env in ("RGC", "OD", "SAR", "CF"):
            m = make_model(name, FULL, None, **get_hyperparameters(name, env)["model"])
            assert m.model_name == name
    assert isinstance(make_model("ea-gwm", EMPTY), GWM)
    assert isinstance(make_model("g-rssm", EMPTY), GRSSM)


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="ea-gwm"):
        make_model("vanilla-gwm", FULL, rollout_weight=0.5)
    with pytest.raises(TypeError, match="unknown"):
        make_model("g-rssm", FULL, no_such_field=1)
    with pytest.raises(ValueError, match="attn_heads"):
        make_model("g-rssm", FULL, hidden_dim=10, attn_heads=4)
    with pytest.raises(ValueError, match="critical_weighting"):
        make_model("ea-gwm", FULL, critical_weighting="pagerank")
    with pytest.raises(ValueError, match="variants"):
        make_model("g-rssm:foo", FULL)


# ------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("schema", [FULL, EMPTY], ids=["full", "no-features"])
def test_loss_observe_imagine_shapes(name, schema):
    torch.manual_seed(0)
    eps, ds, sc = dataset(schema, [3, 7, 5])
    model = make_model(name, schema, sc, **tiny(name))
    batch = ds.make_batch([(0, 0), (1, 3), (2, 1)])  # different N (padding) and a short window
    assert not bool(batch.step_mask.all())
    total, terms = model.loss(batch, torch.Generator().manual_seed(0))
    assert total.ndim == 0 and torch.isfinite(total)
    total.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    _, terms2 = model.loss(ds.make_batch([(1, 0)]), torch.Generator().manual_seed(1))
    assert list(terms) == list(terms2)  # fixed key set
    for n, ep in ((3, eps[0]), (7, eps[1])):
        latent = model.observe(obs_part(ep, 3), ep["action_nodes"][:2], generator=0)
        preds = model.imagine_multi(latent, ep["action_nodes"][2:5], 5, generator=1)
        assert len(preds) == 3
        for pred in preds:
            check_prediction(pred, schema, 5, n)
        one = model.imagine(latent, ep["action_nodes"][2], 4, generator=1)
        check_prediction(one, schema, 4, n)
        # per-sample actions (K, S, N)
        acts = np.zeros((2, 4, n), np.int8)
        acts[:, np.arange(4), np.arange(4) % n] = 1
        check_prediction(model.imagine_multi(latent, acts, 4, generator=2)[1], schema, 4, n)
    # observe accepts a list of observation dicts and a single observation (T = 0)
    single = {k: eps[2][k][0] for k in OBS_KEYS}
    check_prediction(
        model.imagine(model.observe([single], None), eps[2]["action_nodes"][0], 2), schema, 2, 5
    )


@pytest.mark.parametrize("name", BASELINES)
def test_bad_inputs_are_refused(name):
    eps, _, sc = dataset(FULL, [5])
    model = make_model(name, FULL, sc, **tiny(name))
    ep = eps[0]
    latent = model.observe(obs_part(ep, 2), ep["action_nodes"][:1])
    with pytest.raises(DataError, match="N=5"):
        model.imagine(latent, np.zeros(6, np.int8), 2)
    with pytest.raises(DataError, match="actions"):
        model.observe(obs_part(ep, 3), ep["action_nodes"][:1])
    bad = obs_part(ep, 2)
    bad["node_continuous"] = bad["node_continuous"].copy()
    bad["node_continuous"][0, 0, 0] = np.nan
    with pytest.raises(DataError, match="NaN"):
        model.observe(bad, ep["action_nodes"][:1])
    with pytest.raises(ValueError, match="num_samples"):
        model.imagine(latent, ep["action_nodes"][0], 0)


def test_padding_does_not_change_real_node_predictions():
    """A graph padded into a larger batch gets the same predictions as on its own."""
    torch.manual_seed(0)
    eps, _, sc = dataset(FULL, [4, 7])
    for name in ("vanilla-gwm", "g-rssm"):
        model = make_model(name, FULL, sc, **tiny(name)).eval()
        ep = eps[0]
        obs = {k: v[:1] for k, v in observation_to_tensors(obs_part(ep, 1)).items()}
        pad = {}
        for k, v in obs.items():
            if k == "adjacency":
                pad[k] = torch.nn.functional.pad(v, (0, 3, 0, 3))
            elif k in ("node_continuous", "node_categorical"):
                pad[k] = torch.nn.functional.pad(v, (0, 0, 0, 3))
            elif k == "action_mask":
                pad[k] = torch.nn.functional.pad(v, (0, 3))
            else:
                pad[k] = v
        m4 = torch.ones(1, 4, dtype=torch.bool)
        m7 = torch.tensor([[True] * 4 + [False] * 3])
        a = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
        a7 = torch.nn.functional.pad(a, (0, 3))
        with torch.no_grad():
            if name == "vanilla-gwm":
                p4, _ = model.predict(state_from_observation(obs, m4, model.schema, sc), a)
                p7, _ = model.predict(state_from_observation(pad, m7, model.schema, sc), a7)
            else:
                z4 = torch.zeros(1, 4, 8)
                z4[..., 1] = 1.0
                h4 = model.transition(torch.zeros(1, 4, 16), z4, a, m4)
                h7 = model.transition(
                    torch.nn.functional.pad(torch.zeros(1, 4, 16), (0, 0, 0, 3)),
                    torch.nn.functional.pad(z4, (0, 0, 0, 3)),
                    a7,
                    m7,
                )
                torch.testing.assert_close(h7[:, :4], h4)
                p4 = model.decode(h4, z4, m4)
                p7 = model.decode(h7, torch.nn.functional.pad(z4, (0, 0, 0, 3)), m7)
        torch.testing.assert_close(p7.node_continuous[:, :4], p4.node_continuous)
        torch.testing.assert_close(p7.adjacency_logit[:, :4, :4], p4.adjacency_logit)
        torch.testing.assert_close(p7.reward, p4.reward)
        torch.testing.assert_close(p7.graph_categorical[0], p4.graph_categorical[0])


# ------------------------------------------------------------------------------ sampling
def test_symmetric_bernoulli_one_draw_per_unordered_pair():
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([[0.0, 2.0, -1.0], [2.0, 0.0, 0.5], [-1.0, 0.5, 0.0]])
    logits = logits.expand(20000, 3, 3)
    mask = torch.ones(20000, 3, dtype=torch.bool)
    a = sample_symmetric_bernoulli(logits, mask, g)
    assert torch.equal(a, a.transpose(-1, -2))
    assert not a.diagonal(dim1=-2, dim2=-1).any()
    freq = a.mean(0)
    expected = torch.sigmoid(logits[0]) * (1 - torch.eye(3))
    torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)
    # padded nodes never get edges
    mask[:, 2] = False
    assert not sample_symmetric_bernoulli(logits, mask, g)[:, 2].any()


def test_categorical_sampling_matches_probabilities():
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.2, 0.5, 0.3])
    x = sample_categorical(probs.log().expand(30000, 3), g)
    freq = torch.bincount(x, minlength=3).float() / x.numel()
    torch.testing.assert_close(freq, probs, atol=0.012, rtol=0)


# ------------------------------------------------------------------------------ formulas
def test_gwm_predicts_continuous_features_as_residuals_and_q_norm_term():
    eps, ds, sc = dataset(FULL, [5])
    assert not np.allclose(sc.node_std, 1.0)  # the residual must hold in environment units
    model = make_model("vanilla-gwm", FULL, sc, hidden_dim=8)
    with torch.no_grad():
        model.node_heads.cont.weight.zero_()
        model.node_heads.cont.bias.zero_()
        model.graph_heads.cont.bias.fill_(0.5)
        model.graph_heads.cont.weight.zero_()
        model.Q.copy_(2.0 * torch.eye(8) / 8**0.5)  # ||Q||_F = 2
    ep = eps[0]
    latent = model.observe(obs_part(ep, 1), None)
    pred = model.imagine(latent, ep["action_nodes"][0], 3, generator=0)
    np.testing.assert_allclose(pred["node_continuous"][1], ep["node_continuous"][0], rtol=1e-5)
    # graph: x + sigma * 0.5 (standardised residual 0.5)
    np.testing.assert_allclose(
        pred["graph_continuous"][0], ep["graph_continuous"][0] + 0.5 * sc.graph_std, rtol=1e-5
    )
    _, terms = model.loss(ds.make_batch([(0, 0)]))
    assert terms["q_norm"] == pytest.approx(1.0, abs=1e-5)  # (||Q||_F - 1)^2


def test_grssm_adjacency_decoder_formula():
    torch.manual_seed(0)
    model = make_model("g-rssm", FULL, None, **tiny("g-rssm"))
    with torch.no_grad():
        model.adj_bias.fill_(-1.5)
    h, z = torch.randn(2, 5, 16), torch.randn(2, 5, 8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    pred = model.decode(h, z, mask)
    emb = model.f_dec(torch.cat([h, z], -1))
    w = emb @ model.W_adj.weight.T
    expected = torch.einsum("bud,bvd->buv", w, w) - 1.5
    torch.testing.assert_close(pred.adjacency_logit, expected)
    paper = make_model("g-rssm", FULL, None, **tiny("g-rssm", adj_bias=False))
    assert not hasattr(paper, "adj_bias")


# ------------------------------------------------------------------------------ size + checkpoint
@pytest.mark.parametrize("name", BASELINES)
def test_trained_at_20_nodes_runs_at_300(name):
    torch.manual_seed(0)
    eps, ds, sc = dataset(FULL, [18, 20, 22], T=5)
    model = make_model(name, FULL, sc, **tiny(name))
    train(model, ds, TrainConfig(steps=3, batch_size=2, seq_len=3), progress=False)
    big = make_episode(FULL, 300, 2, np.random.default_rng(1))
    latent = model.observe(obs_part(big, 2), big["action_nodes"][:1], generator=0)
    preds = model.imagine_multi(latent, big["action_nodes"][1:2], 2, generator=0)
    check_prediction(preds[0], FULL, 2, 300)


@pytest.mark.parametrize("name", BASELINES)
def test_checkpoint_round_trip(name, tmp_path):
    torch.manual_seed(0)
    eps, ds, sc = dataset(FULL, [5, 6])
    model = make_model(name, FULL, sc, **tiny(name))
    train(model, ds, TrainConfig(steps=2, batch_size=2, seq_len=3), progress=False)
    model.save(tmp_path / "ck")
    loaded = load_checkpoint(tmp_path / "ck", schema=FULL)
    assert type(loaded) is type(model) and loaded.config == model.config
    ep = eps[1]
    outs = []
    for m in (model, loaded):
        m.eval()
        lat = m.observe(obs_part(ep, 3), ep["action_nodes"][:2], generator=3)
        outs.append(m.imagine_multi(lat, ep["action_nodes"][2:4], 6, generator=4))
        loss, _ = m.loss(ds.make_batch([(0, 0), (1, 1)]), torch.Generator().manual_seed(5))
        outs.append(loss.item())
    for a, b in zip(outs[0], outs[2], strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    assert outs[1] == outs[3]
    with pytest.raises(CheckpointError, match="schema"):
        load_checkpoint(tmp_path / "ck", schema=EMPTY)


def test_imagination_is_deterministic_under_a_seed():
    eps, _, sc = dataset(FULL, [6])
    ep = eps[0]
    for name in ("vanilla-gwm", "g-rssm"):
        torch.manual_seed(0)
        model = make_model(name, FULL, sc, **tiny(name))
        lat = model.observe(obs_part(ep, 3), ep["action_nodes"][:2], generator=0)
        a = model.imagine(lat, ep["action_nodes"][2], 50, generator=7)
        b = model.imagine(lat, ep["action_nodes"][2], 50, generator=7)
        c = model.imagine(lat, ep["action_nodes"][2], 50, generator=8)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        assert not np.array_equal(a["adjacency"], c["adjacency"])
    assert isinstance(lat, GRSSMLatent) and lat.num_nodes == 6


# ------------------------------------------------------------------------------ learning
@pytest.mark.parametrize("name", BASELINES)
def test_learns_the_toggling_edge_probability(name):
    """Edge (0,1) toggles i.i.d. with p = 0.3; all other pairs never connect. The stochastic
    G-RSSM's sampled edge frequency and the deterministic GWMs' Bernoulli mean must come within
    0.1 of p (on the training size and on twice the size), other pairs near 0."""
    p = 0.3
    rng = np.random.default_rng(1)
    eps = [make_episode(ROLE, int(n), 20, rng, p) for n in rng.integers(5, 8, 48)]
    ds = EpisodeDataset(eps, ROLE, seq_len=6)
    torch.manual_seed(0)
    model = make_model(
        name, ROLE, None, **tiny(name, **({"free_bits": 0.0} if name == "g-rssm" else {}))
    )
    lr = 2e-2 if name == "g-rssm" else 1e-2
    first = train(
        model,
        ds,
        TrainConfig(steps=300 if name == "g-rssm" else 250, batch_size=8, seq_len=6, lr=lr),
        progress=False,
        keep_history=True,
    )
    last = train(
        model,
        ds,
        TrainConfig(steps=250, batch_size=16, seq_len=6, lr=lr / 10, seed=1),
        progress=False,
        keep_history=True,
    )
    early = np.mean([r["loss"] for r in first.history[:10]])
    late = np.mean([r["loss"] for r in last.history[-10:]])
    assert late < 0.6 * early
    model.eval()
    for n in (6, 12):
        probs = []
        for s in range(3):
            ep = make_episode(ROLE, n, 3, np.random.default_rng(100 + s), p)
            lat = model.observe(obs_part(ep), ep["action_nodes"], generator=s)
            adj = model.imagine(lat, ep["action_nodes"][0], 600, generator=s)["adjacency"].mean(0)
            probs.append(adj[0, 1])
            others = adj.copy()
            others[0, 1] = others[1, 0] = 0
            assert others.max() < 0.1
        assert abs(np.mean(probs) - p) < 0.1, probs


# ------------------------------------------------------------------------------ GWM formulas
# normalised adjacency, GNN layer with the action term, h_i^T Q h_j, Q of norm 1 (paper,
# "Related Work" and appendix "Baseline Implementations"), against slow references


def _ref_norm_adj(a: np.ndarray, self_loops: bool) -> np.ndarray:
    """D^-1/2 A D^-1/2 (or D~^-1/2 (A + I) D~^-1/2) by loops; zero-degree rows stay zero."""
    n = a.shape[0]
    a = a + np.eye(n) if self_loops else a.copy()
    deg = a.sum(1)
    out = np.zeros_like(a, dtype=np.float64)
    for i in range(n):
        for j in range(n):
            if deg[i] > 0 and deg[j] > 0:
                out[i, j] = a[i, j] / np.sqrt(deg[i] * deg[j])
    return out


@pytest.mark.parametrize("self_loops", [False, True])
def test_normalized_adjacency_matches_the_formula(self_loops):
    rng = np.random.default_rng(0)
    n = 7
    up = np.triu(rng.random((n, n)) < 0.4, 1)
    a = (up | up.T).astype(np.float64)
    a[3, :] = a[:, 3] = 0  # an isolated node
    got = normalized_adjacency(
        torch.tensor(a, dtype=torch.float64)[None], torch.ones(1, n, dtype=torch.bool), self_loops
    )[0]
    np.testing.assert_allclose(got.numpy(), _ref_norm_adj(a, self_loops), rtol=1e-12)
    # padding: a padded node is invisible to the real ones
    pad = np.zeros((n + 2, n + 2))
    pad[:n, :n] = a
    pad[n, 0] = pad[0, n] = 1.0  # an edge to a padded node must be ignored
    mask = torch.tensor([True] * n + [False, False])[None]
    got_pad = normalized_adjacency(torch.tensor(pad)[None], mask, self_loops)[0]
    np.testing.assert_allclose(got_pad[:n, :n].numpy(), _ref_norm_adj(a, self_loops), rtol=1e-12)
    assert not got_pad[n:].any() and not got_pad[:, n:].any()


@pytest.mark.parametrize("self_loops", [False, True])
@torch.no_grad()
def test_gwm_step_follows_the_formula(self_loops):
    """h <- h + ReLU(A~ h W_1 + u a(v) + b) per layer; continuous outputs are residuals;
    adjacency logit h_i^T Q_s h_j."""
    rng = np.random.default_rng(0)
    eps = [make_episode(FULL, 6, 3, rng) for _ in range(2)]
    sc = FeatureScaler.fit(eps, FULL)
    torch.manual_seed(0)
    m = make_model("vanilla-gwm", FULL, sc, hidden_dim=8, mp_layers=2, self_loops=self_loops)
    ep = eps[0]
    ep["adjacency"][0, 2, :] = ep["adjacency"][0, :, 2] = 0  # isolated node
    ep["adjacency"][0, 3, 4] = ep["adjacency"][0, 4, 3] = 1
    obs = {k: v[None] for k, v in observation_to_tensors({k: ep[k][0] for k in OBS_KEYS}).items()}
    mask = torch.ones(1, 6, dtype=torch.bool)
    st = state_from_observation(obs, mask, m.schema, m.scaler)
    act = torch.as_tensor(ep["action_nodes"][0], dtype=torch.float32)[None]
    pred, h_out = m.predict(st, act)
    # reference
    e_g = m.graph_encoder(st.graph_continuous, st.graph_categorical)
    e_n = m.node_encoder(st.node_continuous, st.node_categorical, st.action_mask[..., None])
    h = e_n + m.graph_to_node(e_g)[:, None]
    a_t = torch.tensor(_ref_norm_adj(ep["adjacency"][0].astype(np.float64), self_loops)).float()
    for i, w1 in enumerate(m.mp_weights):
        h = h + torch.relu(
            a_t @ (h @ w1.weight.T) + act[..., None] * m.action_weight[i] + m.mp_bias[i]
        )
    torch.testing.assert_close(h_out, h, atol=1e-5, rtol=1e-5)
    q = m.Q
    logit = torch.einsum("bid,de,bje->bij", h, q, h)
    sym = 0.5 * (logit + logit.transpose(-1, -2))  # = h_i^T Q_s h_j
    torch.testing.assert_close(pred.adjacency_logit, sym, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        pred.node_continuous, st.node_continuous + m.node_heads.cont(h), atol=1e-5, rtol=1e-5
    )


def test_gwm_q_norm_regularises_the_matrix_of_the_logit():
    """The regulariser acts on the Q of sigmoid(h_i^T Q h_j) (Q_s): an antisymmetric part of the
    raw parameter, which never enters the logit, must not count towards its norm."""
    rng = np.random.default_rng(0)
    eps = [make_episode(FULL, 5, 3, rng)]
    ds = EpisodeDataset(eps, FULL, seq_len=2)
    m = make_model("vanilla-gwm", FULL, None, hidden_dim=4)
    q0 = m.Q.detach()
    assert torch.allclose(q0, q0.T) and float(q0.norm()) == pytest.approx(1.0, rel=1e-5)
    s = torch.eye(4) / 2.0  # ||S||_F = 1
    k = torch.zeros(4, 4)
    k[0, 1], k[1, 0] = 3.0, -3.0  # antisymmetric
    with torch.no_grad():
        m.Q.copy_(s + k)
    _, terms = m.loss(ds.make_batch([(0, 0)]))
    assert terms["q_norm"] == pytest.approx(0.0, abs=1e-10)
    with torch.no_grad():
        m.Q.copy_(3.0 * s + k)
    _, terms = m.loss(ds.make_batch([(0, 0)]))
    assert terms["q_norm"] == pytest.approx(4.0, rel=1e-5)  # (3 - 1)^2
