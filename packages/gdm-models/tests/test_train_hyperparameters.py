"""Training hyperparameters are refused before any step (issue 38, class 3): a non-finite or
non-positive lr, a NaN or zero grad_clip; and a resume with any hyperparameter changed is
refused naming the key (it used to continue silently at the checkpoint's lr)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from gdm_models import CheckpointError, TrainConfig, train, train_ensemble

from .conftest import TINY

KW = TrainConfig(batch_size=2, seq_len=3, seed=3, device="cpu")


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"lr": math.inf}, "lr must be a finite number > 0, got inf"),
        ({"lr": math.nan}, "lr must be a finite number > 0, got nan"),
        ({"lr": 0.0}, "lr must be a finite number > 0, got 0.0"),
        ({"lr": -1e-3}, "lr must be a finite number > 0"),
        ({"grad_clip": math.nan}, "grad_clip must be a number > 0"),
        ({"grad_clip": 0.0}, "no parameter would change"),
        ({"grad_clip": -1.0}, "grad_clip must be a number > 0"),
    ],
)
def test_bad_lr_or_grad_clip_is_refused_before_any_step(make_tiny, dataset, tmp_path, bad, needle):
    m = make_tiny(seed=1)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        train(m, dataset, replace(KW, steps=2, **bad), checkpoint_dir=tmp_path / "ck")
    assert not (tmp_path / "ck").exists()  # refused before anything was written
    assert all((v == before[k]).all() for k, v in m.state_dict().items())


def test_bad_lr_is_refused_by_train_ensemble(scaler, dataset):
    with pytest.raises(ValueError, match="lr must be a finite number > 0, got inf"):
        train_ensemble("gdm", [1, 2], dataset, replace(KW, steps=1, lr=math.inf), scaler=scaler,
                       model_config=TINY, progress=False)  # fmt: skip


@pytest.mark.parametrize("clip", [None, math.inf])
def test_unclipped_training_still_works(make_tiny, dataset, clip):
    res = train(make_tiny(seed=1), dataset, replace(KW, steps=1, grad_clip=clip), progress=False)
    assert res.steps == 1


@pytest.mark.parametrize(("key", "value"), [("lr", 1e-2), ("grad_clip", 5.0)])
def test_resume_with_another_hyperparameter_is_refused_naming_it(
    make_tiny, dataset, tmp_path, key, value
):
    def run(**config):
        cfg = replace(KW, checkpoint_every=1, **config)
        return train(make_tiny(seed=1), dataset, cfg, checkpoint_dir=tmp_path, progress=False)

    run(steps=2, lr=1e-3)
    with pytest.raises(CheckpointError, match=f"{key}={value!r} differs from the checkpoint"):
        run(steps=4, **{key: value})
    assert run(steps=4, lr=1e-3).resumed_from == 2  # the same hyperparameters resume


def test_ensemble_resume_with_another_lr_is_refused(scaler, dataset, tmp_path):
    args = TrainConfig(strategy="loop", checkpoint_every=1, batch_size=2, seq_len=3, device="cpu")

    def run(**config):
        train_ensemble("gdm", [1, 2], dataset, replace(args, **config), out_dir=tmp_path,
                       scaler=scaler, model_config=TINY, progress=False)  # fmt: skip

    run(steps=2, lr=1e-3)
    with pytest.raises(CheckpointError, match="lr=0.01 differs from the checkpoint's 0.001"):
        run(steps=4, lr=1e-2)
