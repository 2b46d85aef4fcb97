"""The eager step's Adam (:func:`gdm_models.training.step.make_adam`, ``static=False``): torch's
multi-tensor (``foreach``) implementation, whose numbers are those of the per-parameter loop
bit for bit, in far fewer dispatches."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
import torch
from gdm_models import TrainConfig, make_model
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from gdm_models.training.engines import make_engine
from gdm_models.training.step import configure_adam, make_adam, train_step

from .conftest import TINY

#: bit-for-bit claims against torch's own kernels, which differ by CPU instruction set
pytestmark = pytest.mark.exact_float

CONFIGS = {"gdm": TINY, "g-rssm": {"hidden_dim": 16, "embed_dim": 8}, "ea-gwm": {"hidden_dim": 16}}


def _model(name: str, scaler, seed: int):
    torch.manual_seed(seed)
    return make_model(name, SYNTHETIC_SCHEMA, scaler, **CONFIGS[name])


def _train(model, opt, dataset, steps: int = 4) -> None:
    rng = np.random.default_rng(1)
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        batch = dataset.sample_batch(3, rng, seq_len=4)
        train_step(lambda b=batch: model.training_loss(b, gen), opt, params, 1.0, nullcontext())


def _state(model, opt) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in model.parameters()]
    for st in opt.state.values():
        out += [st["exp_avg"].clone(), st["exp_avg_sq"].clone()]
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_engine_adam_is_foreach_and_equals_the_per_parameter_loop(name, scaler, dataset):
    ours, ref = _model(name, scaler, 3), _model(name, scaler, 3)
    engine = make_engine([ours], dataset, TrainConfig(lr=1e-2, capture=False))
    opt = engine.opts[0]
    assert opt.param_groups[0]["foreach"] is True  # not the per-parameter loop
    loop = torch.optim.Adam(ref.parameters(), lr=1e-2, foreach=False)
    initial = [p.detach().clone() for p in ours.parameters()]
    _train(ours, opt, dataset)
    _train(ref, loop, dataset)
    a, b = _state(ours, opt), _state(ref, loop)
    assert len(a) == len(b) > 2 * len(list(ref.parameters()))  # Adam's state exists
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(initial, a, strict=False))  # it trained


def test_member_engine_adam_is_foreach(make_tiny, dataset):
    engine = make_engine([make_tiny(seed=0), make_tiny(seed=1)], dataset, TrainConfig(), "members")
    engine.build([0, 1], None)
    assert engine.opt.param_groups[0]["foreach"] is True


def test_an_older_checkpoints_adam_state_resumes_in_the_foreach_implementation(make_tiny, dataset):
    """A state saved by the per-parameter loop (checkpoints written before) loads with its
    flags; configure_adam sets the eager implementation again and keeps the numbers."""
    model = make_tiny(seed=4)
    old = torch.optim.Adam(model.parameters(), lr=1e-2)  # foreach=None: the loop on the CPU
    _train(model, old, dataset, steps=2)
    saved = old.state_dict()
    opt = make_adam(list(model.parameters()), 1e-2, torch.device("cpu"), static=False)
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["foreach"] is None  # what load_state_dict restores
    configure_adam(opt, fused=False, capturable=False)
    assert opt.param_groups[0]["foreach"] is True
    for key, st in opt.state_dict()["state"].items():
        assert torch.equal(st["exp_avg_sq"], saved["state"][key]["exp_avg_sq"])
