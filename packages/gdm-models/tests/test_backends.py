"""Every backend of the GDM (gdm_models.backends) against the plain form, whole rollouts.

For each backend available here (``torch``: the fused forms; ``compiled``: plus the compiled
CPU loops; the captured static training step; the default ``auto``) a rollout equals the
``reference`` backend's (the parts as written, gdm/parts.py) within float rounding: ``observe``
over 10 steps, ``imagine`` over 3 steps with fixed generators and one training step's loss and
gradients, on synthetic data of the four envs' schemas. At N = 150 a sampled draw can flip on
a rounding, so there the imagination steps compare the logits and probabilities of each step
from the same latent (the reference's), not the draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gdm_models import OBS_KEYS, EpisodeDataset, FeatureScaler, make_model
from gdm_models.backends import BACKENDS, active_backend, compiled_loops, plain, use_backend
from gdm_models.gdm import GDMLatent, Noise
from gdm_models.synthetic import ENV_SCHEMAS, TINY_GDM_CONFIG, schema_episode

RTOL = 1e-5


def _fast_backends() -> list[str]:
    """The non-reference backends that run on this machine."""
    out = ["auto", "torch"]
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency of gdm-models
        return out
    return [*out, "compiled"]


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Equal within relative 1e-5 of the tensor's scale (an absolute floor of 1e-5 times its
    largest entry, so entries that cancel to ~0 do not need a relative match)."""
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(
        got, want, rtol=RTOL, atol=RTOL * max(scale, 1e-3), msg=lambda m: f"{what}: {m}"
    )


def _setup(env: str, n: int, steps: int, mp_layers: int = 2, **overrides: Any):
    schema = ENV_SCHEMAS[env]
    rng = np.random.default_rng(7)
    # sparse graphs at large N (the message passing takes its sparse paths there)
    eps = [schema_episode(schema, n, steps, rng, edge_p=min(0.4, 3.0 / n)) for _ in range(2)]
    scaler = FeatureScaler.fit(eps, schema)
    torch.manual_seed(0)
    model = make_model(
        "gdm", schema, scaler, **{**TINY_GDM_CONFIG, "mp_layers": mp_layers, **overrides}
    )
    if model.config.recurrent_adjacency:  # many edge updates open: the gate and XOR matter
        torch.nn.init.constant_(model.cell.adjacency.edge_mlp.out.bias, -1.0)
    return model, eps, EpisodeDataset(eps, schema, seq_len=min(steps, 3))


def _observe(model, ep: dict[str, np.ndarray], backend: str) -> GDMLatent:
    with use_backend(backend):
        return model.observe({k: ep[k] for k in OBS_KEYS}, ep["action_nodes"], 5)


def _loss_and_grads(model, batch, backend: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with use_backend(backend):
        loss, _ = model.training_loss(batch, 11)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _check_latents(got: GDMLatent, want: GDMLatent) -> None:
    names = ("h_n", "z_n", "h_g", "z_g", "adj")
    for name, a, b in zip(names, got.tensors(), want.tensors(), strict=True):
        _close(a, b, name)


# ---------------------------------------------------------------------------- the switch
def test_use_backend_switches_and_restores():
    assert active_backend() == "auto" and not plain()
    with use_backend("reference"):
        assert plain() and active_backend() == "reference"
        with use_backend("torch"):
            assert not plain()
            assert not compiled_loops(torch.zeros(2))  # "torch": never the loops
        assert plain()
    assert active_backend() == "auto"
    with torch.no_grad():
        assert compiled_loops(torch.zeros(2))  # today's default on the CPU
        assert not compiled_loops(torch.zeros(2, dtype=torch.float64))
    assert not compiled_loops(torch.zeros(2))  # autograd on: the training step's torch ops
    with pytest.raises(ValueError, match="unknown backend 'fast'"):
        with use_backend("fast"):
            pass
    assert set(BACKENDS) == {"auto", "reference", "torch", "compiled"}


def test_backend_switches_are_decided_in_one_place():
    """The edge MLP's shortcuts and form are the backend's answers, never a call site's:
    ``"torch"`` has none of the shortcuts, ``"compiled"`` (= ``"auto"``) all of them, and a
    benchmark may turn one off; bad names and switches are refused before any work."""
    from gdm_models import backends

    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert backends.share_identical() and backends.exp_split(cpu) and not backends.exp_split(meta)
    assert backends.edge_mlp_form() == "dense"  # autograd on: the training step's form
    with torch.no_grad():
        assert backends.edge_mlp_form() == "chunked"
        with use_backend("reference"):
            assert backends.edge_mlp_form() == "plain"
        with use_backend("torch"):
            assert not (backends.share_identical() or backends.exp_split(cpu))
            assert not compiled_loops(torch.zeros(2))
        with use_backend("compiled", loops=False):
            assert active_backend() == "compiled" and not compiled_loops(torch.zeros(2))
            assert backends.share_identical() and backends.exp_split(cpu)
        with use_backend("compiled", share_identical=False):
            assert not backends.share_identical() and compiled_loops(torch.zeros(2))
    with pytest.raises(ValueError, match="unknown backend switches \\['fast'\\]"):
        with use_backend("compiled", fast=True):
            pass
    with pytest.raises(ValueError, match="reference backend has no shortcuts"):
        with use_backend("reference", loops=False):
            pass


def test_reference_backend_refuses_member_models(make_tiny, dataset):
    from gdm_models.member_layers import stack_members

    members = stack_members([make_tiny(seed=s) for s in range(2)])
    batch = dataset.make_batch([(0, 0), (1, 0)], seq_len=2)
    with use_backend("reference"), pytest.raises(ValueError, match="not member models"):
        members.member_loss(
            batch, members.member_noise((2, 2, batch.num_nodes), torch.Generator()), 2
        )


# ---------------------------------------------------------------------------- N = 7
def _rollout_equals_the_plain_form(model, ep, acts, samples: int, batch) -> None:
    """Every fast backend's observe, imagine (the samples themselves) and one training step's
    loss and gradients equal the reference backend's within :data:`RTOL`."""
    want_latent = _observe(model, ep, "reference")
    with use_backend("reference"):
        want_img = model.imagine_multi(want_latent, acts, samples, 21)
    want_loss, want_grads = _loss_and_grads(model, batch, "reference")
    for backend in _fast_backends():
        _check_latents(_observe(model, ep, backend), want_latent)
        with use_backend(backend):
            img = model.imagine_multi(want_latent, acts, samples, 21)
        for k, (got, want) in enumerate(zip(img, want_img, strict=True)):
            for key in want:
                g, w = torch.as_tensor(got[key]), torch.as_tensor(want[key])
                _close(g.double(), w.double(), f"{backend} imagine step {k} {key}")
        loss, grads = _loss_and_grads(model, batch, backend)
        _close(loss, want_loss, f"{backend} loss")
        assert grads.keys() == want_grads.keys()
        for name, g in grads.items():
            _close(g, want_grads[name], f"{backend} grad {name}")


@pytest.mark.parametrize("env", sorted(ENV_SCHEMAS))
def test_rollout_equals_the_plain_form_small(env):
    """N = 7: observe 10 steps, imagine 3 steps (the samples themselves), one training step."""
    model, eps, ds = _setup(env, 7, 10)
    acts = np.stack([eps[0]["action_nodes"][k % 10] for k in range(3)])
    batch = ds.make_batch([(0, 0), (1, 1)], seq_len=3)
    _rollout_equals_the_plain_form(model, eps[0], acts, 4, batch)


@pytest.mark.parametrize(
    "ablation",
    ["no-graph-state", "no-h-plus", "bernoulli-adj", "all-pairs-mp", "no-recurrent-adj"],
)
def test_ablations_equal_the_plain_form(ablation):
    """Each ablation's rollout in the fused backends equals its plain form (N = 7, OD)."""
    from gdm_models.gdm.config import ABLATIONS

    model, eps, ds = _setup("OD", 7, 6, **ABLATIONS[ablation])
    batch = ds.make_batch([(0, 0), (1, 1)], seq_len=3)
    _rollout_equals_the_plain_form(model, eps[0], eps[0]["action_nodes"][:3], 3, batch)


# ---------------------------------------------------------------------------- N = 150
def _prior_step(model, latent: GDMLatent, action: torch.Tensor, seed: int):
    """One prior step's logits and probabilities (and the next latent) from ``latent``."""
    cell = model.cell
    s, n = action.shape
    nm = torch.ones(s, n, dtype=torch.bool)
    pm = ~torch.eye(n, dtype=torch.bool)[None]
    noise = Noise(torch.Generator().manual_seed(seed), model.device)
    with torch.no_grad():
        h_n, h_g = cell.transition(latent, cell.embed.action_embed(action), nm)
        o = cell.prior(h_n, h_g, latent.adjacency, nm, pm, cell.prior_noise(noise, "i", s, n))
        node_out, graph_out, _ = cell.decoder(
            h_n, o["z_n_m"], o["p_n"], h_g, o["z_g_m"], o["p_g"], nm
        )
    out = {"h_n": h_n, "logits": o["logits"], "p_n": o["p_n"], "p_g": o["p_g"]}
    out.update({f"node/{k}": v for k, v in node_out.items() if torch.is_tensor(v)})
    out.update({f"graph/{k}": v for k, v in graph_out.items() if torch.is_tensor(v)})
    return out, GDMLatent(h_n, o["z_n_m"], h_g, o["z_g_m"], o["a_m"])


@pytest.mark.parametrize("env", ["SAR", "OD"])
def test_rollout_equals_the_plain_form_large(env):
    """N = 150: observe 4 steps (a latent's continuous states), 3 imagination steps compared
    by their logits and probabilities from the reference's latent of each step, one training
    step's loss and gradients (dense edge MLP and gate with autograd)."""
    model, eps, ds = _setup(env, 150, 4, mp_layers=1)
    ep = eps[0]
    want_latent = _observe(model, ep, "reference")
    batch = ds.make_batch([(0, 0)], seq_len=2)
    want_loss, want_grads = _loss_and_grads(model, batch, "reference")
    lat = want_latent.expand(2)
    want_steps = []
    for k in range(3):
        a = torch.as_tensor(ep["action_nodes"][k], dtype=torch.float32)[None].expand(2, -1)
        with use_backend("reference"):
            out, nxt = _prior_step(model, lat, a, k)
        want_steps.append((lat, a, out))
        lat = nxt
    for backend in _fast_backends():
        latent = _observe(model, ep, backend)
        for name in ("h_n", "h_g"):
            _close(getattr(latent, name), getattr(want_latent, name), f"{backend} {name}")
        for k, (lat, a, want) in enumerate(want_steps):
            with use_backend(backend):
                got, _ = _prior_step(model, lat, a, k)
            for key, w in want.items():
                if w is not None:
                    _close(got[key], w, f"{backend} imagine step {k} {key}")
        loss, grads = _loss_and_grads(model, batch, backend)
        _close(loss, want_loss, f"{backend} loss")
        for name, g in grads.items():
            _close(g, want_grads[name], f"{backend} grad {name}")


# ---------------------------------------------------------------------------- compiled loops
_KERNELS = (
    "_pair_logits",
    "_symmetrise",
    "_mirror_upper",
    "_open_xor",
    "_upper_draw",
    "_gcn_degrees",
    "_gcn_normalise",
    "_neighbours",
    "_neighbour_mean",
)


@pytest.fixture
def python_loops(monkeypatch):
    """The compiled loops replaced by their Python source (``py_func``): the same statements,
    run by the interpreter, so coverage sees every line of gdm_models.cpu_kernels."""
    from gdm_models import cpu_kernels

    calls: dict[str, int] = {}
    for name in _KERNELS:
        kernel = getattr(cpu_kernels, name)
        # under NUMBA_DISABLE_JIT (tests/conftest.py sets it) the kernel is its Python source
        py = getattr(kernel, "py_func", kernel)

        def counted(*args, _py=py, _name=name):
            calls[_name] = calls.get(_name, 0) + 1
            return _py(*args)

        monkeypatch.setattr(cpu_kernels, name, counted)
    return calls


def _gdm_rollout(model, ep, backend: str):
    latent = _observe(model, ep, backend)
    acts = np.stack([ep["action_nodes"][k] for k in range(3)])
    with use_backend(backend):
        return latent, model.imagine_multi(latent, acts, 3, 21)


def test_compiled_loops_in_python_equal_torch(python_loops):
    """The loops' statements (run as Python) give the torch backend's rollout: the GDM's
    observe and imagination, and the baselines' imagination (their draws and EA-GWM's
    normalised adjacency)."""
    model, eps, _ = _setup("SAR", 12, 4)
    torch.nn.init.constant_(model.cell.adjacency.edge_mlp.out.bias, -4.0)  # sparse graphs
    ep = eps[0]
    want_latent, want = _gdm_rollout(model, ep, "torch")
    assert not python_loops
    latent, got = _gdm_rollout(model, ep, "compiled")
    _check_latents(latent, want_latent)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for key in w:
            _close(torch.as_tensor(g[key]).double(), torch.as_tensor(w[key]).double(), f"{k} {key}")
    assert {"_pair_logits", "_symmetrise", "_mirror_upper", "_open_xor"} <= set(python_loops)
    assert {"_neighbours", "_neighbour_mean"} <= set(python_loops)
    schema = ENV_SCHEMAS["SAR"]
    scaler = FeatureScaler.fit(eps, schema)
    for name in ("vanilla-gwm", "ea-gwm", "g-rssm"):
        torch.manual_seed(0)
        baseline = make_model(name, schema, scaler, hidden_dim=16)
        outs = {}
        for backend in ("torch", "compiled"):
            lat = _observe(baseline, ep, backend)
            with use_backend(backend):
                outs[backend] = baseline.imagine_multi(lat, ep["action_nodes"][:2], 3, 4)
        for g, w in zip(outs["compiled"], outs["torch"], strict=True):
            for key in w:
                _close(torch.as_tensor(g[key]).double(), torch.as_tensor(w[key]).double(), key)
    assert {"_upper_draw", "_gcn_degrees", "_gcn_normalise"} <= set(python_loops)


def test_each_backend_takes_its_own_path(monkeypatch):
    """The switch is real: the reference backend runs the plain posterior step and the plain
    edge MLP, the torch backend the fused step and no loop, the compiled backend the loops."""
    from gdm_models import cpu_kernels
    from gdm_models.adjacency import EdgeUpdateMLP
    from gdm_models.gdm import cell as cell_mod

    seen: list[str] = []

    def spy(obj, name, label):
        real = getattr(obj, name)

        def wrapped(*args, **kw):
            seen.append(label)
            return real(*args, **kw)

        monkeypatch.setattr(obj, name, wrapped)

    spy(cell_mod.PlainPosteriorStep, "__call__", "plain step")
    spy(cell_mod.PosteriorStep, "__call__", "fused step")
    spy(EdgeUpdateMLP, "forward_plain", "plain edge")
    spy(cpu_kernels, "pair_logits", "loops")
    model, eps, _ = _setup("OD", 7, 3)
    for backend, want, not_want in (
        ("reference", {"plain step", "plain edge"}, {"fused step", "loops"}),
        ("torch", {"fused step"}, {"plain step", "plain edge", "loops"}),
        ("compiled", {"fused step", "loops"}, {"plain step", "plain edge"}),
    ):
        seen.clear()
        _gdm_rollout(model, eps[0], backend)
        assert want <= set(seen) and not (not_want & set(seen)), (backend, set(seen))
