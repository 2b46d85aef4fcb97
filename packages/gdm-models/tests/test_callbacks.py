"""Callbacks of train and train_ensemble (``callbacks=[...]``, SB3's ``learn(callback=...)``):
the hooks' order and counts, early stop, a raising callback, refused callbacks."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
import torch
from gdm_models import TrainConfig, load_checkpoint, train, train_ensemble
from gdm_models.training import Callback, CallbackError, RunInfo, verify_trainer_state

from .conftest import TINY

SEEDS = [3, 5]
CFG = TrainConfig(steps=5, batch_size=2, seq_len=3, device="cpu", log_every=2,
                  checkpoint_every=2, keep_every=4)  # fmt: skip


def _run(kind, make_tiny, scaler, dataset, out, cfg=CFG, **kw):
    """One run of ``kind`` into ``out``: (result, member states' ``latest/``, final dirs, logs)."""
    if kind == "train":
        m = make_tiny(seed=1)
        res = train(m, dataset, cfg, log_csv=out / "log.csv", checkpoint_dir=out, progress=False,
                    **kw)  # fmt: skip
        return res, [m], [out / "latest"], [out / "final"], [out / "log.csv"]
    res = train_ensemble("gdm", SEEDS, dataset, cfg, scaler=scaler, model_config=TINY,
                         out_dir=out, progress=False, **kw)  # fmt: skip
    latest = [out / "latest" / f"seed{s}" for s in SEEDS]
    return (
        res,
        res.models,
        latest,
        [out / f"seed{s}" / "final" for s in SEEDS],
        [out / f"seed{s}" / "log.csv" for s in SEEDS],
    )


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _state_step(latest):
    return json.loads((latest / "trainer_state.json").read_text())["step"]


class Recorder(Callback):
    """Every hook call, in order; checks at each that the state it is told of is on disk."""

    def __init__(self, latest, stop_at=None):
        self.calls, self.latest, self.stop_at, self.losses = [], latest, stop_at, {}

    def on_train_start(self, run: RunInfo) -> None:
        self.calls.append(("start", run.start, run.total, tuple(run.seeds)))

    def on_step_end(self, step, losses):
        self.calls.append(("step", step))
        self.losses[step] = {k: v.clone() for k, v in losses.items()}
        return False if step == self.stop_at else None

    def on_row(self, k, row):
        self.calls.append(("row", k, int(row["step"])))

    def on_keep(self, step, alive):
        self.calls.append(("keep", step, tuple(alive)))

    def on_checkpoint(self, step, alive):
        # a caller's callback runs after the trainer wrote the state
        assert all(_state_step(p) == step for p in self.latest)
        self.calls.append(("checkpoint", step, tuple(alive)))

    def on_train_end(self, step, alive):
        self.calls.append(("end", step, tuple(alive)))

    def close(self):
        self.calls.append(("close",))


def _expected(members, seeds, last, logged, kept):
    out = [("start", 0, CFG.steps, tuple(seeds))]
    alive = tuple(range(members))
    for s in range(1, last + 1):
        out.append(("step", s))
        if s in logged:
            out += [("row", k, s) for k in alive]
            out += [("keep", s, alive)] if s in kept else []
            out.append(("checkpoint", s, alive))
    return [*out, ("end", last, alive), ("close",)]


@pytest.mark.parametrize("kind", ["train", "ensemble"])
def test_hooks_are_called_in_order_with_the_run(kind, make_tiny, scaler, dataset, tmp_path):
    seeds = [CFG.seed] if kind == "train" else SEEDS
    rec = Recorder([tmp_path / "latest" / (f"seed{s}" if kind != "train" else "") for s in seeds])
    _, _, _, _, logs = _run(kind, make_tiny, scaler, dataset, tmp_path, callbacks=rec)  # one alone
    assert rec.calls == _expected(len(seeds), seeds, 5, logged={2, 4, 5}, kept={4})
    # on_step_end's losses are the logged numbers (member k at entry k)
    for k, log in enumerate(logs):
        for row in _rows(log):
            got = rec.losses[int(row["step"])]
            for key in ("loss", "grad_norm", "kl_adj"):
                assert float(got[key][k]) == pytest.approx(float(row[key]), rel=1e-6)


@pytest.mark.parametrize("kind", ["train", "ensemble"])
def test_early_stop_leaves_a_consistent_state(kind, make_tiny, scaler, dataset, tmp_path):
    """Stopped after step 3 of 5: step 3 is logged and checkpointed as a last step (latest/,
    final/ = the returned models = a 3-step run), and resuming continues as an uninterrupted
    run."""
    rec, other = Recorder([], stop_at=3), Recorder([])  # other: returns None, goes on
    res, models, latest, finals, logs = _run(kind, make_tiny, scaler, dataset, tmp_path / "stop",
                                             callbacks=[rec, other])  # fmt: skip
    assert res.steps == 3 and rec.calls[-2:] == [("end", 3, tuple(range(len(models)))), ("close",)]
    assert other.calls == rec.calls  # every callback saw the stopping step and the end
    assert [c[1] for c in rec.calls if c[0] == "step"] == [1, 2, 3]
    _, three, *_ = _run(kind, make_tiny, scaler, dataset, tmp_path / "three", replace(CFG, steps=3))
    for m, ref, lt, fin, log in zip(models, three, latest, finals, logs, strict=True):
        assert verify_trainer_state(lt)["step"] == 3
        assert [r["step"] for r in _rows(log)] == ["2", "3"]
        final = load_checkpoint(fin)
        for key, v in m.state_dict().items():
            assert torch.equal(v, final.state_dict()[key]), key
            assert torch.equal(v, ref.state_dict()[key]), key
    resumed, r_models, *_ = _run(kind, make_tiny, scaler, dataset, tmp_path / "stop")
    full, f_models, *_ = _run(kind, make_tiny, scaler, dataset, tmp_path / "full")
    assert resumed.resumed_from == 3 and resumed.steps == full.steps == 5
    for a, b in zip(r_models, f_models, strict=True):
        for key, v in a.state_dict().items():
            assert torch.equal(v, b.state_dict()[key]), key


class Boom(Callback):
    def on_step_end(self, step, losses):
        if step == 3:
            raise ValueError("no more")


@pytest.mark.parametrize("kind", ["train", "ensemble"])
def test_a_raising_callback_is_named_and_the_last_checkpoint_stays(
    kind, make_tiny, scaler, dataset, tmp_path
):
    with pytest.raises(CallbackError, match=r"Boom.on_step_end raised at step 3: ValueError: no"):
        _run(kind, make_tiny, scaler, dataset, tmp_path, callbacks=[Boom()])
    latest = tmp_path / "latest"
    states = [latest] if kind == "train" else [latest / f"seed{s}" for s in SEEDS]
    assert all(verify_trainer_state(p)["step"] == 2 for p in states)
    assert not any(tmp_path.rglob("final"))


@pytest.mark.parametrize("kind", ["train", "ensemble"])
@pytest.mark.parametrize(
    ("callbacks", "message"),
    [
        ([object()], r"callbacks\[0\] must be a gdm_models.training.Callback"),
        ([Callback(), print], r"callbacks\[1\] must be .* got builtin_function_or_method"),
        (5, "callbacks must be a Callback or a list of them, got 5"),
    ],
)
def test_callbacks_that_are_not_callbacks_are_refused_before_any_work(
    kind, callbacks, message, make_tiny, scaler, dataset, tmp_path
):
    with pytest.raises(TypeError, match=message):
        _run(kind, make_tiny, scaler, dataset, tmp_path / "out", callbacks=callbacks)
    assert not (tmp_path / "out").exists()
