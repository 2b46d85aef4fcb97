"""Training the seeds of a configuration as one ensemble (``train.ensemble = K``): keys,
grouping, one record and checkpoint per seed, reruns, SIGKILL resumption, failed members, and
members equal to single runs (the member engine, the default: up to float rounding)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import preset_sizing

from graphwm.checks import parse_checked
from graphwm.jobs import train_job_for
from graphwm.pipeline import (
    RunPaths,
    preset_dict,
    stage_collect,
    stage_fit,
    stage_train,
    training_jobs,
)
from graphwm.stages.ensemble import EnsembleJob, ensemble_groups, training_units
from graphwm.store.results import ResultStore


def _preset(seeds=(0, 1), k: int = 2, steps: int = 4, every: int = 2, models=("gdm",)) -> dict:
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], ablations=[], seeds=list(seeds))
    preset = preset_dict(preset, {"models": list(models)})  # and their overrides only
    preset.pop("multi_step")
    preset.pop("downstream", None)
    preset["train"] = {**preset["train"], "steps": steps, "checkpoint_every": every}
    preset["train"]["ensemble"] = k
    return preset


def _done(run_dir: Path) -> Counter:
    lines = (run_dir / "jobs.log").read_text().splitlines()
    return Counter(json.loads(line)["kind"] for line in lines if '"done"' in line)


def _assert_close_checkpoints(a: Path, b: Path) -> None:
    from gdm_models import load_checkpoint

    wa, wb = load_checkpoint(a).state_dict(), load_checkpoint(b).state_dict()
    assert wa.keys() == wb.keys()
    for key, v in wa.items():
        np.testing.assert_allclose(v.numpy(), wb[key].numpy(), rtol=1e-4, atol=1e-5, err_msg=key)


def _weights(job, run_dir: Path) -> str:
    manifest = json.loads((job.checkpoint(run_dir) / "checkpoint.json").read_text())
    return manifest["weights_sha256"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> RunPaths:
    """Collected and fitted data of the small preset (copied into each test's run)."""
    paths = RunPaths(tmp_path_factory.mktemp("ens") / "data")
    stage_collect(_preset(), paths, progress=False)
    stage_fit(_preset(), paths)
    return paths


def _run_dir(data: RunPaths, dst: Path) -> RunPaths:
    shutil.copytree(data.data, dst / "data")
    shutil.copytree(data.root / "fit", dst / "fit")
    return RunPaths(dst)


def test_grouping_is_the_seeds_in_order_chunked_by_k():
    assert ensemble_groups([3, 1, 2, 7, 5], 2) == [(3, 1), (2, 7), (5,)]
    assert ensemble_groups([0, 1, 2], 1) == [(0,), (1,), (2,)]
    assert ensemble_groups([0, 1, 2], 10) == [(0, 1, 2)]
    with pytest.raises(ValueError, match="k >= 1"):
        ensemble_groups([0], 0)


def test_k1_keys_are_todays_keys():
    """ensemble = 1 (or absent) keys every job exactly as a single run: same payload."""
    for k in (None, 1):
        preset = _preset(seeds=(0, 1, 2), k=1)
        if k is None:
            preset["train"].pop("ensemble")
        jobs = training_jobs(preset)
        assert [j.seed for j in jobs] == [0, 1, 2]
        # train_job_for builds the single job exactly as the pipeline always has
        assert [j.key for j in jobs] == [
            train_job_for(parse_checked(preset), "SAR", "gdm", s).key for s in (0, 1, 2)
        ]
        assert all("ensemble" not in j.describe() for j in jobs)
        assert all(not isinstance(u, EnsembleJob) for u in training_units(jobs))


def test_changing_k_changes_member_keys():
    seeds = (0, 1, 2)
    keys = {k: [j.key for j in training_jobs(_preset(seeds, k))] for k in (1, 2, 3)}
    # K = 2: ensembles (0, 1) and (2,); a group of one seed is the single job
    assert keys[2][2] == keys[1][2]
    assert set(keys[2][:2]).isdisjoint(keys[1]) and set(keys[3]).isdisjoint(keys[1] + keys[2])
    jobs = training_jobs(_preset(seeds, 2))
    assert jobs[0].describe()["ensemble"] == {"seeds": [0, 1], "strategy": "auto"}
    units = training_units(jobs)
    assert isinstance(units[0], EnsembleJob) and units[0].seeds == (0, 1) and units[1] is jobs[2]
    # any one member names its whole ensemble
    (unit,) = training_units([jobs[1]])
    assert unit.key == units[0].key


def test_ensemble_records_round_trip_rerun_nothing_and_equal_single_runs(data, tmp_path):
    preset = _preset()
    ens = _run_dir(data, tmp_path / "ens")
    records = stage_train(preset, ens, progress=False)
    jobs = training_jobs(preset)
    assert [(r.seed, r.steps) for r in records] == [(0, 4), (1, 4)]
    (unit,) = training_units(jobs)
    store = ResultStore(ens.jobs)
    for job, record in zip(jobs, records, strict=True):
        # one record and one checkpoint per seed, in the member's own folder
        assert store.load(job) == record
        assert record.checkpoint == job.checkpoint(ens.root).relative_to(ens.root).as_posix()
        assert (job.dir(ens.root) / "log.csv").exists()
        assert not (job.dir(ens.root) / "ckpt" / "latest").exists()
    assert (unit.dir(ens.root) / "latest" / "ensemble.json").exists()
    assert unit.dir(ens.root).name.startswith("ensemble-")
    assert sorted(p.stem for p in ens.jobs.glob("*.json")) == sorted(j.key for j in jobs)
    assert _done(ens.root) == {"train": 2, "train_ensemble": 1}
    # a rerun finds every member's record and trains nothing
    assert stage_train(preset, ens, progress=False) == records
    assert _done(ens.root) == {"train": 2, "train_ensemble": 1}
    # the members equal the single runs (the member engine: up to float rounding)
    single = _run_dir(data, tmp_path / "single")
    single_preset = _preset(k=1)
    stage_train(single_preset, single, progress=False)
    for member, alone in zip(jobs, training_jobs(single_preset), strict=True):
        assert member.key != alone.key
        _assert_close_checkpoints(member.checkpoint(ens.root), alone.checkpoint(single.root))
        rows = [
            (j.dir(r) / "log.csv").read_text().splitlines()
            for j, r in ((member, ens.root), (alone, single.root))
        ]
        assert rows[0][0] == rows[1][0] and len(rows[0]) == len(rows[1]) == 5
        # the loss columns agree (the time columns differ)
        head = rows[0][0].split(",")
        keep = [i for i, c in enumerate(head) if "time" not in c and "sec" not in c]
        strip = [[[float(line.split(",")[i]) for i in keep] for line in r[1:]] for r in rows]
        np.testing.assert_allclose(strip[0], strip[1], rtol=1e-4, atol=1e-6)


def test_a_failed_member_is_raised_after_the_others_are_stored(data, tmp_path, monkeypatch):
    import graphwm.stages.ensemble as ensemble

    real = ensemble.train_ensemble_job

    def second_member_diverges(unit, run_dir):
        out = real(unit, run_dir)
        out[1] = FloatingPointError("non-finite loss at step 3 (seed 1)")
        return out

    monkeypatch.setattr(ensemble, "train_ensemble_job", second_member_diverges)
    preset = _preset()
    run = _run_dir(data, tmp_path / "run")
    from graphwm.store.outcomes import JobsFailed

    with pytest.raises(JobsFailed, match=r"FloatingPointError: non-finite loss .*\(seed 1\)"):
        stage_train(preset, run, progress=False)
    first, second = training_jobs(preset)
    store = ResultStore(run.jobs)
    assert store.has(first) and store.load(first).seed == 0 and not store.has(second)
    lines = [json.loads(x) for x in (run.root / "jobs.log").read_text().splitlines()]
    assert {(x["key"], x["status"]) for x in lines} >= {
        (first.key, "done"),
        (second.key, "failed"),
    }
    # the failure is recorded: a rerun reports it without training; --retry-failed trains the
    # ensemble again (resuming from its last state) and stores both
    monkeypatch.setattr(ensemble, "train_ensemble_job", real)
    with pytest.raises(JobsFailed, match="recorded by an earlier run"):
        stage_train(preset, run, progress=False)
    retry = dataclasses.replace(run, retry_failed=True)
    assert [r.seed for r in stage_train(preset, retry, progress=False)] == [0, 1]


RESUME_SCRIPT = """
import json, sys
from graphwm.pipeline import RunPaths, stage_train
preset = json.loads(open(sys.argv[1]).read())
for r in stage_train(preset, RunPaths(sys.argv[2]), progress=False):
    print(r.checkpoint)
"""


def test_sigkilled_ensemble_resumes_to_identical_weights(data, tmp_path):
    preset = _preset(steps=40, every=5)
    preset_file = tmp_path / "preset.json"
    preset_file.write_text(json.dumps(preset))
    killed = _run_dir(data, tmp_path / "killed")
    clean = _run_dir(data, tmp_path / "clean")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-c", RESUME_SCRIPT, str(preset_file)]
    proc = subprocess.Popen([*cmd, str(killed.root)], env=env, start_new_session=True)
    jobs = training_jobs(preset)
    (unit,) = training_units(jobs)
    latest = unit.dir(killed.root) / "latest" / "ensemble.json"
    deadline = time.time() + 240
    while not latest.exists():
        assert proc.poll() is None, "training finished or died before its first checkpoint"
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not any(j.checkpoint(killed.root).exists() for j in jobs), "killed too late"
    for run in (killed, clean):
        res = subprocess.run([*cmd, str(run.root)], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
    stored = [json.loads(p.read_text()) for p in killed.jobs.glob("*.json")]
    assert len(stored) == 2 and all(r["resumed_from"] > 0 for r in stored)
    assert len({r["resumed_from"] for r in stored}) == 1  # every member from the same step
    for job in jobs:
        assert _weights(job, killed.root) == _weights(job, clean.root)


@pytest.fixture(scope="module")
def interrupted(data, tmp_path_factory):
    """A finished ensemble run (Vanilla GWM, 4 steps, checkpoints at 2 and 4) and copies of
    its ``latest/`` after each save (``snapshots/step<k>``)."""
    import gdm_models.training.callbacks as callbacks

    preset = _preset(steps=4, every=2, models=("vanilla-gwm",))
    root = tmp_path_factory.mktemp("interrupted")
    snapshots = root / "snapshots"
    real = callbacks.save_ensemble_state

    def save_and_copy(out, step, *args):
        real(out, step, *args)
        shutil.copytree(out / "latest", snapshots / f"step{step}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(callbacks, "save_ensemble_state", save_and_copy)
        done = _run_dir(data, root / "done")
        stage_train(preset, done, progress=False)
    assert sorted(p.name for p in snapshots.iterdir()) == ["step2", "step4"]
    return preset, done, snapshots


def _killed_copy(interrupted, dst: Path):
    """A copy of the finished run as if killed after its last checkpoint: no member's
    ``final/`` or record, no ensemble ``latest/``; returns (run, jobs, ensemble folder)."""
    preset, done, _ = interrupted
    shutil.copytree(done.root, dst)
    run = RunPaths(dst)
    jobs = training_jobs(preset)
    for job in jobs:
        shutil.rmtree(job.checkpoint(run.root))
        (run.jobs / f"{job.key}.json").unlink()
    (unit,) = training_units(jobs)
    shutil.rmtree(unit.dir(run.root) / "latest")
    return run, jobs, unit.dir(run.root)


def _truncate_weights(latest: Path) -> None:
    weights = latest / "seed1" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:64])


def _half_written(latest: Path) -> None:  # one member's folder, no ensemble.json
    shutil.rmtree(latest / "seed1")
    (latest / "ensemble.json").unlink()


# name: (state at latest/ or None, state at .latest_old or None, damage to one of them (in the
# folder given), the step resumed from, what the run's events say)
RECOVERIES = {
    "truncated weights": ("step4", "step2", ("latest", _truncate_weights), 2, "previous good"),
    "missing member file": (
        "step4",
        None,
        ("latest", lambda d: (d / "seed0" / "trainer_state.pt").unlink()),
        0,
        "restarts from step 0",
    ),
    "bad ensemble.json": (
        "step4",
        "step2",
        ("latest", lambda d: (d / "ensemble.json").write_text('{"format": "gdm-mod')),
        2,
        "previous good",
    ),
    "killed between the renames of a save": (
        None,
        "step2",
        (".latest_tmp", _half_written),
        2,
        "previous good",
    ),
    "half-written latest": ("step4", "step2", ("latest", _half_written), 2, "previous good"),
    "corrupt .latest_old only": (
        None,
        "step2",
        (".latest_old", _truncate_weights),
        0,
        "restarts from step 0",
    ),
}


@pytest.mark.parametrize("case", list(RECOVERIES))
def test_a_damaged_ensemble_latest_recovers_as_a_single_jobs(interrupted, tmp_path, case):
    """A corrupt or half-written ensemble ``latest/`` is quarantined and the ensemble resumes
    from ``.latest_old`` or restarts (as a single job's, said in events.log), ending with the
    weights of the uninterrupted run."""
    _, done, snapshots = interrupted
    run, jobs, folder = _killed_copy(interrupted, tmp_path / "run")
    at_latest, at_old, (damaged, damage), resumed, event = RECOVERIES[case]
    if at_latest:
        shutil.copytree(snapshots / at_latest, folder / "latest")
    if at_old:
        shutil.copytree(snapshots / at_old, folder / ".latest_old")
    if damaged == ".latest_tmp":  # a save killed while writing its next state
        shutil.copytree(snapshots / "step4", folder / ".latest_tmp")
    damage(folder / damaged)
    preset = interrupted[0]
    records = stage_train(preset, run, progress=False)
    assert [r.resumed_from for r in records] == [resumed, resumed]
    events = (run.root / "events.log").read_text()
    assert event in events and str(folder) in events
    if damaged != ".latest_tmp":
        assert "quarantined" in events
        assert list((run.root / "quarantine").rglob(f"{folder.name}/{damaged}.*"))
    for job in jobs:
        assert _weights(job, run.root) == _weights(job, done.root)


@pytest.mark.parametrize("case", ["extra member", "members at other steps"])
def test_an_ensemble_latest_of_other_members_is_refused(interrupted, tmp_path, case):
    """An intact ``latest/`` that is not this ensemble's is refused naming it, not
    quarantined (nor replaced by ``.latest_old``); the refusal is the job's failure (every other
    job still runs: graphwm.store.outcomes.JobsFailed names it with its cause)."""
    from graphwm.store.outcomes import JobsFailed

    _, _, snapshots = interrupted
    run, _, folder = _killed_copy(interrupted, tmp_path / "run")
    latest = folder / "latest"
    shutil.copytree(snapshots / "step4", latest)
    shutil.copytree(snapshots / "step2", folder / ".latest_old")
    if case == "extra member":
        shutil.copytree(latest / "seed1", latest / "seed2")
        message = r"member folders \['seed2'\]"
    else:
        shutil.rmtree(latest / "seed1")
        shutil.copytree(snapshots / "step2" / "seed1", latest / "seed1")
        message = r"disagree on the step \(ensemble.json: 4, seed0: 4, seed1: 2\)"
    with pytest.raises(JobsFailed, match=rf"CheckpointError: .*{message}") as err:
        stage_train(interrupted[0], run, progress=False)
    assert f"cannot resume from {latest}" in str(err.value)
    assert (latest / "ensemble.json").is_file() and not (run.root / "quarantine").exists()


def test_cost_estimate_counts_ensembles_at_their_measured_step_ratio():
    from graphwm.cost import estimate, format_estimate

    preset = preset_dict("tiny")
    preset.update(envs=["RGC"], models=["vanilla-gwm"], ablations=[], seeds=[0, 1, 2])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    preset["train"]["ensemble"] = 2
    (line,) = estimate(preset, "cpu", steps=1, probe_sizes=(8, 12))
    assert line.groups == (2, 1) and line.train_jobs == 3 and line.train_units == 2
    assert set(line.step_ratio) == {2} and line.step_ratio[2] > 0
    steps = preset["train"]["steps"]
    assert line.train_hours == pytest.approx(
        line.sec_per_step * steps * (line.step_ratio[2] + 1) / 3600
    )
    assert f"{line.step_ratio[2]:.2f} (2)" in format_estimate([line], "cpu")


def test_medium_preset_trains_three_seeds_as_one_ensemble_within_its_sizing():
    """The medium preset parses, trains its 3 seeds as one ensemble per (env, model), and the
    sizing lines of its comment agree with what it sets and with the 45-minute CPU budget."""
    import re

    from graphwm.config import Preset

    medium = Preset.parse(preset_dict("medium"))
    assert medium.envs == ("OD", "SAR") and len(medium.seeds) == 3
    assert medium.train.ensemble == 3 and medium.evaluate.num_samples == 30
    assert medium.collect.test_sizes == (20, 50)
    jobs = training_jobs(preset_dict("medium", {"device": "cpu"}))  # no GPU needed here
    units = training_units(jobs)
    assert len(jobs) == 24 and len(units) == 8
    assert all(isinstance(u, EnsembleJob) and u.seeds == medium.seeds for u in units)
    text, sizing, per_unit, sec_per_step = preset_sizing("medium")
    # one measured ensemble step per training unit, in the order the pool takes them
    assert list(per_unit) == [(u.env, u.model) for u in units]
    assert sizing["steps"] == medium.train.steps
    # 2 one-thread workers (the 2-core CPU), each taking the next unit when free
    assert f"after {sec_per_step:.1f} s per step" in text
    train_min = medium.train.steps * sec_per_step / 60
    assert train_min <= sizing["training"]
    # the GDD curve (train.eval_every) fits in the same budget, with at least 4 points
    assert sizing["training"] + sizing["overhead"] + sizing["curve"] <= 45
    assert len(training_jobs(preset_dict("medium", {"device": "cpu"}))[0].kept_steps()) >= 4
    assert f"{medium.train.steps} x {sec_per_step:.1f} s = {round(train_min)} min" in text
    # the end-to-end run, timed, stays within the CPU budget, and the docs quote it
    (measured,) = re.findall(r"^#\s+measured end-to-end minutes = (\d+)", text, re.M)
    assert int(measured) <= 45
    reproducing = (Path(__file__).parents[1] / "docs" / "reproducing.md").read_text()
    assert f"{measured} minutes end to end" in reproducing
