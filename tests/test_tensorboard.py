"""``train.tensorboard = true`` (or ``--tensorboard``): every training job, single or in an
ensemble, writes TensorBoard event files beside its log.csv, with the same values."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")  # the optional extra; the workspace's dev group installs it

from gdm_models.training.tensorboard_log import read_scalars  # noqa: E402

from graphwm.pipeline import preset_dict, stage_train, training_jobs  # noqa: E402
from graphwm.stages.ensemble import EnsembleJob, training_units  # noqa: E402
from graphwm.stages.train import TENSORBOARD_DIRNAME  # noqa: E402
from graphwm.store.paths import RunPaths  # noqa: E402


def _preset(**train) -> dict:
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["vanilla-gwm", "gdm"], ablations=[])
    for section in ("multi_step", "downstream"):
        preset.pop(section, None)
    preset["train"] = {**preset["train"], "steps": 3, "tensorboard": True, **train}
    return preset


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _assert_same(board: dict, rows: list[dict[str, str]]) -> None:
    assert {"train/loss", "train/grad_norm"} <= set(board)
    assert sorted(board) == sorted(f"train/{c}" for c in rows[0] if c != "step")
    for tag, points in board.items():
        column = tag.removeprefix("train/")
        assert [s for s, _ in points] == [int(r["step"]) for r in rows], tag
        assert [v for _, v in points] == pytest.approx([float(r[column]) for r in rows], rel=1e-6)


def test_every_single_job_writes_its_loss_curves(tmp_path, one_torch_thread):
    preset = _preset()
    plain = _preset(tensorboard=False)
    jobs = training_jobs(preset)
    # the event files change no weights: the jobs (and what they store) are the same
    assert [j.key for j in jobs] == [j.key for j in training_jobs(plain)]
    stage_train(preset, RunPaths(tmp_path), progress=False)
    assert sorted(j.model for j in jobs) == ["gdm", "vanilla-gwm"]
    for job in jobs:
        folder = job.dir(tmp_path)
        _assert_same(read_scalars(folder / TENSORBOARD_DIRNAME), _rows(folder / "log.csv"))
    # without the setting no event file is written
    stage_train(plain, RunPaths(tmp_path / "plain"), progress=False)
    assert not list((tmp_path / "plain").rglob("events.out.tfevents.*"))
    # --tensorboard on that finished run (issue 38): no job trains again, and each job's
    # curves are written from its stored log.csv (before, nothing was written or said)
    logs = {job.key: (job.dir(tmp_path / "plain") / "log.csv").read_bytes() for job in jobs}
    stage_train(preset, RunPaths(tmp_path / "plain"), progress=False)
    for job in jobs:
        folder = job.dir(tmp_path / "plain")
        assert (folder / "log.csv").read_bytes() == logs[job.key]
        _assert_same(read_scalars(folder / TENSORBOARD_DIRNAME), _rows(folder / "log.csv"))


def test_a_tensorboard_folder_that_is_a_file_is_refused_before_any_work(tmp_path):
    """Issue 38: it failed after collect and fit; now before collect, naming the file."""
    preset = _preset()
    job = training_jobs(preset)[0]
    blocker = job.dir(tmp_path) / TENSORBOARD_DIRNAME
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=rf"{blocker.name} is a file, not a folder"):
        stage_train(preset, RunPaths(tmp_path), progress=False)
    assert not (tmp_path / "data").exists()


def test_ensemble_members_write_one_run_each(tmp_path, one_torch_thread):
    preset = _preset(ensemble=2)
    preset.update(models=["vanilla-gwm"], seeds=[0, 1])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    (unit,) = training_units(training_jobs(preset))
    assert isinstance(unit, EnsembleJob)
    stage_train(preset, RunPaths(tmp_path), progress=False)
    boards = unit.dir(tmp_path) / TENSORBOARD_DIRNAME
    assert sorted(p.name for p in boards.iterdir()) == ["seed0", "seed1"]
    for member in unit.members:
        rows = _rows(member.dir(tmp_path) / "log.csv")
        _assert_same(read_scalars(boards / f"seed{member.seed}"), rows)


def test_the_cli_flag_sets_the_preset_field():
    from graphwm.cli import _build_parser, _preset

    parser = _build_parser()
    on = _preset(parser.parse_args(["train", "--preset", "tiny", "--tensorboard"]))
    off = _preset(parser.parse_args(["train", "--preset", "tiny"]))
    assert on.train.tensorboard is True and off.train.tensorboard is False


def test_downstream_agents_write_their_training_scalars(tmp_path, one_torch_thread):
    from graphwm.downstream.record import STORE_DIR
    from graphwm.pipeline import stage_downstream

    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["vanilla-gwm"], ablations=[])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    preset.pop("multi_step", None)
    preset["train"] = {**preset["train"], "steps": 2, "tensorboard": True}
    # three rollouts of 4 envs x 8 steps: SB3 logs the losses of one at the start of the next
    preset["downstream"] = {**preset["downstream"], "budget": 96, "ppo": {"n_steps": 8}}
    records = stage_downstream(preset, RunPaths(tmp_path), progress=False)
    trained = [r for r in records if r.budget > 0]  # the dream and the real-env agent
    assert {r.agent for r in trained} == {"dream:vanilla-gwm", "real"}
    folders = sorted((tmp_path / STORE_DIR / "tensorboard").iterdir())
    assert len(folders) == len(trained)
    for folder in folders:
        board = read_scalars(folder)
        assert {"time/fps", "train/loss", "train/entropy_loss"} <= set(board), sorted(board)
