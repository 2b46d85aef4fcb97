"""The static-shape training step (gdm_models.training.capture) and the host-sync detector.

On this CPU the step runs eagerly up to the CUDA-only calls; the CUDA graph itself is checked
by benchmarks/gpu_check.sh on a GPU.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from gdm_models import TrainConfig, make_model, train
from gdm_models.data import EpochSampler
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from gdm_models.training.capture import (
    CaptureFallbackWarning,
    StaticShape,
    StaticTrainStep,
    pad_batch,
)
from gdm_models.training.host_sync import HostSyncError, forbid_host_sync
from gdm_models.training.step import make_adam

from .conftest import TINY

CONFIGS = {
    "gdm": TINY,
    "vanilla-gwm": {"hidden_dim": 16},
    "ea-gwm": {"hidden_dim": 16},
    "g-rssm": {"hidden_dim": 16, "embed_dim": 8},
}


def _model(name, scaler, seed=0):
    torch.manual_seed(seed)
    return make_model(name, SYNTHETIC_SCHEMA, scaler, **CONFIGS[name])


def _loss_and_grads(model, batch):
    """Loss and gradients, leaving the model's buffers as they were (EA-GWM's power-iteration
    vectors advance at every call)."""
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.zero_grad(set_to_none=True)
    loss, _ = model.training_loss(batch, torch.Generator().manual_seed(0))
    loss.backward()
    model.load_state_dict(buffers, strict=False)
    return loss.detach(), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


def _cpu_step(model, dataset, *, warmup=3, forced_capture=False):
    """A static step of ``model`` on the CPU (B = 2, L = 3); ``forced_capture`` sets it to
    capture as it would on CUDA (here the capture then fails at the first CUDA call)."""
    params = [p for p in model.parameters() if p.requires_grad]
    step = StaticTrainStep(
        model, make_adam(params, 1e-3, torch.device("cpu")), params,
        torch.Generator().manual_seed(0), 1.0, StaticShape.for_dataset(dataset, 2, 3),
        warmup=warmup,
    )  # fmt: skip
    step.runner.capture = forced_capture
    return step, params


@pytest.fixture
def constant_noise(monkeypatch):
    """Every uniform is 0.37: the noise of a padded batch then equals that of the unpadded
    one on the real entries, so the two losses must agree exactly up to rounding."""
    real_rand = torch.rand

    def rand(*size, generator=None, device=None, dtype=None, **kw):
        shape = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
        return torch.full(tuple(shape), 0.37, device=device, dtype=dtype or torch.float32)

    monkeypatch.setattr(torch, "rand", rand)
    yield
    monkeypatch.setattr(torch, "rand", real_rand)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_padded_static_step_equals_unpadded(name, scaler, dataset, constant_noise):
    """Padding nodes and rows (a smaller last batch) changes neither loss nor gradients."""
    model = _model(name, scaler)
    batch = EpochSampler(dataset, 2, 3, seed=4).next_batch()
    shape = StaticShape(batch_size=5, seq_len=3, num_nodes=batch.num_nodes + 3)
    padded = pad_batch(batch, shape)
    assert padded.adjacency.shape == (5, 4, shape.num_nodes, shape.num_nodes)
    assert not padded.step_mask[2:].any() and not padded.node_mask[:, batch.num_nodes :].any()
    loss, grads = _loss_and_grads(model, batch)
    loss_p, grads_p = _loss_and_grads(model, padded)
    torch.testing.assert_close(loss_p, loss, rtol=1e-5, atol=1e-6)
    for k in grads:
        torch.testing.assert_close(grads_p[k], grads[k], rtol=1e-4, atol=1e-6, msg=k)


def test_static_shape_of_a_dataset(dataset):
    """N is the largest graph; B at most the number of episodes (one window per episode)."""
    shape = StaticShape.for_dataset(dataset, 3, 4)
    assert shape == StaticShape(3, 4, max(dataset.node_counts))
    assert StaticShape.for_dataset(dataset, 50, 4).batch_size == len(dataset)


def test_pad_batch_refuses_a_larger_batch(dataset):
    batch = EpochSampler(dataset, 3, 3, seed=0).next_batch()
    with pytest.raises(ValueError, match="exceeds the static shape"):
        pad_batch(batch, StaticShape(2, 3, batch.num_nodes))
    with pytest.raises(ValueError, match="L = 3"):
        pad_batch(batch, StaticShape(3, 4, batch.num_nodes))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_static_step_has_no_host_sync(name, scaler, dataset):
    """Forward, backward, clipping, Adam and the non-finite flag stay on the device."""
    step, _ = _cpu_step(_model(name, scaler), dataset)
    sampler = EpochSampler(dataset, 2, 3, seed=0)
    step(sampler.next_batch())  # first call: allocates the static buffers and Adam's state
    static = step._load(sampler.next_batch())
    with forbid_host_sync():
        step.opt.zero_grad(set_to_none=True)
        loss, gn, terms = step._step(static)
    assert torch.isfinite(loss) and gn > 0 and terms


def test_old_eager_step_is_caught(scaler, dataset):
    """The detector sees the eager trainer's syncs: Adam's per-parameter ``item()`` on its
    host step counters (the reason the static step uses fused Adam)."""
    model = _model("gdm", scaler)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    batch = EpochSampler(dataset, 2, 3, seed=0).next_batch()
    for _ in range(2):
        opt.zero_grad()
        loss, _ = model.training_loss(batch, torch.Generator().manual_seed(0))
        loss.backward()
        if _ == 1:
            with pytest.raises(HostSyncError, match="_local_scalar_dense"), forbid_host_sync():
                opt.step()
        else:
            opt.step()


def test_detector_refuses_host_data_and_reads():
    x = torch.ones(3)
    with pytest.raises(HostSyncError, match="as_tensor of host data"), forbid_host_sync():
        torch.as_tensor([1.0, 2.0])
    with pytest.raises(HostSyncError, match="local_scalar_dense"), forbid_host_sync():
        x.sum().item()
    with pytest.raises(HostSyncError, match="nonzero"), forbid_host_sync():
        torch.nonzero(x)
    with pytest.raises(HostSyncError, match="numpy"), forbid_host_sync():
        x.numpy()
    with forbid_host_sync():  # device-side work passes, and torch is restored afterwards
        torch.as_tensor(x * 2)
    assert torch.as_tensor([1.0]).item() == 1.0


def test_static_training_is_deterministic_and_not_the_eager_path(scaler, dataset):
    kw = TrainConfig(steps=6, batch_size=3, seq_len=3, lr=3e-3, seed=2, device="cpu", capture=True)
    runs = []
    for _ in range(2):
        m = _model("gdm", scaler, seed=1)
        res = train(m, dataset, kw, progress=False, keep_history=True)
        runs.append((res, {k: v.clone() for k, v in m.state_dict().items()}))
    (r1, w1), (r2, w2) = runs
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert [h["loss"] for h in r1.history] == [h["loss"] for h in r2.history]
    eager = _model("gdm", scaler, seed=1)
    train(eager, dataset, replace(kw, capture=False), progress=False)
    assert any(not torch.equal(w1[k], v) for k, v in eager.state_dict().items())


def test_static_run_resumes_an_eager_checkpoint(scaler, dataset, tmp_path):
    """A run resumed with the other step implementation continues (Adam's flags and step
    counters are converted), and its Adam is the fused one afterwards."""
    kw = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, seed=3, device="cpu", checkpoint_every=2)
    m = _model("vanilla-gwm", scaler)
    train(
        m,
        dataset,
        replace(kw, steps=2, capture=False),
        progress=False,
        checkpoint_dir=tmp_path / "ck",
    )
    m2 = _model("vanilla-gwm", scaler, seed=9)
    res = train(
        m2,
        dataset,
        replace(kw, steps=4, capture=True),
        progress=False,
        checkpoint_dir=tmp_path / "ck",
    )
    assert res.resumed_from == 2 and res.steps == 4
    state = torch.load(tmp_path / "ck/latest/trainer_state.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["fused"] is True
    assert float(next(iter(state["optimizer"]["state"].values()))["step"]) == 4


def test_failed_capture_falls_back_with_a_warning(scaler, dataset):
    """Capture forced on a CPU fails at the first CUDA-only call: one warning naming why,
    then the step runs eagerly and still trains."""
    step, params = _cpu_step(_model("vanilla-gwm", scaler), dataset, warmup=1, forced_capture=True)
    gen0 = step.generator
    sampler = EpochSampler(dataset, 2, 3, seed=0)
    step(sampler.next_batch())  # warm-up
    before = [p.detach().clone() for p in params]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss, _, _ = step(sampler.next_batch())
    msgs = [w for w in caught if issubclass(w.category, CaptureFallbackWarning)]
    assert len(msgs) == 1 and "capture of the training step failed" in str(msgs[0].message)
    assert step.fallback_reason and step.graph is None and torch.isfinite(loss)
    # the generator registered with the failed capture is replaced by one in its state
    assert step.generator is not gen0 and step.runner.current(gen0) is step.generator
    assert any(not torch.equal(a, b) for a, b in zip(before, params, strict=True))
    step(sampler.next_batch())  # later steps: eager, no new warning


@pytest.mark.parametrize("name", list(CONFIGS))
def test_static_member_ensemble_equals_static_single_runs(name, scaler, dataset):
    """The static ensemble step (the member engine, padded batches, noise drawn at the static
    shape, fused Adam) trains member k as ``train(capture=True)`` trains seed k, up to
    rounding."""
    from gdm_models import train_ensemble

    from .test_ensemble import KW, SEEDS, _assert_close_weights

    cfg = replace(KW, batch_size=3, capture=True)  # 7 episodes: an epoch's last batch has 1 row
    res = train_ensemble(
        name, SEEDS, dataset, replace(cfg, strategy="members"), scaler=scaler,
        model_config=CONFIGS[name], keep_history=True, progress=False,
    )  # fmt: skip
    for k, seed in enumerate(SEEDS):
        single = _model(name, scaler, seed=seed)
        sres = train(single, dataset, replace(cfg, seed=seed), keep_history=True, progress=False)
        got = [r["loss"] for r in res[k].history]
        want = [r["loss"] for r in sres.history]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        _assert_close_weights(name, res.models[k], single)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CONFIGS))
def test_captured_graph_equals_the_eager_static_step_on_cuda(name, scaler, dataset):
    """On CUDA: ten steps replayed from one captured graph (noise drawn inside it from the
    registered generator) give the eager static step's losses and weights."""
    dev = torch.device("cuda")
    runs = []
    for capture in (False, True):
        model = _model(name, scaler).to(dev)
        params = [p for p in model.parameters() if p.requires_grad]
        step = StaticTrainStep(
            model, make_adam(params, 1e-3, dev), params,
            torch.Generator(device=dev).manual_seed(0), 1.0,
            StaticShape.for_dataset(dataset, 3, 3), capture=capture, warmup=2,
        )  # fmt: skip
        sampler = EpochSampler(dataset, 3, 3, seed=0)
        losses = [step(sampler.next_batch())[0].item() for _ in range(10)]
        assert (step.graph is not None) == capture, step.fallback_reason
        runs.append((losses, [p.detach().clone() for p in params]))
    (l0, w0), (l1, w1) = runs
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    for a, b in zip(w0, w1, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_a_synchronising_loss_is_named_and_never_captured(scaler, dataset, monkeypatch):
    """The last warm-up step runs under the host-sync detector: a loss that reads a value on
    the host is named in one warning and the step stays eager (no generator is registered)."""
    model = _model("vanilla-gwm", scaler)
    real_loss = model.training_loss

    def syncing_loss(batch, generator=None):
        total, terms = real_loss(batch, generator)
        if float(total) > -1.0:  # a host read, as a data-dependent branch would do
            return total, terms
        return total, terms

    monkeypatch.setattr(model, "training_loss", syncing_loss)
    step, _ = _cpu_step(model, dataset, warmup=2, forced_capture=True)
    sampler = EpochSampler(dataset, 2, 3, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            loss, _, _ = step(sampler.next_batch())
    msgs = [str(w.message) for w in caught if issubclass(w.category, CaptureFallbackWarning)]
    assert len(msgs) == 1 and "HostSyncError" in msgs[0] and "_local_scalar_dense" in msgs[0]
    assert step.graph is None and step.calls == 4 and torch.isfinite(loss)
    assert step.generator is step.runner.generators[0]  # never registered: the same object


def test_scaler_device_copies_are_made_once_and_never_inside_a_transform(scaler):
    """The statistics' device copy is made once, outside any transform: a tensor made inside
    vmap is functorch's wrapper, which must not outlive the call (a later deepcopy failed)."""
    import copy

    from gdm_models import FeatureScaler

    fresh = FeatureScaler.from_dict(scaler.to_dict())
    x = torch.ones(3, 4, len(fresh.node_mean))
    out = torch.func.vmap(fresh.scale_node)(x)
    assert fresh._device_cache == {}
    copy.deepcopy(fresh)  # no functorch wrapper inside
    torch.testing.assert_close(out, fresh.scale_node(x))
    assert len(fresh._device_cache) == 2  # mean and std, made once
    cached = [t for _, t in fresh._device_cache.values()]
    fresh.scale_node(x)
    again = [t for _, t in fresh._device_cache.values()]
    assert all(a is b for a, b in zip(again, cached, strict=True))
    with forbid_host_sync():  # the cached copies: no host data on a later call
        fresh.scale_node(x)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_static_member_step_has_no_host_sync(name, scaler, dataset):
    """The member engine's captured body (each member's noise, the member model's losses,
    backward, per-member clipping, fused Adam) stays on the device: it can be one CUDA graph."""
    from gdm_models.training.engines import MemberEngine

    models = [_model(name, scaler, seed=s) for s in (1, 2, 3)]
    engine = MemberEngine(
        models, lr=1e-3, clip=1.0, autocast=torch.autocast("cpu", enabled=False),
        static_shape=StaticShape.for_dataset(dataset, 2, 3),
    )  # fmt: skip
    engine.build([0, 1, 2], None)
    samplers = [EpochSampler(dataset, 2, 3, seed=s) for s in (1, 2, 3)]
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    engine.step(samplers, gens)  # allocates the static buffers and Adam's state
    with forbid_host_sync():
        engine.opt.zero_grad(set_to_none=True)
        loss, gn, terms = engine._static_body()
    assert loss.shape == gn.shape == (3,) and torch.isfinite(loss).all() and terms
