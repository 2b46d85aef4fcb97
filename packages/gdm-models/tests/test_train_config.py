"""TrainConfig: every training hyperparameter in one frozen dataclass, checked when built;
``train`` / ``train_ensemble`` take it whole and refuse the old keywords naming the field."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from gdm_models import TrainConfig, train, train_ensemble

from .conftest import TINY


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("steps", -1),
        ("epochs", 1.5),
        ("batch_size", 0),
        ("seq_len", True),
        ("lr", math.inf),
        ("lr", "1e-3"),
        ("grad_clip", 0.0),
        ("seed", -1),
        ("device", "gpu"),
        ("precision", "fp16"),
        ("compile", "yes"),
        ("capture", 1),
        ("log_every", 0),
        ("checkpoint_every", 0),
        ("keep_every", 0),
        ("strategy", "threads"),
        ("strategy", "vmap"),
        ("ensemble", 0),
        ("threads", 0),
    ],
)
def test_a_bad_value_is_refused_naming_field_and_value(field, value):
    with pytest.raises(ValueError, match=re.escape(f"TrainConfig.{field}")) as err:
        TrainConfig(**{field: value})
    assert repr(value) in str(err.value)


def test_defaults_and_frozen():
    c = TrainConfig()
    assert (c.batch_size, c.seq_len, c.lr, c.grad_clip) == (8, 20, 1e-3, 100.0)
    assert (c.checkpoint_every, c.log_every, c.precision, c.strategy) == (1000, 1, "fp32", "auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 1.0  # type: ignore[misc]
    assert hash(c) == hash(TrainConfig())  # usable as a key; equal configs are equal
    assert TrainConfig(device=torch.device("cpu")).device == "cpu"  # kept as a string
    assert TrainConfig(grad_clip=None).grad_clip is None  # no clipping


def test_old_keywords_name_the_field(make_tiny, dataset, scaler):
    m = make_tiny()
    with pytest.raises(TypeError, match=r"batch_size, steps are fields of .*TrainConfig") as err:
        train(m, dataset, steps=2, batch_size=2, progress=False)
    assert "TrainConfig(batch_size=2, steps=2)" in str(err.value)
    with pytest.raises(TypeError, match=r"strategy is a field of .*TrainConfig"):
        train_ensemble("gdm", [1, 2], dataset, scaler=scaler, model_config=TINY, strategy="loop")
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['stepz'\]"):
        train(m, dataset, TrainConfig(steps=1), stepz=2)
    with pytest.raises(TypeError, match=r"needs a TrainConfig"):
        train(m, dataset)
    with pytest.raises(TypeError, match="config must be a TrainConfig, got dict"):
        train(m, dataset, {"steps": 1})  # type: ignore[arg-type]


def test_a_run_needs_exactly_one_length_before_any_step(make_tiny, dataset):
    m = make_tiny()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    for config in (TrainConfig(), TrainConfig(steps=1, epochs=1)):
        with pytest.raises(ValueError, match="exactly one of steps and epochs"):
            train(m, dataset, config, progress=False)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())


def test_threads_are_set_while_training_and_restored(make_tiny, dataset, monkeypatch):
    calls: list[int] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    before = torch.get_num_threads()
    train(make_tiny(), dataset, TrainConfig(steps=1, batch_size=2, seq_len=3, threads=1),
          progress=False)  # fmt: skip
    assert calls == [1, before] and torch.get_num_threads() == before
    calls.clear()
    train(make_tiny(), dataset, TrainConfig(steps=1, batch_size=2, seq_len=3), progress=False)
    assert calls == []  # None: torch's setting is left alone


def test_member_k_is_the_single_run_of_its_seed(make_tiny, dataset, scaler):
    """train_ensemble's config is every member's: member k is train(replace(config, seed=k))."""
    config = TrainConfig(steps=2, batch_size=2, seq_len=3, device="cpu", strategy="loop", seed=99)
    ens = train_ensemble("gdm", [4], dataset, config, scaler=scaler, model_config=TINY,
                         progress=False)  # fmt: skip
    from gdm_models import make_model
    from gdm_models.synthetic import SYNTHETIC_SCHEMA

    torch.manual_seed(4)
    single = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **TINY)
    train(single, dataset, dataclasses.replace(config, seed=4), progress=False)
    for k, v in single.state_dict().items():
        assert torch.equal(v, ens.models[0].state_dict()[k]), k
