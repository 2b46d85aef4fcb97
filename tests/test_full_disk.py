"""Issue 47, section 4: ``--out`` on a full disk during training and evaluation. A clear error
(the file that could not be written, the disk's error, the command that resumes), nothing
half-written (every visible store file reads whole, no temporary file is left), and once space
is freed the same command resumes and finishes.

The default run injects ``ENOSPC`` into the store's one atomic writer
(:func:`graphwm.store.files.atomic_write`: a part of the file written, then the error, as a
full disk does) and checks how a job's own write failing on a full disk is classified; the
slow test runs ``graphwm train`` and ``graphwm evaluate`` on a real, small tmpfs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_eval_noise import noise_preset
from test_interrupt_resume import (
    _assert_equals_uninterrupted,
    _env,
    _graphwm,
    assert_records_intact,
    digests,
    reference,  # noqa: F401 (the fixture: the uninterrupted runs)
)

from graphwm.cli import main
from graphwm.pipeline import RunPaths, stage_evaluate, stage_train, training_jobs
from graphwm.stages.train import verify_trained
from graphwm.store import files
from graphwm.store.files import read_json
from graphwm.store.outcomes import Failure, failure_path
from graphwm.store.records import TrainRecord
from graphwm.store.results import ResultStore


class FullDisk:
    """While ``when`` selects a path, writing it through the store fails as on a full disk."""

    def __init__(self) -> None:
        self.when: Callable[[Path], bool] | None = None
        self.failed: list[Path] = []
        self.lost: list[bytes] = []  # what each failed write was to hold


@pytest.fixture
def full_disk(monkeypatch) -> FullDisk:
    """The store's atomic writer with a disk that fills up: a write of a selected path writes
    half its bytes to the temporary file, then raises ``ENOSPC`` (what ``write()`` raises: no
    file name). Everything else of the writer is the real one."""
    disk = FullDisk()
    real = files.atomic_write

    def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
        if disk.when is None or not disk.when(Path(path)):
            return real(path, write)

        def partial(tmp: Path) -> None:
            write(tmp)
            data = tmp.read_bytes()
            tmp.write_bytes(data[: len(data) // 2])
            disk.failed.append(Path(path))
            disk.lost.append(data)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return real(path, partial)

    monkeypatch.setattr(files, "atomic_write", atomic_write)
    return disk


def temporary_files(run: Path) -> list[Path]:
    """The writers' temporary files and folders left in ``run`` (``.name.XXXX.tmp``,
    ``.tmp_*``, ``.latest_tmp``)."""
    return [p for p in run.rglob(".*") if "tmp" in p.name]


def assert_nothing_half_written(run: Path) -> None:
    assert temporary_files(run) == []
    assert_records_intact(run)  # every visible JSON file reads whole, records with digests
    for log in ("jobs.log", "events.log"):
        if (run / log).exists():
            assert (run / log).read_bytes().endswith(b"\n")


# ---------------------------------------------------------------------------------------------
# ENOSPC injected into the store's writes
# ---------------------------------------------------------------------------------------------
def test_a_full_disk_during_training_is_a_clear_error_and_the_run_resumes(
    tmp_path, full_disk, capsys, one_torch_thread
):
    """``graphwm train`` whose disk fills when the first training record is stored: exit 1,
    one line naming the record's file and the disk's error and the command that resumes; no
    record, no temporary file. After space is freed the same command resumes that job from
    its last checkpoint (nothing trained again) and stores every record."""
    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--out", str(run), "--envs", "SAR", "--models", "gdm"]
    args.append("--quiet")
    # the first training record to be stored (the disk is full from then on: one write fails)
    full_disk.when = lambda p: (
        p.parent.name == "jobs" and p.suffix == ".json" and not full_disk.failed
    )
    assert main(args) == 1
    err = capsys.readouterr().err
    (record,) = full_disk.failed
    assert f"No space left on device: '{record}'" in err, err
    assert f"to resume, rerun: graphwm {' '.join(args)}" in err, err
    assert not record.exists()
    assert_nothing_half_written(run)
    job = next(j for j in training_jobs(_tiny(run)) if j.key == record.stem)
    log = job.dir(run) / "log.csv"
    trained = log.read_bytes()

    full_disk.when = None  # space freed
    assert main(args) == 0
    store = ResultStore(RunPaths(run).jobs)
    resumed = store.load(job)
    assert resumed.resumed_from == resumed.steps  # its final checkpoint: nothing trained again
    # the record is the one the full disk lost (its last loss terms too), bar resumed_from
    lost = json.loads(full_disk.lost[0])
    assert resumed.to_dict() == {**TrainRecord.from_dict(lost).to_dict(), "resumed_from": 4}
    verify_trained(run, resumed, job)
    assert log.read_bytes() == trained
    assert all(store.has(j) for j in training_jobs(_tiny(run)))
    assert_nothing_half_written(run)


def _tiny(run: Path) -> dict:
    from graphwm.pipeline import preset_dict

    return preset_dict("tiny", {"envs": ["SAR"], "models": ["gdm"]})


def test_a_full_disk_during_evaluation_keeps_what_is_stored_and_the_run_resumes(
    tmp_path, full_disk, one_torch_thread
):
    """Evaluation whose disk fills when the single-step record is stored: an ``OSError``
    naming that file (the self-GDD record stored before it stays as it was); no temporary
    file. After space is freed the rerun stores the missing record and changes nothing
    stored."""
    preset = noise_preset()
    paths = RunPaths(tmp_path / "run")
    stage_train(preset, paths, progress=False)
    full_disk.when = lambda p: p.parent.name == "results" and p.name.startswith("single_step-")
    with pytest.raises(OSError, match=r"No space left on device: '.*single_step-.*\.json'") as e:
        stage_evaluate(preset, paths, progress=False)
    assert e.value.errno == errno.ENOSPC and Path(e.value.filename) == full_disk.failed[0]
    assert not full_disk.failed[0].exists()
    assert [p.name.split("-")[0] for p in paths.results.glob("*.json")] == ["self_gdd"]
    assert_nothing_half_written(paths.root)
    before = digests(paths.root)

    full_disk.when = None
    records = stage_evaluate(preset, paths, progress=False)
    assert sorted(r.kind for r in records) == ["self_gdd", "single_step"]
    after = digests(paths.root)
    for rel, digest in before.items():
        if rel.startswith(("results/", "jobs/", "train/", "data/", "fit/")):
            assert after[rel] == digest, f"{rel} changed"
    assert full_disk.failed[0].exists()
    assert_nothing_half_written(paths.root)


def test_a_failed_write_names_its_file_and_leaves_the_old_content(tmp_path, full_disk):
    """The atomic writer on a full disk: the error names the file (``write()``'s names none),
    the previous content stays, the temporary file is removed."""
    path = tmp_path / "results" / "a.json"
    files.atomic_write_json(path, {"old": 1})
    full_disk.when = lambda p: True
    with pytest.raises(OSError) as e:
        files.atomic_write_json(path, {"new": 2})
    assert str(e.value) == f"[Errno {errno.ENOSPC}] No space left on device: '{path}'"
    assert read_json(path) == {"old": 1}
    assert temporary_files(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# A job's own write failing on a full disk: the machine's failure, not the job's
# ---------------------------------------------------------------------------------------------
def _torch_save_on_a_full_disk() -> RuntimeError:
    """The error ``torch.save`` raises on a full disk (``/dev/full`` fails every write with
    ``ENOSPC``): a ``RuntimeError`` that names neither the disk nor the file."""
    import torch

    try:
        torch.save({"w": torch.zeros(1000)}, "/dev/full")
    except RuntimeError as err:
        return err
    pytest.fail("torch.save on /dev/full did not fail")


def test_a_checkpoint_write_on_a_full_disk_is_not_recorded_as_the_job_s_failure(tmp_path):
    """A training job's checkpoint is written by torch and safetensors, whose full-disk errors
    are no ``OSError``. Such a failure is the machine's: it is not recorded as the job's own
    (which a rerun would report again without running it), so once space is freed a plain
    rerun runs the job. A job's own ``RuntimeError`` still is recorded."""
    from graphwm.store.executors import run_jobs
    from graphwm.store.outcomes import JobsFailed

    if not Path("/dev/full").is_char_device():
        pytest.skip("no /dev/full here")
    saved = _torch_save_on_a_full_disk()
    assert not Failure.of(saved).deterministic
    safetensors_error = type("SafetensorError", (Exception,), {})(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )  # its message on a full disk (safetensors' own type: see the slow tmpfs test)
    assert not Failure.of(safetensors_error).deterministic
    assert Failure.of(RuntimeError("the job's own bug")).deterministic

    class Job:
        kind, key = "train", "train-00000000000000aa"

        def describe(self) -> dict:
            return {}

    store, disk_full = ResultStore(tmp_path / "jobs"), [True]

    def job_fn(job, run_dir):
        from graphwm.store.records import SelfGddRecord

        if disk_full[0]:
            raise _torch_save_on_a_full_disk()
        components = {"node": 0.1, "graph": 0.2, "edge": 0.3, "joint": 0.01}
        return SelfGddRecord(
            kind="self_gdd", env="SAR", seed=0, size=7, gdd=0.5, components=components
        )

    with pytest.raises(JobsFailed) as e:
        run_jobs(job_fn, [Job()], store, tmp_path, max_workers=1, progress=False)
    ((_, _, failure),) = e.value.failures
    assert not failure.deterministic and "unexpected pos" in failure.cause
    assert not failure_path(store, Job()).exists()
    disk_full[0] = False  # space freed: the rerun runs the job
    (record,) = run_jobs(job_fn, [Job()], store, tmp_path, max_workers=1, progress=False)
    assert record.gdd == 0.5


# ---------------------------------------------------------------------------------------------
# A real full disk: a small tmpfs
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (root only; skipped where it cannot be)."""
    where.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A filler file that leaves ``leave`` bytes free on ``disk``."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.slow  # four graphwm processes and the uninterrupted reference (minutes under load)
def test_train_and_evaluate_on_a_real_full_disk_resume_once_space_is_freed(reference, tmp_path):  # noqa: F811
    """``graphwm train`` and then ``graphwm evaluate`` with ``--out`` on a small tmpfs that
    fills up midway: each exits 1 with the disk's error and the command that resumes, nothing
    visible is half-written; once the filler is removed the same command finishes, and the run
    equals the uninterrupted one (weights, kept checkpoints, log, records)."""
    preset_path, runs, _ = reference
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        run = disk / "run"
        for command, leave in (("train", 192 * 1024), ("evaluate", 8 * 1024)):
            filler = fill(disk, leave)  # train: data and fit fit, the checkpoints do not
            args = _graphwm(command, preset_path, run)
            res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=1800)
            assert res.returncode == 1, res.stderr[-3000:]
            assert "No space left on device" in res.stderr, res.stderr[-3000:]
            assert "Traceback" not in res.stderr
            assert f"graphwm {command} --preset" in res.stderr  # how to resume
            assert_records_intact(run)
            assert not list(run.rglob("*.failure")), "a full disk was recorded as the job's"

            filler.unlink()  # space freed
            res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=1800)
            assert res.returncode == 0, res.stderr[-3000:]
            assert_records_intact(run)
            _assert_equals_uninterrupted(run, runs[command], command)
