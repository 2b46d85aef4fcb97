"""Training states written before the training package (commit 9111df0, issue 36) still
verify, resume and load.

``data/state_9111df0`` holds what that code wrote after step 2 of a 4-step run (Vanilla GWM,
hidden 4): a single run's ``latest/`` (and its CSV log) and a K = 2 ensemble's ``latest/``;
``expected_step4.safetensors`` the weights that code reached after 4 uninterrupted steps.
Resumed here, both runs reach those weights (up to float rounding, so that a later change of
the model's rounding does not break the check of the state format).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gdm_models import EpisodeDataset, FeatureScaler, make_model
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode
from gdm_models.training import (
    TrainConfig,
    load_checkpoint,
    train,
    train_ensemble,
    verify_ensemble_state,
    verify_trainer_state,
)
from safetensors.torch import load_file

OLD = Path(__file__).parent / "data" / "state_9111df0"
CONFIG = {"hidden_dim": 4, "mp_layers": 1}
KW = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, checkpoint_every=2)


@pytest.fixture(scope="module")
def data():
    """The episodes, scaler and dataset the old states were trained on."""
    rng = np.random.default_rng(0)
    eps = [random_episode(int(rng.integers(5, 8)), 8, rng) for _ in range(3)]
    scaler = FeatureScaler.fit(eps, SYNTHETIC_SCHEMA)
    return scaler, EpisodeDataset(eps, SYNTHETIC_SCHEMA, seq_len=3)


def _expected(prefix: str) -> dict[str, torch.Tensor]:
    every = load_file(str(OLD / "expected_step4.safetensors"))
    return {k.split("/", 1)[1]: v for k, v in every.items() if k.startswith(prefix + "/")}


def _assert_weights(model: torch.nn.Module, want: dict[str, torch.Tensor]) -> None:
    got = model.state_dict()
    assert set(got) == set(want)
    for k, v in want.items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-6, msg=k)


def _old(name: str, tmp_path: Path) -> Path:
    """A copy of the old run ``name`` ("single", "ensemble"), its ``latest/`` verified (step 2)."""
    out = tmp_path / name
    shutil.copytree(OLD / name, out)
    verify = verify_trainer_state if name == "single" else verify_ensemble_state
    assert verify(out / "latest")["step"] == 2
    return out


@pytest.mark.exact_float
def test_an_old_single_run_state_verifies_and_resumes(data, tmp_path):
    scaler, ds = data
    ck = _old("single", tmp_path)
    torch.manual_seed(99)  # another initialisation: resuming replaces it
    model = make_model("vanilla-gwm", SYNTHETIC_SCHEMA, scaler, **CONFIG)
    cfg = replace(KW, steps=4, seed=3)
    res = train(model, ds, cfg, checkpoint_dir=ck, log_csv=ck / "log.csv", progress=False)
    assert res.resumed_from == 2 and res.steps == 4
    _assert_weights(model, _expected("single"))
    _assert_weights(load_checkpoint(ck / "final"), _expected("single"))
    rows = (ck / "log.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["step", "1", "2", "3", "4"]


@pytest.mark.exact_float
def test_an_old_ensemble_state_verifies_and_resumes(data, tmp_path):
    scaler, ds = data
    out = _old("ensemble", tmp_path)
    res = train_ensemble("vanilla-gwm", [1, 2], ds, replace(KW, steps=4), scaler=scaler,
                         model_config=CONFIG, out_dir=out, progress=False)  # fmt: skip
    assert res.resumed_from == 2 and res.steps == 4 and all(m.ok for m in res)
    for seed, model in zip([1, 2], res.models, strict=True):
        _assert_weights(model, _expected(f"seed{seed}"))
    # a member's folder is also a single run's latest/: train() resumes it
    single = tmp_path / "single"
    shutil.copytree(OLD / "ensemble" / "latest" / "seed1", single / "latest")
    torch.manual_seed(99)
    model = make_model("vanilla-gwm", SYNTHETIC_SCHEMA, scaler, **CONFIG)
    assert (
        train(
            model, ds, replace(KW, steps=4, seed=1), checkpoint_dir=single, progress=False
        ).resumed_from
        == 2
    )
    _assert_weights(model, _expected("seed1"))
