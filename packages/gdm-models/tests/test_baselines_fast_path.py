"""The baselines' optimised training/imagination paths against the slow eager references of
:mod:`gdm_models.reference`, the attention's memory-budgeted blocks
against a dense softmax, the loss-scale dicts (issue 14) and topology sensitivity (issue 13).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import EpisodeDataset, FeatureScaler, make_model
from gdm_models import reference as ref
from gdm_models.baselines import grssm as grssm_mod
from gdm_models.baselines import gwm as gwm_mod
from gdm_models.baselines.common import sampled_state, state_from_observation
from gdm_models.baselines.grssm import AllPairsAttention
from gdm_models.baselines.grssm_filter import posterior_pass
from gdm_models.compiling import CompileFallbackWarning
from gdm_models.data import OBS_KEYS, observation_to_tensors
from gdm_models.synthetic import schema_episode

BASELINES = ("vanilla-gwm", "ea-gwm", "g-rssm")
SCHEMA = {  # SAR-like: every feature type present
    "node_continuous": ["x", "y"],
    "node_categorical": {"role": 2, "kind": 3},
    "graph_continuous": ["k"],
    "graph_categorical": {"mode": 2},
}
OD_LIKE = {
    "node_continuous": ["vibe"],
    "node_categorical": {"opinion": 5},
    "graph_continuous": ["a", "b"],
    "graph_categorical": {},
}


def tiny(name: str, **kw) -> dict:
    if name == "g-rssm":
        base = dict(hidden_dim=16, embed_dim=16, latent_groups=2, latent_classes=4, attn_heads=2)
    elif name == "ea-gwm":  # every EA loss on, short rollouts
        base = dict(hidden_dim=16, mp_layers=3, rollout_steps=3, critical_weight=0.3)
    else:
        base = dict(hidden_dim=16, mp_layers=2)
    return {**base, **kw}


def setup(name: str, schema: dict = SCHEMA, seed: int = 0, **kw):
    """Tiny model and a padded batch (3 graph sizes, one window cut short)."""
    rng = np.random.default_rng(seed)
    eps = [schema_episode(schema, n, 6, rng) for n in (4, 7, 5)]
    sc = FeatureScaler.fit(eps, schema)
    torch.manual_seed(seed)
    model = make_model(name, schema, sc, **tiny(name, **kw))
    batch = EpisodeDataset(eps, schema).make_batch([(0, 0), (1, 2), (2, 3)], seq_len=4)
    assert not bool(batch.step_mask.all()) and not bool(batch.node_mask.all())
    return model, batch, eps


def loss_and_grads(model, fn, batch, seed: int):
    total, terms = fn(batch, torch.Generator().manual_seed(seed))
    params = [p for p in model.parameters()]
    grads = torch.autograd.grad(total, params, allow_unused=True)
    return total.detach(), terms, grads


# ------------------------------------------------------------------------------ fast == reference
@pytest.mark.parametrize("schema", [SCHEMA, OD_LIKE], ids=["sar-like", "od-like"])
@pytest.mark.parametrize("name", BASELINES)
def test_fast_loss_and_gradients_equal_the_reference(name, schema):
    model, batch, _ = setup(name, schema)
    reference = ref.grssm_loss_reference if name == "g-rssm" else ref.gwm_loss_reference
    state = {k: v.clone() for k, v in model.state_dict().items()}
    fast = loss_and_grads(model, model.loss, batch, seed=3)
    fast_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state)  # EA-GWM's power-iteration buffers move in training mode
    slow = loss_and_grads(model, lambda b, g: reference(model, b, g), batch, seed=3)
    torch.testing.assert_close(fast[0], slow[0], rtol=1e-5, atol=1e-6)
    assert list(fast[1]) == list(slow[1])  # same logged keys, same order
    for k in fast[1]:
        assert fast[1][k] == pytest.approx(slow[1][k], rel=1e-5, abs=1e-6), k
    for p_name, a, b in zip(dict(model.named_parameters()), fast[2], slow[2], strict=True):
        assert (a is None) == (b is None), p_name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=p_name)
    for k, v in model.state_dict().items():  # buffers updated identically
        torch.testing.assert_close(fast_state[k], v, rtol=1e-5, atol=1e-6)


def test_grssm_different_noise_gives_a_different_loss():
    """Guard for the test above: the loss does depend on the generator (so equal losses mean
    equal samples)."""
    model, batch, _ = setup("g-rssm")
    a, _ = model.loss(batch, torch.Generator().manual_seed(3))
    b, _ = model.loss(batch, torch.Generator().manual_seed(4))
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("name", BASELINES)
def test_loss_makes_no_per_term_item_calls(name, monkeypatch):
    """The logged terms come from one ``tolist`` sync, not an ``.item()`` per term."""
    model, batch, _ = setup(name)

    def no_item(self):
        raise AssertionError(".item() called inside the training loss")

    monkeypatch.setattr(torch.Tensor, "item", no_item)
    total, terms = model.loss(batch, torch.Generator().manual_seed(0))
    assert torch.isfinite(total) and all(isinstance(v, float) for v in terms.values())
    reference = ref.grssm_loss_reference if name == "g-rssm" else ref.gwm_loss_reference
    with pytest.raises(AssertionError, match="item"):  # the reference does sync per term
        reference(model, batch, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", BASELINES)
def test_total_is_the_scaled_sum_of_the_logged_terms(name):
    model, batch, _ = setup(name, beta_adj=2.5)
    total, terms = model.loss(batch, torch.Generator().manual_seed(0))
    scale = model.loss_scales()
    assert scale["adjacency"] == pytest.approx(2.5 * scale["node"])
    assert set(scale) <= set(terms)
    assert total.item() == pytest.approx(sum(s * terms[k] for k, s in scale.items()), rel=1e-5)
    one_step = ("node", "graph", "adjacency", "action_mask", "reward", "continuation")
    unit = scale["node"]  # beta_pred (G-RSSM) or 1 (GWM)
    assert terms["pred"] == pytest.approx(sum(scale[k] * terms[k] for k in one_step) / unit)


# ------------------------------------------------------------------------------ imagination
def _grssm_imagine_reference(model, latent, actions: np.ndarray, S: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    n = latent.num_nodes
    mask = torch.ones(S, n, dtype=torch.bool)
    h = latent.h.expand(S, *latent.h.shape).contiguous()
    z = ref._sample_z(latent.posterior.expand(S, *latent.posterior.shape), gen)
    out = []
    for a in actions:
        act = torch.as_tensor(a, dtype=torch.float32).expand(S, n)
        h = ref.grssm_transition_reference(model, h, z, act, mask)
        z = ref._sample_z(ref._probs(model, model.prior_net(h)), gen)
        pred = model.decode(h, z, mask)
        out.append(sampled_state(pred, mask, model.schema, model.scaler, gen).obs)
    return out


def _gwm_imagine_reference(model, obs: dict, actions: np.ndarray, S: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    n = obs["adjacency"].shape[-1]
    t = {k: v[None] for k, v in observation_to_tensors(obs).items()}
    mask = torch.ones(1, n, dtype=torch.bool)
    state = state_from_observation(t, mask, model.schema, model.scaler).expand(S)
    out = []
    for a in actions:
        act = torch.as_tensor(a, dtype=torch.float32).expand(S, n)
        pred, _ = ref.gwm_step_reference(model, state, act)
        sample = sampled_state(pred, state.node_mask, model.schema, model.scaler, gen)
        out.append(sample.obs)
        state = sample.state
    return out


@pytest.mark.parametrize("name", BASELINES)
@torch.no_grad()
def test_imagination_samples_equal_the_reference(name):
    model, _, eps = setup(name)
    model.eval()
    ep = eps[1]
    obs = {k: ep[k][:4] for k in OBS_KEYS}
    latent = model.observe(obs, ep["action_nodes"][:3], generator=5)
    fast = model.imagine_multi(latent, ep["action_nodes"][3:6], 7, generator=11)
    if name == "g-rssm":
        # the posterior pass itself against the step-by-step reference (same noise)
        t = {k: v[None] for k, v in observation_to_tensors(obs).items()}
        acts = torch.as_tensor(ep["action_nodes"][None, :3], dtype=torch.float32)
        mask = torch.ones(1, 7, dtype=torch.bool)
        slow_f = ref.grssm_filter_reference(model, t, acts, mask, torch.Generator().manual_seed(5))
        torch.testing.assert_close(latent.h, slow_f["h"][0, -1], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(latent.posterior, slow_f["posterior"][0, -1])
        slow = _grssm_imagine_reference(model, latent, ep["action_nodes"][3:6], 7, 11)
    else:
        slow = _gwm_imagine_reference(model, latent, ep["action_nodes"][3:6], 7, 11)
    for f, s in zip(fast, slow, strict=True):
        for k in ("adjacency", "node_categorical", "graph_categorical", "action_mask"):
            np.testing.assert_array_equal(f[k], s[k].numpy().astype(f[k].dtype), err_msg=k)
        for k in ("node_continuous", "graph_continuous", "reward"):
            np.testing.assert_allclose(f[k], s[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_grssm_training_noise_drawn_at_once_equals_per_step_draws():
    """On the CPU one draw of (T+1, B, N, G, C) uniforms equals T+1 draws of (B, N, G, C):
    the training pass (noise at once) and observe (per step) see the same samples."""
    model, batch, _ = setup("g-rssm")
    obs = {k: getattr(batch, k) for k in OBS_KEYS}
    B, T1, N = batch.batch_size, batch.seq_len + 1, batch.num_nodes
    u = torch.rand((T1, B, N, 2, 4), generator=torch.Generator().manual_seed(2))
    at_once = posterior_pass(model, obs, batch.action_nodes, batch.node_mask, None, u)
    per_step = posterior_pass(
        model, obs, batch.action_nodes, batch.node_mask, torch.Generator().manual_seed(2)
    )
    for k in ("h", "z", "prior", "posterior"):
        torch.testing.assert_close(at_once[k], per_step[k], rtol=0, atol=0)


# ------------------------------------------------------------------------------ attention blocks
def _dense_attention(attn: AllPairsAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    B, N, D = x.shape
    H = attn.heads
    q, k, v = attn.qkv(x).view(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
    s = q @ k.transpose(-1, -2) / (D // H) ** 0.5
    s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
    o = torch.softmax(s, -1) @ v
    return attn.out(o.transpose(1, 2).reshape(B, N, D))


@pytest.mark.parametrize("n", [1, 5, 33])
@torch.no_grad()
def test_attention_blocks_equal_the_dense_attention(n, monkeypatch):
    torch.manual_seed(n)
    x = torch.randn(3, n, 8, dtype=torch.float64)
    mask = torch.rand(3, n) < 0.7
    mask[:, 0] = True
    attn = AllPairsAttention(8, 2).double()
    expected = _dense_attention(attn, x, mask)
    for chunk in (0, 1, 4, n + 3):
        attn.chunk = chunk
        torch.testing.assert_close(attn(x, mask), expected)
    attn.chunk = 0
    row_bytes = 3 * 2 * n * 8
    for budget in (1, row_bytes, 3 * row_bytes, 10**9):  # 1 byte: less than one query row
        monkeypatch.setitem(grssm_mod.ATTENTION_BUDGET_BYTES, "cpu", budget)
        rows = attn.query_block(3, n, x.dtype, x.device)
        assert rows == max(1, min(n, budget // row_bytes))
        torch.testing.assert_close(attn(x, mask), expected)


# ------------------------------------------------------------------------------ topology
def _changed_topology(obs: dict) -> dict:
    out = {k: v.copy() for k, v in obs.items()}
    a = out["adjacency"][-1]
    a[:] = 1 - a
    np.fill_diagonal(a, 0)
    return out


@pytest.mark.parametrize("encoder_layers", [1, 2, 0])
@torch.no_grad()
def test_grssm_posterior_sees_the_observed_topology(encoder_layers):
    """Changing the last observed adjacency changes the posterior (through the GNN encoder);
    with no encoder layer the adjacency reaches nothing, which this check detects."""
    model, _, eps = setup("g-rssm", encoder_layers=encoder_layers)
    ep = eps[1]
    obs = {k: ep[k][:3] for k in OBS_KEYS}
    a = model.observe(obs, ep["action_nodes"][:2], generator=0)
    b = model.observe(_changed_topology(obs), ep["action_nodes"][:2], generator=0)
    torch.testing.assert_close(a.h, b.h)  # h_t is computed before o_t is seen
    diff = (a.posterior - b.posterior).abs().max().item()
    if encoder_layers:
        assert diff > 1e-3
    else:
        assert diff == 0.0


@pytest.mark.parametrize("name", ["vanilla-gwm", "ea-gwm"])
@torch.no_grad()
def test_gwm_predictions_see_the_observed_topology(name, monkeypatch):
    """Changing the observed adjacency changes the GWM's predicted node features and reward
    (through the message passing on A~), not only its adjacency logits; with A~ replaced by
    zeros (the adjacency ignored) they would be equal, which the check detects."""
    model, _, eps = setup(name)
    ep = eps[1]
    obs = {k: ep[k][0] for k in OBS_KEYS}
    mask = torch.ones(1, 7, dtype=torch.bool)
    act = torch.as_tensor(ep["action_nodes"][0], dtype=torch.float32)[None]

    def predict(o):
        t = {k: v[None] for k, v in observation_to_tensors(o).items()}
        return model.predict(state_from_observation(t, mask, model.schema, model.scaler), act)[0]

    changed = _changed_topology({k: v[None] for k, v in obs.items()})
    changed = {k: v[0] for k, v in changed.items()}
    p, q = predict(obs), predict(changed)
    assert (p.node_continuous - q.node_continuous).abs().max() > 1e-4
    assert (p.reward - q.reward).abs().max() > 1e-6
    monkeypatch.setattr(gwm_mod, "normalized_adjacency", lambda a, m, s: torch.zeros_like(a))
    p0, q0 = predict(obs), predict(changed)
    torch.testing.assert_close(p0.node_continuous, q0.node_continuous)
    torch.testing.assert_close(p0.reward, q0.reward)


# ------------------------------------------------------------------------------ compiled loss
@pytest.mark.parametrize("name", BASELINES)
def test_node_padding_leaves_the_loss_unchanged(name):
    """The compiled path pads batches to a multiple of 8 nodes: padded nodes must not count."""
    model, batch, _ = setup(name)
    padded = batch.pad_nodes(8)
    assert padded.num_nodes == 8 and batch.num_nodes == 7
    assert not bool(padded.node_mask[:, 7:].any())
    a = loss_and_grads(model, model.loss, batch, seed=1)
    model.zero_grad()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if name == "g-rssm":  # same noise on the real nodes (the noise is drawn at the real N)
        B, T1 = batch.batch_size, batch.seq_len + 1
        u = torch.rand((T1, B, 7, 2, 4), generator=torch.Generator().manual_seed(1))
        up = torch.nn.functional.pad(u, (0, 0, 0, 0, 0, 1), value=0.5)
        fa, va = model._loss_tensors(batch, u)
        fb, vb = model._loss_tensors(padded, up)
        torch.testing.assert_close(fa, a[0])
    else:
        fa, va = model._loss_tensors(batch)
        model.load_state_dict(state)
        fb, vb = model._loss_tensors(padded)
    torch.testing.assert_close(fb, fa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vb, va, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", BASELINES)
def test_compiled_loss_traces_in_one_graph_and_equals_eager(name):
    """``enable_compile`` with dynamo's eager backend and ``fullgraph=True``: the tensor-only
    loss traces without a graph break (what CUDA graphs need) and gives the eager loss and
    gradients."""
    torch._dynamo.reset()
    model, batch, _ = setup(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    eager = loss_and_grads(model, model.loss, batch, seed=4)
    model.load_state_dict(state)
    assert model.enable_compile(backend="eager", fullgraph=True)
    comp = loss_and_grads(model, model.loss, batch, seed=4)
    assert model.compiled  # no fallback
    torch.testing.assert_close(comp[0], eager[0], rtol=1e-5, atol=1e-6)
    for k in eager[1]:
        assert comp[1][k] == pytest.approx(eager[1][k], rel=1e-5, abs=1e-6), k
    for a, b in zip(comp[2], eager[2], strict=True):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_compile_falls_back_to_eager_with_a_warning(monkeypatch):
    model, batch, _ = setup("vanilla-gwm")

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(CompileFallbackWarning, match="no compiler here"):
        assert not model.enable_compile()
    total, _ = model.loss(batch)
    assert torch.isfinite(total)


@pytest.mark.parametrize("name", BASELINES)
def test_training_loss_keeps_the_terms_on_the_device(name):
    """The trainer's ``training_loss``: the same loss, terms as detached 0-d tensors equal to
    ``loss``'s floats (read by the trainer only every ``log_every`` steps)."""
    model, batch, _ = setup(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    total, terms = model.training_loss(batch, torch.Generator().manual_seed(2))
    model.load_state_dict(state)
    total2, floats = model.loss(batch, torch.Generator().manual_seed(2))
    torch.testing.assert_close(total, total2)
    assert list(terms) == list(floats)
    for k, v in terms.items():
        assert isinstance(v, torch.Tensor) and v.ndim == 0 and not v.requires_grad, k
        assert v.item() == pytest.approx(floats[k], rel=1e-6, abs=1e-7), k
