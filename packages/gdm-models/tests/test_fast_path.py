"""The time-vectorised training loss equals the step-by-step reference, for the GDM
and every ablation; the optional torch.compile falls back to eager with a notice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models.compiling import CompileFallbackWarning, compile_or_eager
from gdm_models.gdm import ABLATIONS, Noise
from gdm_models.gdm.sequence_loss import SEQUENCE_NOISE, sequence_noise_to_steps
from gdm_models.reference import gdm_loss_tensors_reference

VARIANTS = (
    ["gdm"]
    + [f"gdm:{a}" for a in sorted(ABLATIONS)]
    + ["gdm:no-graph-state+no-h-plus+no-recurrent-adj"]
)


def _loss_and_grads(model, batch, noise, reference):
    if reference:
        total, terms = gdm_loss_tensors_reference(model, batch, noise)
    else:
        total, terms = model.loss_tensors(batch, noise)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(total, params, allow_unused=True)
    return total, terms, grads


def _seeded_loss(m, b) -> float:
    """The total loss of batch ``b`` with the noise of seed 0."""
    return m.loss(b, torch.Generator().manual_seed(0))[0].item()


@pytest.mark.parametrize("name", VARIANTS)
def test_fast_loss_and_gradients_equal_the_reference(make_tiny, dataset, name):
    m = make_tiny(name, mp_layers=2)
    if hasattr(m.cell.adjacency, "edge_mlp"):
        torch.nn.init.constant_(
            m.cell.adjacency.edge_mlp.out.bias, 0.0
        )  # many gates open: XOR matters
    # padded batch (different node counts) with a short, masked window
    b = dataset.make_batch([(0, 0), (int(np.argmax(dataset.node_counts)), 1), (6, 0)], seq_len=4)
    assert not b.step_mask.all() and not b.node_mask.all()
    noise = Noise(torch.Generator().manual_seed(0), m.device)
    total, terms, grads = _loss_and_grads(m, b, noise, reference=False)
    assert {k.split("/")[1] for k in noise.record} <= set(SEQUENCE_NOISE)
    replay = Noise(None, m.device, sequence_noise_to_steps(noise.record))
    total_r, terms_r, grads_r = _loss_and_grads(m, b, replay, reference=True)
    assert set(replay.record) == set(replay.replay)  # the reference used exactly that noise
    torch.testing.assert_close(total, total_r, rtol=1e-5, atol=1e-6)
    assert terms.keys() == terms_r.keys()
    for k in terms:
        torch.testing.assert_close(terms[k], terms_r[k], rtol=1e-5, atol=1e-6, msg=k)
    n_grads = 0
    for g, g_r in zip(grads, grads_r, strict=True):
        assert (g is None) == (g_r is None)
        if g is not None:
            torch.testing.assert_close(g, g_r, rtol=1e-4, atol=1e-6)
            n_grads += int(g.abs().sum() > 0)
    assert n_grads > 10


def test_sequence_noise_to_steps_keys():
    u = torch.rand(2, 4, 3)
    steps = sequence_noise_to_steps({"seq/zn_post": u, "seq/adj": u[:, :3], "0/other": u})
    assert set(steps) == {"0/zn_post", "1/zn_post", "2/zn_post", "3/zn_post"} | {
        "1/adj",
        "2/adj",
        "3/adj",
    }
    assert torch.equal(steps["2/zn_post"], u[:, 2]) and torch.equal(steps["1/adj"], u[:, 0])


def test_loss_is_deterministic_and_uses_the_generator(make_tiny, dataset):
    m = make_tiny()
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    a, _ = m.loss(b, torch.Generator().manual_seed(5))
    a2, _ = m.loss(b, torch.Generator().manual_seed(5))
    c, _ = m.loss(b, torch.Generator().manual_seed(6))
    assert a.item() == a2.item() and a.item() != c.item()


def test_training_loss_terms_stay_on_device_as_tensors(make_tiny, dataset):
    m = make_tiny()
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    total, terms = m.training_loss(b, torch.Generator().manual_seed(0))
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in terms.values())
    assert not any(v.requires_grad for v in terms.values())
    _, floats = m.loss(b, torch.Generator().manual_seed(0))
    assert floats == pytest.approx({k: float(v) for k, v in terms.items()})
    assert floats["total"] == pytest.approx(total.item())


def test_compile_unavailable_falls_back_to_eager_with_a_notice(make_tiny, dataset, monkeypatch):
    m = make_tiny()
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    want = _seeded_loss(m, b)
    monkeypatch.delattr(torch, "compile")
    with pytest.warns(CompileFallbackWarning, match="running eager"):
        assert m.enable_compile() is False
    assert _seeded_loss(m, b) == want


def test_compile_failure_at_first_call_falls_back_once(make_tiny, dataset, monkeypatch):
    calls = []

    def broken_compile(fn, **kwargs):
        def run(*args):
            calls.append(1)
            raise RuntimeError("backend exploded\nsecond line")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    m = make_tiny()
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    assert m.enable_compile() is True  # compilation is lazy: failure shows at the first call
    with pytest.warns(
        CompileFallbackWarning, match=r"RuntimeError: backend exploded\); running eager$"
    ):
        _seeded_loss(m, b)
    n = len(calls)
    assert n == 1  # one compiled function: the loss after the noise draw
    got = _seeded_loss(m, b)
    assert len(calls) == n  # and stays eager afterwards (unpadded)
    m.disable_compile()
    assert got == _seeded_loss(m, b)


def test_compiled_path_pads_nodes_without_changing_the_loss(make_tiny, dataset, monkeypatch):
    # torch.compile replaced by the identity: this runs the compiled path's padding and core
    seen = []

    def identity_compile(fn, **kwargs):
        def run(*args):
            seen.append(args[0].shape)  # the adjacency passed to the core
            return fn(*args)

        return run

    monkeypatch.setattr(torch, "compile", identity_compile)
    m = make_tiny()
    m.compile_pad_multiple = 8
    b = dataset.make_batch([(0, 0), (1, 1)], seq_len=3)
    n = b.num_nodes
    assert n % 8
    assert m.enable_compile() is True
    noise = Noise(torch.Generator().manual_seed(0), m.device)
    total, terms = m.loss_tensors(b, noise)
    n_pad = -(-n // 8) * 8
    assert seen[-1][-1] == n_pad
    # the same uniforms on the real nodes give the same loss without padding
    rec = {}
    for k, u in noise.record.items():
        name = k.split("/", 1)[1]
        rec[k] = u[:, :, :n, :n] if name == "adj" else u[:, :, :n] if name.startswith("zn") else u
    m.disable_compile()
    total_e, terms_e = m.loss_tensors(b, Noise(None, m.device, rec))
    torch.testing.assert_close(total, total_e, rtol=1e-5, atol=1e-6)
    for k in terms:
        torch.testing.assert_close(terms[k], terms_e[k], rtol=1e-5, atol=1e-6, msg=k)


def test_compile_or_eager_uses_the_compiled_function(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: lambda *a: fn(*a) + 1)
    f = compile_or_eager(lambda x: x * 2, "f")
    assert f.is_compiled and f(3) == 7


@pytest.mark.parametrize("variant", ["gdm", "gdm:no-graph-state", "gdm:no-recurrent-adj"])
def test_gdm_loss_traces_in_one_graph_and_equals_eager(variant, scaler, tiny, dataset):
    """``enable_compile`` with dynamo's eager backend and ``fullgraph=True``: the GDM's
    tensor-only loss core traces without a graph break (what CUDA graphs need) and gives the
    eager loss and gradients (no padding here, so the noise is the same draw)."""
    from gdm_models import make_model
    from gdm_models.synthetic import SYNTHETIC_SCHEMA

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = make_model(variant, SYNTHETIC_SCHEMA, scaler, **tiny)
    b = dataset.make_batch([(0, 0), (1, 1), (6, 0)], seq_len=3)

    def loss_and_grads():
        m.zero_grad()
        total, terms = m.loss(b, torch.Generator().manual_seed(0))
        total.backward()
        return total.detach(), terms, [p.grad.clone() for p in m.parameters() if p.grad is not None]

    eager = loss_and_grads()
    m.compile_pad_multiple = 1
    assert m.enable_compile(backend="eager", fullgraph=True)
    comp = loss_and_grads()
    assert m.compiled  # no fallback: the core traced as one graph
    torch.testing.assert_close(comp[0], eager[0], rtol=1e-5, atol=1e-6)
    assert comp[1] == pytest.approx(eager[1], rel=1e-5, abs=1e-6)
    for a, e in zip(comp[2], eager[2], strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["gdm", "g-rssm", "ea-gwm"])
def test_compiled_loss_compiles_once_per_padded_node_count(name, scaler, dataset):
    """Under ``enable_compile`` a new graph is traced only for a new padded node count: no
    recompilation per step (noise keys, step indices or batch contents must not be baked in)."""
    from gdm_models import make_model
    from gdm_models.synthetic import SYNTHETIC_SCHEMA
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    kw = {"embed_dim": 8, "hidden_dim": 16} if name == "gdm" else {"hidden_dim": 16}
    m = make_model(name, SYNTHETIC_SCHEMA, scaler, **kw)
    assert m.enable_compile(backend="eager")
    padded = set()
    for i in range(6):
        b = dataset.sample_batch(2, np.random.default_rng(i), seq_len=3)
        padded.add(-(-b.num_nodes // m.compile_pad_multiple) * m.compile_pad_multiple)
        loss, _ = m.loss(b, torch.Generator().manual_seed(i))
        loss.backward()
    assert m.compiled
    assert counters["stats"]["unique_graphs"] == len(padded)


@pytest.mark.parametrize("name", ["gdm", "g-rssm"])
def test_loss_without_a_generator_is_seeded_with_zero(name, scaler, dataset):
    """``generator=None`` means seed 0 for every stochastic model (never torch's global RNG):
    the same call gives the same loss, equal to an explicit seed-0 generator."""
    from gdm_models import make_model
    from gdm_models.synthetic import SYNTHETIC_SCHEMA

    torch.manual_seed(0)
    kw = {"embed_dim": 8, "hidden_dim": 16} if name == "gdm" else {"hidden_dim": 16}
    m = make_model(name, SYNTHETIC_SCHEMA, scaler, **kw)
    b = dataset.make_batch([(0, 0), (1, 1)], seq_len=3)
    first, _ = m.loss(b)
    torch.rand(100)  # the global RNG moves on; the loss must not
    second, _ = m.loss(b)
    seeded, _ = m.loss(b, torch.Generator().manual_seed(0))
    assert first.item() == second.item() == seeded.item()
    other, _ = m.loss(b, torch.Generator().manual_seed(1))
    assert other.item() != first.item()  # the noise does matter
