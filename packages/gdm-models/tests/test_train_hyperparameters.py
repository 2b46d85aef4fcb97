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
        train_ensemble(
            "gdm",
            [1, 2],
            dataset,
            TrainConfig(steps=1, lr=math.inf, batch_size=2, seq_len=3, device="cpu"),
            scaler=scaler,
            model_config=TINY,
            progress=False,
        )


def test_unclipped_training_still_works(make_tiny, dataset):
    res = train(
        make_tiny(seed=1), dataset, replace(KW, steps=1, lr=1e-3, grad_clip=None), progress=False
    )
    assert res.steps == 1
    res = train(
        make_tiny(seed=1),
        dataset,
        replace(KW, steps=1, lr=1e-3, grad_clip=math.inf),
        progress=False,
    )
    assert res.steps == 1


@pytest.mark.parametrize(("key", "value"), [("lr", 1e-2), ("grad_clip", 5.0)])
def test_resume_with_another_hyperparameter_is_refused_naming_it(
    make_tiny, dataset, tmp_path, key, value
):
    ck = tmp_path / "ck"
    train(
        make_tiny(seed=1),
        dataset,
        replace(KW, steps=2, lr=1e-3, checkpoint_every=1),
        checkpoint_dir=ck,
        progress=False,
    )
    with pytest.raises(CheckpointError, match=f"{key}={value!r} differs from the checkpoint"):
        train(make_tiny(seed=1), dataset, replace(KW, steps=4, checkpoint_every=1, **{key: value}),
              checkpoint_dir=ck, progress=False)  # fmt: skip
    # the same hyperparameters resume
    res = train(
        make_tiny(seed=1),
        dataset,
        replace(KW, steps=4, lr=1e-3, checkpoint_every=1),
        checkpoint_dir=ck,
        progress=False,
    )
    assert res.resumed_from == 2


def test_ensemble_resume_with_another_lr_is_refused(scaler, dataset, tmp_path):
    args = TrainConfig(strategy="loop", checkpoint_every=1, batch_size=2, seq_len=3, device="cpu")
    train_ensemble(
        "gdm",
        [1, 2],
        dataset,
        replace(args, steps=2, lr=1e-3),
        out_dir=tmp_path,
        scaler=scaler,
        model_config=TINY,
        progress=False,
    )
    with pytest.raises(CheckpointError, match="lr=0.01 differs from the checkpoint's 0.001"):
        train_ensemble(
            "gdm",
            [1, 2],
            dataset,
            replace(args, steps=4, lr=1e-2),
            out_dir=tmp_path,
            scaler=scaler,
            model_config=TINY,
            progress=False,
        )
