"""GDM model behaviour: shapes, teacher forcing, symmetry, equivariance, size transfer,
loss composition, ablations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import OBS_KEYS, EpisodeDataset, make_model
from gdm_models.gdm import ABLATIONS, GDM, GDMConfig, Noise, permute_noise
from gdm_models.reference import gdm_posterior_step_reference as posterior_step
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode


def _traj(ep, t):
    return {k: ep[k][: t + 1] for k in OBS_KEYS}, ep["action_nodes"][:t]


@pytest.mark.parametrize("n", [3, 7, 12])
def test_imagine_shapes_dtypes_and_symmetry(make_tiny, n):
    m = make_tiny()
    ep = random_episode(n, 4, np.random.default_rng(n))
    lat = m.observe(*_traj(ep, 2), generator=0)
    out = m.imagine(lat, ep["action_nodes"][2], 6, generator=1)
    # the envs' dtypes (docs/contract.md), sample axis first
    expected = {
        "adjacency": ((6, n, n), np.int8),
        "node_continuous": ((6, n, 2), np.float32),
        "node_categorical": ((6, n, 2), np.int64),
        "graph_continuous": ((6, 1), np.float32),
        "graph_categorical": ((6, 1), np.int64),
        "action_mask": ((6, n), np.int8),
        "reward": ((6,), np.float32),
        "continuation": ((6,), np.int64),
    }
    for k, (shape, dtype) in expected.items():
        assert out[k].shape == shape and out[k].dtype == dtype, k
    adj = out["adjacency"]
    assert np.array_equal(adj, adj.transpose(0, 2, 1))
    assert not adj[:, range(n), range(n)].any()
    assert set(np.unique(adj)) <= {0, 1}
    assert out["node_categorical"][..., 0].max() < 3 and out["node_categorical"].min() >= 0
    assert set(np.unique(out["continuation"])) <= {0, 1}
    multi = m.imagine_multi(lat, ep["action_nodes"][2:4], 5, generator=2)
    assert len(multi) == 2 and multi[1]["adjacency"].shape == (5, n, n)


def test_sampled_adjacency_symmetric_many_seeds(make_tiny):
    m = make_tiny()
    # push edge updates to ~50% so that many gates open
    torch.nn.init.zeros_(m.cell.adjacency.edge_mlp.out.bias)
    ep = random_episode(9, 2, np.random.default_rng(0))
    lat = m.observe(*_traj(ep, 1), generator=0)
    for seed in range(10):
        adj = m.imagine(lat, ep["action_nodes"][1], 4, generator=seed)["adjacency"]
        assert np.array_equal(adj, adj.transpose(0, 2, 1))
        assert not adj[:, range(9), range(9)].any()
        assert (adj != ep["adjacency"][1]).any()  # updates do happen


def test_imagine_is_deterministic_under_a_seed(make_tiny):
    m = make_tiny()
    ep = random_episode(6, 3, np.random.default_rng(0))
    lat = m.observe(*_traj(ep, 2), generator=0)
    a = m.imagine(lat, ep["action_nodes"][2], 8, generator=5)
    b = m.imagine(lat, ep["action_nodes"][2], 8, generator=5)
    c = m.imagine(lat, ep["action_nodes"][2], 8, generator=6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)


def test_teacher_forcing_on_posterior_path(make_tiny, dataset):
    m = make_tiny()
    torch.nn.init.zeros_(m.cell.adjacency.edge_mlp.out.bias)
    ep = random_episode(8, 4, np.random.default_rng(3))
    lat = m.observe(*_traj(ep, 3), generator=0)
    np.testing.assert_array_equal(lat.adjacency[0].numpy(), ep["adjacency"][3])
    # the posterior does not depend on the prior edge model at all
    with torch.no_grad():
        m.cell.adjacency.edge_mlp.out.bias.fill_(7.0)
    lat2 = m.observe(*_traj(ep, 3), generator=0)
    torch.testing.assert_close(lat.h_n, lat2.h_n)
    torch.testing.assert_close(lat.z_n, lat2.z_n)
    # in training, the posterior step's adjacency is the observation at every step
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    nm, pm = b.node_mask, b.pair_mask
    prev = m.cell.initial_latent(2, b.num_nodes)
    for t in range(4):
        act = torch.zeros(2, b.num_nodes) if t == 0 else b.action_nodes[:, t - 1]
        prev, o = posterior_step(
            m, prev, act, b.observation(t), nm, pm, Noise(None, m.device), t, t > 0
        )
        assert torch.equal(prev.adjacency, b.adjacency[:, t])


def test_permutation_equivariance_with_fixed_noise(make_tiny):
    m = make_tiny()
    torch.nn.init.zeros_(m.cell.adjacency.edge_mlp.out.bias)
    n = 8
    ep = random_episode(n, 3, np.random.default_rng(1))
    perm = torch.from_numpy(np.random.default_rng(2).permutation(n))
    pn = perm.numpy()
    ep_p = {k: v.copy() for k, v in ep.items()}
    ep_p["adjacency"] = ep["adjacency"][:, pn][:, :, pn]
    for k in ("node_continuous", "node_categorical", "action_mask", "action_nodes"):
        ep_p[k] = ep[k][:, pn]
    obs, act = m.prepare_sequence(*_traj(ep, 2))
    obs_p, act_p = m.prepare_sequence(*_traj(ep_p, 2))
    noise = Noise(torch.Generator().manual_seed(0), m.device)
    lat = m.observe_tensors(obs, act, noise)
    lat_p = m.observe_tensors(
        obs_p, act_p, Noise(None, m.device, permute_noise(noise.record, perm))
    )
    torch.testing.assert_close(lat_p.h_n[0], lat.h_n[0, perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lat_p.h_g, lat.h_g, atol=1e-5, rtol=1e-5)
    a = torch.as_tensor(ep["action_nodes"][2], dtype=torch.float32)[None, None].expand(1, 5, n)
    noise = Noise(torch.Generator().manual_seed(1), m.device)
    preds, _ = m.imagine_tensors(lat, a, noise)
    preds_p, _ = m.imagine_tensors(
        lat_p, a[..., perm], Noise(None, m.device, permute_noise(noise.record, perm))
    )
    p, q = preds[0], preds_p[0]
    assert torch.equal(q["adjacency"], p["adjacency"][:, perm][:, :, perm])
    for k in ("node_continuous", "node_categorical", "action_mask"):
        torch.testing.assert_close(q[k], p[k][:, perm], atol=1e-5, rtol=1e-5)
    for k in ("graph_continuous", "graph_categorical", "reward", "continuation"):
        torch.testing.assert_close(q[k], p[k], atol=1e-5, rtol=1e-5)


def test_batch_padding_does_not_change_per_episode_loss(make_tiny, dataset):
    m = make_tiny(free_bits=0.0)
    # episode 0 alone vs padded next to a larger episode: same loss terms (same noise)
    big = int(np.argmax(dataset.node_counts))
    small = int(np.argmin(dataset.node_counts))
    alone = dataset.make_batch([(small, 0)], seq_len=3)
    both = dataset.make_batch([(small, 0), (big, 0)], seq_len=3)
    n_s, n_b = alone.num_nodes, both.num_nodes
    noise = Noise(torch.Generator().manual_seed(0), m.device)
    m.loss_terms(both, noise)
    # replay the small episode's noise (first batch row, first n_s nodes)
    rec = {}
    for k, u in noise.record.items():  # "seq/<name>": batch, time, then the node axes
        name = k.split("/", 1)[1]
        if name == "adj":
            rec[k] = u[:1, :, :n_s, :n_s]
        elif name.startswith(("zn_",)):
            rec[k] = u[:1, :, :n_s]
        else:
            rec[k] = u[:1]
    _, terms_alone = m.loss_terms(alone, Noise(None, m.device, rec))
    assert n_s < n_b
    # the padded batch with the big episode's steps masked out gives the same terms
    both.step_mask[1] = False
    _, terms_both = m.loss_terms(both, Noise(None, m.device, noise.record))
    for k in terms_alone:
        assert terms_both[k] == pytest.approx(terms_alone[k], rel=1e-4, abs=1e-5), k


def test_loss_is_the_weighted_sum_of_its_terms(make_tiny, dataset):
    betas = dict(beta_pred=0.7, beta_dyn=0.9, beta_rep=0.05, beta_n=1.3, beta_g=0.4,
                 beta_adj=2.0, beta_h=0.25, free_bits=0.0)  # fmt: skip
    m = make_tiny(**betas)
    b = dataset.sample_batch(3, np.random.default_rng(1), seq_len=4)
    total, t = m.loss(b, torch.Generator().manual_seed(0))
    pred = sum(t[k] for k in ("pred_node", "pred_graph", "pred_adj", "pred_action",
                              "pred_reward", "pred_cont"))  # fmt: skip
    assert t["pred"] == pytest.approx(pred, rel=1e-5)
    want = (
        0.7 * pred
        + 1.3 * (0.9 * t["kl_n_dyn"] + 0.05 * t["kl_n_rep"])
        + 0.4 * (0.9 * t["kl_g_dyn"] + 0.05 * t["kl_g_rep"])
        + 2.0 * t["kl_adj"]
        + 0.25 * t["h"]
    )
    assert total.item() == pytest.approx(want, rel=1e-5)
    assert t["pred_adj"] == 0.0 and t["kl_adj"] > 0


def test_free_bits_floor_in_model_loss(make_tiny, dataset):
    m = make_tiny(free_bits=3.0)
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    _, t = m.loss(b, torch.Generator().manual_seed(0))
    for k in ("kl_n_dyn", "kl_n_rep", "kl_g_dyn", "kl_g_rep"):
        assert t[k] == pytest.approx(3.0)  # an untrained model's KL is far below 3 nats


def test_pred_loss_matches_hand_computation_for_reward(make_tiny, dataset, scaler):
    m = make_tiny()
    b = dataset.sample_batch(2, np.random.default_rng(4), seq_len=2)
    with torch.no_grad():
        for p in m.cell.decoder.graph_heads.reward.parameters():
            p.zero_()
        m.cell.decoder.graph_heads.reward.bias.fill_(0.5)
    _, t = m.loss(b, torch.Generator().manual_seed(0))
    z = (b.reward.numpy() - scaler.reward_mean) / scaler.reward_std
    assert t["pred_reward"] == pytest.approx(float(((0.5 - z) ** 2).mean()), rel=1e-5)


def test_gradients_reach_all_parameters(make_tiny, dataset):
    m = make_tiny()
    b = dataset.sample_batch(3, np.random.default_rng(0), seq_len=4)
    total, _ = m.loss(b, torch.Generator().manual_seed(0))
    total.backward()
    unused = [n for n, p in m.named_parameters() if p.grad is None or p.numel() == 0]
    # zero-size parameters aside, every parameter gets a gradient (edge MLP via straight-through)
    assert [n for n in unused if dict(m.named_parameters())[n].numel()] == []
    assert m.cell.adjacency.edge_mlp.w_i.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "ablation", sorted(ABLATIONS) + ["no-graph-state+no-h-plus+no-recurrent-adj"]
)
def test_ablations_train_step_and_imagine(make_tiny, dataset, ablation):
    m = make_tiny("gdm:" + ablation, beta_h=1.0)
    cfg = m.config
    for name in ablation.split("+"):
        for k, v in ABLATIONS[name].items():
            assert getattr(cfg, k) == v  # the ablation wins over overrides
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    total, t = m.loss(b, torch.Generator().manual_seed(0))
    total.backward()
    assert np.isfinite(total.item())
    if not cfg.h_plus:
        assert t["h"] == 0.0
    if not cfg.graph_state:
        assert t["kl_g_dyn"] == 0.0 and not hasattr(m, "gru_g")
    if not cfg.recurrent_adjacency:
        assert t["kl_adj"] == 0.0 and t["pred_adj"] > 0
    ep = random_episode(7, 3, np.random.default_rng(0))
    out = m.imagine(m.observe(*_traj(ep, 2), generator=0), ep["action_nodes"][2], 4, generator=0)
    adj = out["adjacency"]
    assert np.array_equal(adj, adj.transpose(0, 2, 1)) and not adj[:, range(7), range(7)].any()


def test_model_trained_small_runs_large(make_tiny):
    # trained at N = 20 (issue 5: "a model trained at N = 20 runs at N = 300")
    rng = np.random.default_rng(5)
    train_eps = [random_episode(n, 4, rng) for n in (18, 20, 20, 22)]
    ds20 = EpisodeDataset(train_eps, SYNTHETIC_SCHEMA, seq_len=3)
    m = make_tiny()
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    for i in range(3):
        b = ds20.sample_batch(2, np.random.default_rng(i), seq_len=3)
        loss, _ = m.loss(b, torch.Generator().manual_seed(i))
        opt.zero_grad()
        loss.backward()
        opt.step()
    ep = random_episode(300, 1, np.random.default_rng(0), edge_p=0.01)
    lat = m.observe(*_traj(ep, 1), generator=0)
    out = m.imagine(lat, ep["action_nodes"][0], 3, generator=0)
    assert out["adjacency"].shape == (3, 300, 300)
    assert np.isfinite(out["node_continuous"]).all()


def test_bad_inputs_raise(make_tiny):
    m = make_tiny()
    ep = random_episode(5, 3, np.random.default_rng(0))
    obs, act = _traj(ep, 2)
    with pytest.raises(ValueError, match="actions"):
        m.observe(obs, act[:1])
    lat = m.observe(obs, act)
    with pytest.raises(ValueError, match="N=5"):
        m.imagine(lat, np.zeros(6, np.int8), 2)
    with pytest.raises(ValueError, match="0/1"):
        m.imagine(lat, np.full(5, 2), 2)
    with pytest.raises(ValueError):
        GDMConfig(hc_gamma=0.1)
    with pytest.raises(KeyError, match="ablation"):
        make_model("gdm:no-such-thing", SYNTHETIC_SCHEMA)
    assert isinstance(m, GDM)


def test_imagined_scalars_come_back_in_environment_units(make_tiny, scaler):
    """Scalar heads predict standardised z; imagination returns sigma z + mu (appendix
    "Feature Scaling")."""
    m = make_tiny()
    assert not np.allclose(scaler.node_std, 1.0) and not np.allclose(scaler.node_mean, 0.0)
    with torch.no_grad():
        for head in (
            m.cell.decoder.node_heads.cont,
            m.cell.decoder.graph_heads.cont,
            m.cell.decoder.graph_heads.reward,
        ):
            head.weight.zero_()
            head.bias.fill_(0.5)
    ep = random_episode(5, 2, np.random.default_rng(0))
    out = m.imagine(m.observe(*_traj(ep, 1), generator=0), ep["action_nodes"][1], 3, generator=0)
    want_n = (0.5 * scaler.node_std + scaler.node_mean).astype(np.float32)
    np.testing.assert_allclose(
        out["node_continuous"], np.broadcast_to(want_n, (3, 5, 2)), rtol=1e-5
    )
    want_g = (0.5 * scaler.graph_std + scaler.graph_mean).astype(np.float32)
    np.testing.assert_allclose(out["graph_continuous"], np.broadcast_to(want_g, (3, 1)), rtol=1e-5)
    want_r = np.float32(0.5 * scaler.reward_std + scaler.reward_mean)
    np.testing.assert_allclose(out["reward"], np.full(3, want_r), rtol=1e-5)
