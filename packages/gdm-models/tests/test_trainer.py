"""Trainer: determinism, exact resume, CSV logging, checkpoints."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
import torch
from gdm_models import OBS_KEYS, TrainConfig, load_checkpoint, train


def _weights(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_deterministic_under_seed(make_tiny, dataset):
    runs = []
    for _ in range(2):
        m = make_tiny(seed=1)
        train(
            m,
            dataset,
            TrainConfig(steps=4, batch_size=2, seq_len=3, lr=1e-3, seed=7, device="cpu"),
            progress=False,
        )
        runs.append(_weights(m))
    assert _same(*runs)
    m = make_tiny(seed=1)
    train(
        m,
        dataset,
        TrainConfig(steps=4, batch_size=2, seq_len=3, lr=1e-3, seed=8, device="cpu"),
        progress=False,
    )
    assert not _same(runs[0], _weights(m))


def test_exact_resume_and_csv(make_tiny, dataset, tmp_path):
    kw = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, seed=3, device="cpu")
    ref = make_tiny(seed=2)
    train(ref, dataset, replace(kw, steps=6), log_csv=tmp_path / "ref.csv", progress=False)

    ck = tmp_path / "ck"
    m = make_tiny(seed=2)
    train(
        m,
        dataset,
        replace(kw, steps=4, checkpoint_every=2),
        checkpoint_dir=ck,
        log_csv=tmp_path / "run.csv",
        progress=False,
    )
    # "interrupted" after step 4; a fresh process rebuilds the model and resumes
    m2 = make_tiny(seed=99)
    res = train(
        m2,
        dataset,
        replace(kw, steps=6, checkpoint_every=2),
        checkpoint_dir=ck,
        log_csv=tmp_path / "run.csv",
        progress=False,
    )
    assert res.resumed_from == 4 and res.steps == 6
    assert _same(_weights(ref), _weights(m2))
    with open(tmp_path / "ref.csv") as f:
        ref_rows = list(csv.DictReader(f))
    with open(tmp_path / "run.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == [str(i) for i in range(1, 7)]
    assert rows == ref_rows
    assert {"loss", "grad_norm", "kl_adj", "pred", "h"} <= set(rows[0])
    final = load_checkpoint(ck / "final")
    assert _same(_weights(final), _weights(m2))


def test_every_logged_row_reaches_the_disk_before_any_checkpoint(make_tiny, dataset, tmp_path):
    """`tail -f` on the log follows the run: step k sees the k - 1 rows logged before it."""
    log = tmp_path / "run.csv"
    model = make_tiny(seed=2)
    rows_on_disk = []
    loss_fn = model.training_loss

    def spy(*args, **kwargs):
        text = log.read_text() if log.is_file() else ""
        rows_on_disk.append(max(0, len(text.splitlines()) - 1))  # minus the header
        return loss_fn(*args, **kwargs)

    model.training_loss = spy
    train(
        model,
        dataset,
        TrainConfig(steps=5, batch_size=2, seq_len=3, seed=3, device="cpu", checkpoint_every=1000),
        progress=False,
        log_csv=log,
        checkpoint_dir=tmp_path / "ck",
    )
    assert rows_on_disk == [0, 1, 2, 3, 4]


def test_epochs_and_argument_errors(make_tiny, dataset):
    m = make_tiny()
    res = train(
        m, dataset, TrainConfig(epochs=1, batch_size=4, seq_len=2, device="cpu"), progress=False
    )
    assert res.steps == -(-len(dataset) // 4)
    with pytest.raises(ValueError, match="exactly one"):
        train(m, dataset, TrainConfig(steps=1, epochs=1), progress=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_train_and_imagine(make_tiny, dataset):
    m = make_tiny()
    train(m, dataset, TrainConfig(steps=2, batch_size=2, seq_len=3, device="cuda"), progress=False)
    ep = dataset.episodes[0]
    lat = m.observe({k: ep[k][:2] for k in OBS_KEYS}, ep["action_nodes"][:1], generator=0)
    out = m.imagine(lat, ep["action_nodes"][1], 4, generator=1)
    assert out["adjacency"].shape[0] == 4 and isinstance(out["reward"], np.ndarray)


def test_log_every_logs_only_every_k_steps_and_keeps_training_identical(
    make_tiny, dataset, tmp_path
):
    kw = TrainConfig(batch_size=2, seq_len=3, lr=1e-3, seed=3, device="cpu")
    ref = make_tiny(seed=2)
    train(ref, dataset, replace(kw, steps=7), log_csv=tmp_path / "every.csv", progress=False)
    m = make_tiny(seed=2)
    res = train(
        m,
        dataset,
        replace(kw, steps=7, log_every=3),
        log_csv=tmp_path / "k.csv",
        keep_history=True,
        progress=False,
    )
    assert _same(_weights(ref), _weights(m))  # logging never changes the computation
    with open(tmp_path / "every.csv") as f:
        every = {r["step"]: r for r in csv.DictReader(f)}
    with open(tmp_path / "k.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["3", "6", "7"]  # multiples of k and the last step
    assert all(r == every[r["step"]] for r in rows)
    assert [h["step"] for h in res.history] == [3, 6, 7] and res.last_terms["step"] == 7


def test_exact_resume_with_log_every(make_tiny, dataset, tmp_path):
    kw = TrainConfig(
        batch_size=2, seq_len=3, lr=1e-3, seed=3, device="cpu", log_every=2, checkpoint_every=3
    )
    ref = make_tiny(seed=2)
    train(ref, dataset, replace(kw, steps=7), log_csv=tmp_path / "ref.csv", progress=False)
    m = make_tiny(seed=2)
    train(
        m,
        dataset,
        replace(kw, steps=3),
        log_csv=tmp_path / "run.csv",
        checkpoint_dir=tmp_path / "ck",
        progress=False,
    )
    m2 = make_tiny(seed=9)
    train(
        m2,
        dataset,
        replace(kw, steps=7),
        log_csv=tmp_path / "run.csv",
        checkpoint_dir=tmp_path / "ck",
        progress=False,
    )
    assert _same(_weights(ref), _weights(m2))
    assert (tmp_path / "run.csv").read_text() == (tmp_path / "ref.csv").read_text()


def test_bf16_autocast_is_close_to_fp32(make_tiny, dataset):
    b = dataset.sample_batch(2, np.random.default_rng(0), seq_len=3)
    m = make_tiny()
    want, terms = m.loss(b, torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, terms_bf = m.loss(b, torch.Generator().manual_seed(0))
    assert got.item() == pytest.approx(want.item(), rel=0.05)
    assert got.item() != want.item()  # bf16 really ran
    m32, m16 = make_tiny(seed=4), make_tiny(seed=4)
    kw = TrainConfig(steps=3, batch_size=2, seq_len=3, lr=1e-3, seed=0, device="cpu")
    r32 = train(m32, dataset, kw, progress=False)
    r16 = train(m16, dataset, replace(kw, precision="bf16"), progress=False)
    assert r16.last_terms["loss"] == pytest.approx(r32.last_terms["loss"], rel=0.05)
    assert all(p.dtype == torch.float32 for p in m16.parameters())
    with pytest.raises(ValueError, match="precision"):
        train(m16, dataset, replace(kw, precision="fp16"), progress=False)
    with pytest.raises(ValueError, match="log_every"):
        train(m16, dataset, replace(kw, log_every=0), progress=False)


def test_compile_without_torch_compile_trains_eagerly(make_tiny, dataset, monkeypatch):
    from gdm_models.compiling import CompileFallbackWarning

    kw = TrainConfig(steps=2, batch_size=2, seq_len=3, lr=1e-3, seed=0, device="cpu")
    ref = make_tiny(seed=4)
    train(ref, dataset, kw, progress=False)
    monkeypatch.delattr(torch, "compile")
    m = make_tiny(seed=4)
    with pytest.warns(CompileFallbackWarning, match="running eager"):
        train(m, dataset, replace(kw, compile=True), progress=False)
    assert _same(_weights(ref), _weights(m))


def test_non_finite_loss_is_raised_at_the_next_logged_step(make_tiny, dataset, tmp_path):
    m = make_tiny()
    with torch.no_grad():
        m.cell.decoder.dec_n.theta.net[0].weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="between steps 1 and 2"):
        train(
            m,
            dataset,
            TrainConfig(steps=4, batch_size=2, seq_len=3, device="cpu", log_every=2),
            progress=False,
            checkpoint_dir=tmp_path / "ck",
        )
    assert not (tmp_path / "ck" / "latest").exists()  # nothing non-finite was checkpointed
