"""``keep_every``: the trainers keep the model checkpoint of every k-th step, and it holds the
weights a run of exactly that many steps ends with (also across a resume)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from gdm_models import TrainConfig, load_checkpoint, make_model, train, train_ensemble
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from gdm_models.training.checkpoint import kept_checkpoint_dir

KW = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, device="cpu")


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _train(model, dataset, ck=None, **config) -> None:
    """``model`` trained (seed 3) under ``KW`` changed by ``config``, checkpoints into ``ck``."""
    train(model, dataset, replace(KW, seed=3, **config), checkpoint_dir=ck, progress=False)


def test_train_keeps_every_kth_step_as_the_weights_of_a_run_that_long(make_tiny, dataset, tmp_path):
    ck = tmp_path / "ck"
    _train(make_tiny(seed=2), dataset, ck, steps=3, checkpoint_every=5, keep_every=2)
    # interrupted after step 3 (its latest/ is step 3); resumed to step 6
    _train(make_tiny(seed=99), dataset, ck, steps=6, checkpoint_every=5, keep_every=2)
    kept = sorted(p.name for p in ck.glob("step_*"))
    assert kept == ["step_000002", "step_000004", "step_000006"]
    for step in (2, 4):
        short = make_tiny(seed=2)
        _train(short, dataset, steps=step)
        assert _same(load_checkpoint(kept_checkpoint_dir(ck, step)), short)
    assert _same(load_checkpoint(ck / "step_000006"), load_checkpoint(ck / "final"))


def test_no_keep_every_keeps_nothing_and_bad_values_are_refused(make_tiny, dataset, tmp_path):
    m = make_tiny(seed=2)
    _train(m, dataset, tmp_path, steps=2, checkpoint_every=1)
    assert not list(tmp_path.glob("step_*"))
    with pytest.raises(ValueError, match="keep_every must be >= 1"):
        _train(m, dataset, tmp_path, steps=2, keep_every=0)


def test_ensemble_keeps_every_members_kth_step_beside_its_final(scaler, dataset, tmp_path):
    seeds = [3, 5]
    finals = [tmp_path / f"seed{s}" / "ckpt" / "final" for s in seeds]
    train_ensemble(
        "vanilla-gwm",
        seeds,
        dataset,
        replace(KW, steps=4, keep_every=2, strategy="loop"),
        scaler=scaler,
        model_config={"hidden_dim": 16},
        out_dir=tmp_path / "ens",
        member_finals=finals,
        progress=False,
    )
    for s, final in zip(seeds, finals, strict=True):
        assert sorted(p.name for p in final.parent.glob("step_*")) == ["step_000002", "step_000004"]
        torch.manual_seed(s)
        short = make_model("vanilla-gwm", SYNTHETIC_SCHEMA, scaler, hidden_dim=16)
        train(short, dataset, replace(KW, steps=2, seed=s), progress=False)
        assert _same(load_checkpoint(kept_checkpoint_dir(final.parent, 2)), short)
