"""The GDM's posterior step written once (gdm_models.gdm.step): its named parts against the
step-by-step reference (the parts' plain forms), the fused layers against their unfused forms,
every posterior path a scan of the same step, and checkpoints of the code before the cell
(commit 9111df0) loading and resuming."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gdm_models import (
    EpisodeDataset,
    FeatureScaler,
    TrainConfig,
    load_checkpoint,
    make_model,
    train,
)
from gdm_models.data import OBS_KEYS
from gdm_models.gdm import ABLATIONS, Noise, sequence_noise_to_steps
from gdm_models.gdm.latent import PosteriorSequence
from gdm_models.gdm.sequence_loss import draw_sequence_noise
from gdm_models.gdm.step import STEP_OUTPUTS, PosteriorStep
from gdm_models.layers import (
    MLP,
    FusedLinear,
    LayerNormGRU,
    MLPTail,
    block_addmm,
    gru_from_split_gates,
    gru_hidden_blocks,
    gumbel_from_uniform,
    onehot_st_gumbel,
    sample_onehot_st,
    split_first_layer,
    unimix_lerp,
    unimix_probs,
)
from gdm_models.losses import masked_mean
from gdm_models.message_passing import FlatMessagePassing, GraphMessagePassing, normalise_weights
from gdm_models.reference import gdm_posterior_step_reference
from gdm_models.synthetic import SYNTHETIC_SCHEMA, TINY_GDM_CONFIG, random_episode

DATA = Path(__file__).parent / "data" / "gdm_checkpoint_9111df0"


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- fused layers = unfused
def test_fused_linear_equals_its_linear_maps():
    torch.manual_seed(0)
    x = torch.randn(7, 5)
    maps = [torch.nn.Linear(5, 3), torch.nn.Linear(5, 4, bias=False), torch.nn.Linear(5, 2)]
    ys = FusedLinear([(m.weight.T, m.bias) for m in maps])(x)
    assert [y.shape[-1] for y in ys] == [3, 4, 2]
    for m, y in zip(maps, ys, strict=True):
        _close(y, m(x))
    (y,) = FusedLinear([(maps[1].weight.T, None)])(x)  # no bias at all: a plain product
    torch.testing.assert_close(y, x @ maps[1].weight.T)


def test_member_fused_linear_maps_each_members_rows():
    torch.manual_seed(0)
    w, b = torch.randn(3, 5, 4), torch.randn(3, 4)  # K = 3 members
    x = torch.randn(3, 6, 5)  # (K, rows, in)
    (y,) = FusedLinear([(w, b)])(x)
    for k in range(3):
        _close(y[k], x[k] @ w[k] + b[k])


def test_split_first_layer_and_tail_equal_the_mlp():
    torch.manual_seed(0)
    mlp = MLP(3 + 4, 8, 6)
    x, y = torch.randn(5, 3), torch.randn(5, 4)
    (w_x, w_y), bias = split_first_layer(mlp, [3, 4])
    first = torch.addmm(F.linear(y, w_y, bias), x, w_x.T)  # [x, y] W^T + b, by parts
    _close(MLPTail(mlp)(first), mlp(torch.cat([x, y], -1)))


def test_gru_from_hidden_blocks_equals_the_gru_cell():
    torch.manual_seed(0)
    gru = LayerNormGRU(6, 5)
    x, h = torch.randn(4, 6), torch.randn(4, 5)
    gi = F.linear(x, gru.cell.weight_ih, gru.cell.bias_ih)
    gh = FusedLinear(gru_hidden_blocks(gru.cell))(h)
    _close(gru.norm(gru_from_split_gates(gi, h, *gh)), gru(x, h))


def test_flat_message_passing_equals_the_module():
    torch.manual_seed(0)
    b, n, h, hg, zg = 2, 5, 6, 3, 4
    mp = GraphMessagePassing(h, hg + zg, 2)
    x, g = torch.randn(b, n, h), torch.randn(b, hg + zg)
    alpha = normalise_weights((torch.rand(b, n, n) < 0.5).float())
    flat = FlatMessagePassing(mp, h, hg, zg)
    assert flat.first_g is not None
    (y,) = FusedLinear([flat.first])(x.reshape(b * n, h))  # layer 0's node rows ...
    g_rows = g[:, :hg] @ flat.first_g[0] + g[:, hg:] @ flat.first_g[1]  # ... and [h_g, z_g]
    y = y + g_rows.repeat_interleave(n, 0)
    want = mp.forward_normalised(x, g, alpha).reshape(b * n, h)
    _close(flat(y, alpha, b, n, (b * n,)), want)


def test_unimix_sample_and_pooling_forms():
    torch.manual_seed(0)
    logits, u = torch.randn(4, 3, 5), torch.rand(4, 3, 5)
    probs = unimix_lerp(logits, 0.01, {})
    _close(probs, unimix_probs(logits, 0.01))
    z = onehot_st_gumbel(probs, gumbel_from_uniform(u), torch.arange(5))
    assert torch.equal(z, sample_onehot_st(probs, u))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.float)  # B = 2 graphs, N = 3
    x = torch.randn(2, 3, 4)
    pool_mat = torch.block_diag(*(m / m.sum() for m in mask))  # (B, B*N)
    _close(
        block_addmm(torch.zeros(2, 4), pool_mat, x.reshape(6, 4)),
        masked_mean(x, mask[..., None], 1),
    )


# ---------------------------------------------------------------- named parts = reference
@pytest.mark.parametrize("name", ["gdm", *(f"gdm:{a}" for a in sorted(ABLATIONS))])
def test_posterior_step_parts_equal_the_reference(make_tiny, dataset, name):
    """Every posterior step of a training window (transition h^-, h-plus h^+, graph latent
    q_g / z_g^+, message passing and node latent q_n / z^+) equals the reference's plain
    step (concatenated inputs, whole modules, the PyG message passing), same uniforms."""
    m = make_tiny(name, mp_layers=2)
    batch = dataset.make_batch([(0, 0), (int(np.argmax(dataset.node_counts)), 1)], seq_len=3)
    B, L, N = batch.batch_size, batch.seq_len, batch.num_nodes
    noise = Noise(torch.Generator().manual_seed(3), m.device)
    u = draw_sequence_noise(m, noise, B, L, N)
    cell, nm = m.cell, batch.node_mask
    obs = {k: getattr(batch, k).flatten(0, 1) for k in OBS_KEYS}
    nm_t = nm[:, None].expand(B, L + 1, N).reshape(-1, N)
    e_v, e_g = (x.reshape(B, L + 1, *x.shape[1:]) for x in cell.encode(obs, nm_t))
    acts = torch.cat([torch.zeros(B, 1, N), batch.action_nodes], 1)
    a_emb = cell.embed.action_embed(acts)
    a_pool = masked_mean(a_emb, nm.float()[:, None, :, None], 2)
    w = batch.adjacency if m.config.recurrent_adjacency else batch.pair_mask.float()
    with torch.no_grad():
        seq = PosteriorSequence(
            a_emb, a_pool, e_v, e_g, normalise_weights(w), u["zg_post"], u["zn_post"]
        )
        _, ys = cell.posterior(seq, nm)
        replay = Noise(None, m.device, sequence_noise_to_steps(noise.record))
        latent = cell.initial_latent(B, N)
        for t, y in enumerate(ys):
            act = acts[:, t]
            latent, o = gdm_posterior_step_reference(
                m, latent, act, batch.observation(t), nm, batch.pair_mask, replay, t, False
            )
            for key, got in zip(STEP_OUTPUTS, y, strict=True):
                if o[key] is None:  # q_g without graph state
                    continue
                # (samples: the same one-hot vectors; straight-through adds p - p)
                _close(got, o[key].reshape(got.shape))


def test_prior_transition_equals_the_plain_transition(make_tiny, dataset):
    """Imagination's transition (the posterior step's gate form) = LN(GRU([z, a] | h))."""
    m = make_tiny()
    torch.manual_seed(1)
    lat = m.cell.initial_latent(2, 6)
    lat.h_n, lat.h_g = torch.randn(2, 6, m.config.hidden_dim), torch.randn(2, m.config.hidden_dim)
    lat.z_n = F.one_hot(torch.randint(0, 2, (2, 6, m.cell.zn_dim)), 2)[..., 0].float()
    a = m.cell.embed.action_embed(torch.rand(2, 6))
    nm = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        got = m.cell.transition(lat, a, nm)
        want = m.cell.deter.transition(lat.h_n, lat.z_n, lat.h_g, lat.z_g, a, nm)
    for g, w_ in zip(got, want, strict=True):
        _close(g, w_)


# ---------------------------------------------------------------- one step, scanned
class _Spy:
    """Records every call of PosteriorStep.__call__ (its outputs)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[torch.Tensor, ...]] = []
        real = PosteriorStep.__call__

        def call(step, carry, x):
            out = real(step, carry, x)
            self.calls.append(out[1])
            return out

        monkeypatch.setattr(PosteriorStep, "__call__", call)


def test_training_observe_and_start_scan_the_same_step(make_tiny, dataset, monkeypatch):
    m = make_tiny()
    spy = _Spy(monkeypatch)
    batch = dataset.make_batch([(0, 0), (1, 0)], seq_len=3)
    m.loss(batch, torch.Generator().manual_seed(0))
    assert len(spy.calls) == 4  # L + 1 steps of one scan
    ep = random_episode(6, 4, np.random.default_rng(0))
    obs = {k: ep[k][:4] for k in OBS_KEYS}
    spy.calls.clear()
    lat = m.observe(obs, ep["action_nodes"][:3], generator=5)
    assert len(spy.calls) == 4
    last = spy.calls[-1]  # observe's latent is the last step's posterior, bit for bit
    assert torch.equal(lat.h_n, last[STEP_OUTPUTS.index("h_n_p")].view_as(lat.h_n))
    assert torch.equal(lat.z_n, last[STEP_OUTPUTS.index("z_n_p")].view_as(lat.z_n))
    spy.calls.clear()
    first = m.prepare_sequence({k: v[0] for k, v in obs.items()}, None)[0]  # (1, ...)
    m.start(first, torch.Generator().manual_seed(0))
    assert len(spy.calls) == 1


def test_observe_equals_the_reference_step_by_step(make_tiny):
    m = make_tiny(mp_layers=2)
    ep = random_episode(7, 5, np.random.default_rng(2))
    obs, acts = m.prepare_sequence({k: ep[k] for k in OBS_KEYS}, ep["action_nodes"])
    lat = m.observe_tensors(obs, acts, Noise(torch.Generator().manual_seed(4), m.device))
    noise = Noise(torch.Generator().manual_seed(4), m.device)
    n = obs["adjacency"].shape[-1]
    nm, pm = torch.ones(1, n, dtype=torch.bool), ~torch.eye(n, dtype=torch.bool)[None]
    ref = m.cell.initial_latent(1, n)
    with torch.no_grad():
        for t in range(obs["adjacency"].shape[0]):
            act = torch.zeros(1, n) if t == 0 else acts[t - 1][None]
            o_t = {k: v[t][None] for k, v in obs.items()}
            ref, _ = gdm_posterior_step_reference(m, ref, act, o_t, nm, pm, noise, t, False)
    _close(lat.h_n, ref.h_n)
    _close(lat.z_n, ref.z_n)
    _close(lat.h_g, ref.h_g)


# ---------------------------------------------------------------- old checkpoints
def _old_run_data() -> tuple[EpisodeDataset, FeatureScaler]:
    """The data of the run that wrote tests/data/gdm_checkpoint_9111df0 (old code, 4 steps of
    ``train(..., batch_size=2, seq_len=3, lr=1e-3, seed=4)`` from ``torch.manual_seed(7)``)."""
    rng = np.random.default_rng(0)
    eps = [random_episode(int(rng.integers(5, 9)), 10, rng) for _ in range(5)]
    return EpisodeDataset(eps, SYNTHETIC_SCHEMA, seq_len=3), FeatureScaler.fit(
        eps, SYNTHETIC_SCHEMA
    )


@pytest.mark.exact_float
def test_a_checkpoint_of_the_old_code_loads(scaler):
    from safetensors.torch import load_file

    m = load_checkpoint(DATA / "final")
    saved = load_file(str(DATA / "final" / "weights.safetensors"))
    state = m.state_dict()
    assert set(state) == set(saved) and "gru_n.cell.weight_ih" in state  # the flat keys
    assert all(torch.equal(state[k], v) for k, v in saved.items())
    assert torch.equal(m.cell.deter.gru_n.cell.weight_ih, saved["gru_n.cell.weight_ih"])
    # the cell's nested names load too
    nested = {f"cell.{k}": v for k, v in m.cell.state_dict().items()}
    fresh = make_model("gdm", SYNTHETIC_SCHEMA, m.scaler, **TINY_GDM_CONFIG)
    fresh.load_state_dict(nested)
    assert torch.equal(fresh.cell.mp.layers[0].lin.weight, saved["mp.layers.0.lin.weight"])


@pytest.mark.exact_float
def test_an_old_latest_state_resumes_exactly(tmp_path):
    """The old run's ``latest/`` (step 4: weights, Adam state, sampler, generator) resumed to
    step 6 equals 6 uninterrupted steps: parameters and optimiser state keep their order.

    The committed state was trained on another CPU, whose kernels (AVX2 / AVX-512 / default)
    round the last bits of steps 1-4 differently: the comparison is within rtol 1e-5 (a
    parameter in the wrong order or a lost Adam moment is off by far more)."""
    ds, scaler = _old_run_data()
    kw = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, seed=4)

    def fresh():
        torch.manual_seed(7)
        return make_model("gdm", SYNTHETIC_SCHEMA, scaler, **TINY_GDM_CONFIG)

    shutil.copytree(DATA / "latest", tmp_path / "run" / "latest")
    resumed = fresh()
    train(
        resumed,
        ds,
        replace(kw, steps=6, checkpoint_every=2),
        checkpoint_dir=tmp_path / "run",
        progress=False,
    )
    straight = fresh()
    train(straight, ds, replace(kw, steps=6), progress=False)
    for k, v in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v, rtol=1e-5, atol=1e-6, msg=k)
