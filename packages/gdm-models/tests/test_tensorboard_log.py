"""TensorBoard event files beside the CSV log: rows written are the scalars read back."""

from __future__ import annotations

import csv
import math

import pytest
from gdm_models import TrainConfig

pytest.importorskip("tensorboard")  # the optional extra; the workspace's dev group installs it

from gdm_models import train, train_ensemble  # noqa: E402
from gdm_models.training.tensorboard_log import (  # noqa: E402
    TeeLog,
    TensorBoardLog,
    read_scalars,
    tee,
    tee_members,
)
from gdm_models.training.trainer import CsvLog  # noqa: E402

from .conftest import TINY  # noqa: E402


def _csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _assert_board_equals_csv(board, rows):
    """Every CSV column but ``step`` is a ``train/<column>`` scalar with the same values."""
    columns = [c for c in rows[0] if c != "step"]
    assert sorted(board) == sorted(f"train/{c}" for c in columns)
    for c in columns:
        steps = [s for s, _ in board[f"train/{c}"]]
        assert steps == [int(r["step"]) for r in rows], c
        for (_, v), r in zip(board[f"train/{c}"], rows, strict=True):
            assert v == pytest.approx(float(r[c]), rel=1e-6, abs=1e-30), c  # float32 events


def test_rows_are_read_back_as_scalars(tmp_path):
    log = TensorBoardLog(tmp_path / "tb")
    for step in range(1, 6):
        log.write({"step": step, "loss": 1.0 / step, "kl": 0.5 * step, "note": "x"})  # type: ignore[dict-item]
    log.write({"step": 6, "loss": math.nan, "kl": math.inf})
    log.flush()
    log.close()
    board = read_scalars(tmp_path / "tb")
    assert sorted(board) == ["train/kl", "train/loss"]  # the string column is skipped
    assert [s for s, _ in board["train/loss"]] == list(range(1, 7))
    assert [v for _, v in board["train/loss"]][:5] == pytest.approx([1.0 / s for s in range(1, 6)])
    assert [v for _, v in board["train/kl"]][:5] == pytest.approx([0.5 * s for s in range(1, 6)])
    assert math.isnan(board["train/loss"][-1][1]) and board["train/kl"][-1][1] == math.inf


def test_resume_hides_the_steps_past_the_resumed_one(tmp_path, monkeypatch):
    from tensorboard.summary.writer import event_file_writer

    # the files of one second are named by a per-process counter compared as text: 9, then 10
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(9))
    first = TensorBoardLog(tmp_path / "tb")
    for step in range(1, 6):  # an interrupted run got to step 5, its checkpoint is at step 3
        first.write({"step": step, "loss": float(step)})
    first.close()
    again = TensorBoardLog(tmp_path / "tb", resume_step=3)
    for step in range(4, 7):
        again.write({"step": step, "loss": 10.0 * step})
    again.close()
    board = read_scalars(tmp_path / "tb")
    assert board["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]


def test_tee_writes_both_and_without_a_folder_returns_the_log_itself(tmp_path):
    csv_log = CsvLog(tmp_path / "log.csv")
    assert tee(csv_log, None) is csv_log
    assert tee_members(None, None, ["seed1"]) is None
    both = tee(csv_log, tmp_path / "tb")
    assert isinstance(both, TeeLog)
    both.write({"step": 1, "loss": 2.0})
    both.close()
    assert _csv_rows(tmp_path / "log.csv") == [{"step": "1", "loss": "2.0"}]
    assert read_scalars(tmp_path / "tb") == {"train/loss": [(1, 2.0)]}
    with pytest.raises(FileNotFoundError, match="no TensorBoard event file"):
        read_scalars(tmp_path)


def test_train_writes_the_csv_rows_as_event_files(make_tiny, dataset, tmp_path):
    kw = TrainConfig(steps=4, batch_size=2, seq_len=3, seed=1, device="cpu")
    train(
        make_tiny(seed=1),
        dataset,
        kw,
        log_csv=tmp_path / "log.csv",
        tensorboard_dir=tmp_path / "tb",
        progress=False,
    )
    rows = _csv_rows(tmp_path / "log.csv")
    assert {"loss", "grad_norm"} <= set(rows[0])
    _assert_board_equals_csv(read_scalars(tmp_path / "tb"), rows)


def test_train_ensemble_writes_one_event_folder_per_member(scaler, dataset, tmp_path):
    seeds = [3, 5]
    train_ensemble(
        "gdm",
        seeds,
        dataset,
        TrainConfig(strategy="loop", steps=3, batch_size=2, seq_len=3, device="cpu"),
        scaler=scaler,
        model_config=TINY,
        progress=False,
        out_dir=tmp_path / "ens",
        tensorboard_dir=tmp_path / "tb",
    )
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["seed3", "seed5"]
    for s in seeds:
        rows = _csv_rows(tmp_path / "ens" / f"seed{s}" / "log.csv")
        _assert_board_equals_csv(read_scalars(tmp_path / "tb" / f"seed{s}"), rows)
