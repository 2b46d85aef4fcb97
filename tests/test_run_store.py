"""The run store (issue 12): reruns with a changed preset equal a fresh run and recompute only
what changed; moved run directories; concurrent runs; corruption detection and recovery."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from graphwm.pipeline import preset_dict, reproduce, stage_train
from graphwm.report.build import load_results
from graphwm.store.files import CorruptFileError
from graphwm.store.paths import RunPaths
from graphwm.store.results import JOBS_LOG_KEYS, append_jobs_log, read_jobs_log


def small_preset() -> dict:
    """The tiny preset cut to one env and one fast model (seconds per run)."""
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["vanilla-gwm"], ablations=[])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    preset.pop("multi_step")
    preset.pop("downstream", None)  # the downstream stage has its own tests
    preset["evaluate"] = {"num_samples": 4, "reference_transitions": 2, "max_episodes": 1}
    return preset


def results_of(run_dir: Path) -> list[dict]:
    """The report's view of a run's results, in a stable order (NaN-safe comparison)."""
    rows = load_results(run_dir)
    return sorted(
        (json.dumps(r, sort_keys=True) for r in rows),
    )


def done_jobs(run_dir: Path) -> Counter:
    """How many jobs of each kind have finished in this run directory so far."""
    lines = (run_dir / "jobs.log").read_text().splitlines()
    return Counter(json.loads(line)["kind"] for line in lines if '"done"' in line)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> tuple[dict, Path]:
    preset = small_preset()
    root = tmp_path_factory.mktemp("base") / "run"
    reproduce(preset, root, progress=False)
    return preset, root


def _copy(base: Path, tmp_path: Path, name: str = "run") -> Path:
    dst = tmp_path / name
    shutil.copytree(base, dst)
    return dst


# (preset key, new value, jobs that must be recomputed) -- the table of issue 12 and more
# (the slow-marked ones repeat a kind of change the default run already makes: another
# train.steps value, another key of the training job)
_SAME_KIND = pytest.mark.slow
CHANGES = [
    ("train.steps", 6, {"train": 1, "single_step": 1}),
    pytest.param("train.steps", 2, {"train": 1, "single_step": 1}, marks=_SAME_KIND),
    pytest.param(
        "train.train_overrides", {"lr": 3e-3}, {"train": 1, "single_step": 1}, marks=_SAME_KIND
    ),
    (
        "collect.train_episodes",
        3,
        {"collect": 2, "fit": 1, "train": 1, "self_gdd": 1, "single_step": 1},
    ),
    ("collect.test_episodes", 2, {"collect": 1, "self_gdd": 1, "single_step": 1}),
    ("fit.transitions_per_episode", 3, {"fit": 1, "self_gdd": 1, "single_step": 1}),
    ("train.model_overrides.vanilla-gwm", {"hidden_dim": 6}, {"train": 1, "single_step": 1}),
]


def _change_id(change) -> str:
    return str((change.values if hasattr(change, "values") else change)[0])


@pytest.mark.parametrize(
    ("key", "value", "recomputed"), CHANGES, ids=[_change_id(c) for c in CHANGES]
)
def test_changed_preset_rerun_equals_fresh_run(
    base_run, tmp_path, preset_with, key, value, recomputed
):
    preset, base = base_run
    changed = preset_with(preset, key, value)
    if key == "collect.test_episodes":  # evaluate the new episode too
        changed = preset_with(changed, "evaluate.max_episodes", 2)
    reused = _copy(base, tmp_path)
    before = done_jobs(reused)
    reproduce(changed, reused, progress=False)
    assert done_jobs(reused) - before == Counter(recomputed)
    fresh = tmp_path / "fresh"
    reproduce(changed, fresh, progress=False)
    assert results_of(reused) == results_of(fresh)
    assert results_of(reused) != results_of(base)
    # and going back to the old preset recomputes nothing
    before = done_jobs(reused)
    reproduce(preset, reused, progress=False)
    assert done_jobs(reused) == before
    assert results_of(reused) == results_of(base)


def test_moved_run_directory_reruns_nothing(base_run, tmp_path):
    preset, base = base_run
    moved = _copy(base, tmp_path, "elsewhere")
    before = done_jobs(moved)
    report = reproduce(preset, moved, progress=False)
    assert done_jobs(moved) == before
    assert (report / "report.md").exists()
    assert results_of(moved) == results_of(base)
    jobs = [json.loads(p.read_text()) for p in (moved / "jobs").glob("*.json")]
    assert jobs and all(not Path(j["checkpoint"]).is_absolute() for j in jobs)


def test_two_concurrent_reproduce_into_one_directory(base_run, tmp_path):
    preset, base = base_run
    preset_file = tmp_path / "preset.json"
    preset_file.write_text(json.dumps(preset))
    script = (
        "import json, sys\n"
        "from graphwm.pipeline import reproduce\n"
        "reproduce(json.load(open(sys.argv[1])), sys.argv[2], progress=False)\n"
    )
    out = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(preset_file), str(out)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert not any("Traceback" in e for e in errors), errors
    assert results_of(out) == results_of(base)
    # each job ran once: the second process waited for the lock and found everything done
    assert done_jobs(out) == done_jobs(base)


WRITER = """
import sys
from pathlib import Path
from graphwm.store.files import atomic_write_json
writer = int(sys.argv[2])
for _ in range(15):
    atomic_write_json(Path(sys.argv[1]), {"writer": writer, "data": [writer] * 20000})
"""


def test_concurrent_writers_of_one_file_never_install_a_corrupt_one(tmp_path):
    path = tmp_path / "shared.json"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w)]) for w in range(3)]
    reads = 0
    while any(p.poll() is None for p in procs):
        if path.exists():
            data = json.loads(path.read_text())  # never a partial or mixed file
            assert data["data"] == [data["writer"]] * 20000
            reads += 1
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert json.loads(path.read_text())["writer"] in {0, 1, 2}
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]  # no temp file left


# ---------------------------------------------------------------------------------------------
# Corruption: detected with the file named; --redo-corrupt recovers
# ---------------------------------------------------------------------------------------------
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _one(run: Path, pattern: str) -> Path:
    (path,) = sorted(run.glob(pattern))
    return path


CORRUPTIONS = {
    "data npz truncated": (lambda r: _one(r, "data/SAR/test_n7-*.npz"), _truncate),
    "data npz bit flip": (lambda r: _one(r, "data/SAR/train_n6-*.npz"), _flip_byte),
    "data record": (lambda r: _one(r, "data/SAR/train_n7-*.json"), _truncate),
    "fit bandwidths": (
        lambda r: _one(r, "fit/SAR/*/bandwidths.json"),
        lambda p: _edit_json(p, lambda d: d["sigma"].update({k: 9.0 for k in d["sigma"]})),
    ),
    "training record": (lambda r: _one(r, "jobs/*.json"), _truncate),
    "final weights": (
        lambda r: _one(r, "train/SAR/*/*/ckpt/final/weights.safetensors"),
        _flip_byte,
    ),
    "final scaler": (
        lambda r: _one(r, "train/SAR/*/*/ckpt/final/checkpoint.json"),
        lambda p: _edit_json(p, lambda d: d["scaler"].update(reward_std=7.0)),
    ),
    "result json": (lambda r: _one(r, "results/single_step-*.json"), _truncate),
    "result record": (
        lambda r: _one(r, "results/self_gdd-*.json"),
        lambda p: _edit_json(p, lambda d: d.update(gdd="high")),
    ),
    # faults that used to pass unnoticed or stop every run with a bare error
    "result number edited by hand": (
        lambda r: _one(r, "results/single_step-*.json"),
        lambda p: _edit_json(p, lambda d: d.update(gdd=d["gdd"] + 1.0)),
    ),
    "training log truncated": (
        lambda r: _one(r, "train/SAR/*/*/log.csv"),
        lambda p: p.write_text(p.read_text().splitlines()[0] + "\n2,0.5\n"),
    ),
    "data record names /etc/passwd": (
        lambda r: _one(r, "data/SAR/train_n7-*.json"),
        lambda p: _edit_json(p, lambda d: d.update(file="/etc/passwd")),
    ),
    "result json nested too deeply": (
        lambda r: _one(r, "results/single_step-*.json"),
        lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    ),
}


@pytest.mark.parametrize("what", list(CORRUPTIONS))
def test_corruption_is_named_and_redo_corrupt_recovers(base_run, tmp_path, what):
    preset, base = base_run
    run = _copy(base, tmp_path)
    locate, corrupt = CORRUPTIONS[what]
    target = locate(run)
    corrupt(target)
    with pytest.raises(CorruptFileError) as err:
        reproduce(preset, run, progress=False)
    assert err.value.path.name in (target.name, target.parent.name), err.value
    assert "--redo-corrupt" in str(err.value)
    reproduce(preset, run, progress=False, redo_corrupt=True)
    assert results_of(run) == results_of(base)
    assert list((run / "quarantine").rglob("*"))
    assert "quarantined" in (run / "events.log").read_text()


def test_symlinked_jobs_log_is_never_appended_to(base_run, tmp_path):
    """A symlink as a run's log would make every job append wherever it points."""
    preset, base = base_run
    run = _copy(base, tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    (run / "jobs.log").unlink()
    (run / "jobs.log").symlink_to(outside)
    with pytest.raises(CorruptFileError, match=r"jobs\.log: is a symbolic link"):
        reproduce(preset, run, progress=False)
    reproduce(preset, run, progress=False, redo_corrupt=True)
    assert outside.read_text() == "untouched\n"
    assert not (run / "jobs.log").is_symlink() and list((run / "quarantine").glob("jobs.log*"))


def test_training_record_pointing_at_another_checkpoint_is_refused(base_run, tmp_path):
    """The check must run on the checkpoint evaluation loads (the job's own), not a copy."""
    from graphwm.pipeline import training_jobs
    from graphwm.stages.train import verify_trained
    from graphwm.store.records import TrainRecord

    preset, base = base_run
    run = _copy(base, tmp_path)
    (job,) = training_jobs(preset)
    (path,) = (run / "jobs").glob("*.json")
    record = TrainRecord.from_dict(json.loads(path.read_text()), path)
    verify_trained(run, record, job)  # the intact record passes
    copy_dir = run / "train" / "copy" / "ckpt" / "final"
    shutil.copytree(run / record.checkpoint, copy_dir)
    moved = TrainRecord(**{**record.__dict__, "checkpoint": "train/copy/ckpt/final"})
    with pytest.raises(CorruptFileError, match="not its job's"):
        verify_trained(run, moved, job)
    with pytest.raises(Exception, match="relative to the run dir"):
        TrainRecord.from_dict({**record.to_dict(), "checkpoint": "../../elsewhere"}, path)


def test_pickled_trainer_state_falls_back_instead_of_failing_every_run(base_run, tmp_path):
    """A (re-sealed) pickle as trainer_state.pt: the trainer loads with weights_only=True and
    would fail on every resume; the latest checkpoint is quarantined and training restarts."""
    import pickle

    from gdm_models.training.checkpoint import seal_checkpoint

    preset, base = base_run
    run = _copy(base, tmp_path)
    (record,) = list((run / "jobs").glob("*.json"))
    final = run / json.loads(record.read_text())["checkpoint"]
    ckpt = final.parent
    shutil.rmtree(final)
    record.unlink()
    (ckpt / "latest" / "trainer_state.pt").write_bytes(pickle.dumps({"step": object}))
    seal_checkpoint(ckpt / "latest", ("trainer_state.pt", "trainer_state.json"))
    stage_train(preset, RunPaths(run), progress=False)
    assert "restarts from step 0" in (run / "events.log").read_text()
    reproduce(preset, run, progress=False)
    assert results_of(run) == results_of(base)


def test_truncated_manifest_is_rewritten(base_run, tmp_path):
    preset, base = base_run
    run = _copy(base, tmp_path)
    _truncate(run / "data" / "manifest.json")
    reproduce(preset, run, progress=False)
    manifest = json.loads((run / "data" / "manifest.json").read_text())
    assert len(manifest["files"]) == 4  # train n6, n7, val n7, test n7


def test_corrupt_latest_checkpoint_falls_back(base_run, tmp_path, caplog):
    """A corrupt latest/ resumes from the previous good one (.latest_old) or restarts."""
    preset, base = base_run
    for fallback in ("previous", "restart"):
        run = _copy(base, tmp_path, fallback)
        (record,) = list((run / "jobs").glob("*.json"))
        final = run / json.loads(record.read_text())["checkpoint"]
        ckpt = final.parent
        shutil.rmtree(final)  # as if killed after the last checkpoint
        record.unlink()
        if fallback == "previous":
            shutil.copytree(ckpt / "latest", ckpt / ".latest_old")
        _flip_byte(ckpt / "latest" / "trainer_state.pt")
        with caplog.at_level("WARNING", logger="graphwm"):
            stage_train(preset, RunPaths(run), progress=False)
        events = (run / "events.log").read_text()
        assert "quarantined" in events
        if fallback == "previous":
            assert "previous good checkpoint" in events
        else:
            assert "restarts from step 0" in events
        assert "trainer_state.pt" in caplog.text
        reproduce(preset, run, progress=False)
        assert results_of(run) == results_of(base)


def test_base_run_results_are_finite(base_run):
    _, base = base_run
    rows = [json.loads(r) for r in results_of(base)]
    assert sorted(r["kind"] for r in rows) == ["self_gdd", "single_step"]
    assert all(math.isfinite(r["gdd"]) and r["gdd"] >= 0 for r in rows)


def test_every_jobs_log_line_has_one_format(base_run):
    """jobs.log has one writer: the driver's collect and fit lines and the executors' job
    lines carry the same keys, where each ran (host, node, pid, threads, device) included."""
    _, run = base_run
    lines = [json.loads(x) for x in (run / "jobs.log").read_text().splitlines()]
    assert {ln["kind"] for ln in lines} >= {"collect", "fit", "train", "single_step"}
    assert {tuple(ln) for ln in lines} == {JOBS_LOG_KEYS}  # the same keys, in one order
    for ln in lines:
        assert ln["host"] and ln["node"] and ln["device"] == "cpu", ln
        assert isinstance(ln["pid"], int) and isinstance(ln["threads"], int) and ln["threads"] >= 1
    assert {ln["threads"] for ln in lines if ln["kind"] not in ("collect", "fit")} == {1}
    assert read_jobs_log(run) == lines


def test_old_jobs_log_lines_read_with_every_key(tmp_path):
    """A line written before the one format (no node, threads or device; collect and fit
    lines had no seed or cause) reads with every key, ``None`` where it had none."""
    old = [
        {"key": "a", "kind": "collect", "env": "SAR", "model": None, "host": "h", "pid": 7,
         "started": 1.0, "seconds": 0.5, "status": "done"},
        {"key": "b", "kind": "train", "env": "SAR", "model": "gdm", "seed": 0,
         "host": "h (ray node 0123456789ab, 10.0.0.2)", "pid": 8, "threads": 1,
         "device": "cpu", "started": 2.0, "seconds": 1.5, "status": "done"},
    ]  # fmt: skip
    (tmp_path / "jobs.log").write_text("".join(json.dumps(r) + "\n" for r in old) + "{torn\n")
    rows = read_jobs_log(tmp_path)
    assert [tuple(r) for r in rows] == [JOBS_LOG_KEYS, JOBS_LOG_KEYS]  # the torn line skipped
    assert rows[0]["threads"] is None and rows[0]["device"] is None and rows[0]["node"] == "h"
    assert rows[1]["node"] == old[1]["host"] and rows[1]["seed"] == 0
    new = append_jobs_log(tmp_path, key="c", kind="fit", status="done", started=3.0)
    assert tuple(new) == JOBS_LOG_KEYS and read_jobs_log(tmp_path)[-1] == new


def test_trainer_options_reach_the_trainer(base_run, tmp_path, preset_with):
    """train.log_every / precision / compile reach gdm_models.train in the job's TrainConfig;
    log_every is not keyed (it changes the log, not the weights), precision is."""
    from graphwm.pipeline import training_jobs

    preset, base = base_run
    (job,) = training_jobs(preset)
    c = job.config
    assert (c.precision, c.compile, c.log_every) == ("fp32", False, 1)
    sparse = preset_with(preset, "train.log_every", 2)
    (sparse_job,) = training_jobs(sparse)
    assert sparse_job.key == job.key and sparse_job.config.log_every == 2
    (bf16_job,) = training_jobs(preset_with(preset, "train.precision", "bf16"))
    assert bf16_job.key != job.key
    run = tmp_path / "sparse"
    stage_train(preset_with(sparse, "train.steps", 5), RunPaths(run), progress=False)
    (log,) = run.glob("train/SAR/*/*/log.csv")
    steps = [int(line.split(",")[0]) for line in log.read_text().splitlines()[1:]]
    assert steps == [2, 4, 5]


def test_keys_change_with_any_package_version(monkeypatch):
    """An upgraded package must not reuse what an older release stored (stale results)."""
    import gdm_models

    from graphwm.store.files import content_key

    before = content_key("train", {"steps": 4})
    assert content_key("train", {"steps": 4}) == before
    monkeypatch.setattr(gdm_models, "__version__", "99.0")
    assert content_key("train", {"steps": 4}) != before


def test_a_training_log_edited_after_its_job_ended_is_refused(base_run, tmp_path):
    """Issue 30: a log is sealed in its training record when the job ends; an edit changes no
    figure silently: the report refuses it, a rerun refuses it, --redo-corrupt retrains."""
    from graphwm.report.build import build_report

    preset, base = base_run
    run = _copy(base, tmp_path)
    (log,) = run.glob("train/*/*/seed*/log.csv")
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines, lines[-1]]) + "\n")  # a valid log, one row more
    with pytest.raises(CorruptFileError, match="sealed when the job ended"):
        build_report(run)
    with pytest.raises(CorruptFileError, match="sealed when the job ended"):
        reproduce(preset, run, progress=False)
    reproduce(preset, run, progress=False, redo_corrupt=True)
    assert log.read_bytes() == next(base.glob("train/*/*/seed*/log.csv")).read_bytes()
    assert results_of(run) == results_of(base)


def test_a_linked_results_folder_writes_nothing_outside(base_run, tmp_path):
    """Issue 30: reproduce wrote records through a linked results/ before refusing."""
    preset, base = base_run
    run = _copy(base, tmp_path)
    outside = tmp_path / "outside"
    shutil.move(run / "results", outside)
    (run / "results").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(CorruptFileError, match="results: is a symbolic link"):
        reproduce(preset, run, progress=False)
    assert sorted(p.name for p in outside.iterdir()) == before


def _reseal(ckpt: Path, **manifest_changes) -> None:
    """Rewrite a checkpoint's manifest and reseal it (what a writer of the run dir could do),
    so that only the size checks can catch it."""
    from gdm_models.training.checkpoint import MANIFEST_FILE, _manifest_digest, _sha256

    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest.update(manifest_changes)
    manifest["weights_sha256"] = _sha256(ckpt / "weights.safetensors")
    manifest["digest"] = _manifest_digest(manifest)
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


def _reseal_record(run: Path, ckpt: Path) -> None:
    from gdm_models.training.checkpoint import checkpoint_digest

    from graphwm.store.records import seal

    for path in (run / "jobs").glob("*.json"):
        raw = json.loads(path.read_text())
        if raw.get("checkpoint") and run / raw["checkpoint"] == ckpt:
            raw["checkpoint_digest"] = checkpoint_digest(ckpt)
            path.write_text(json.dumps(seal({k: v for k, v in raw.items() if k != "digest"})))


@pytest.mark.parametrize("damage", ["config", "header"])
def test_a_resealed_checkpoint_that_cannot_load_is_recoverable(base_run, tmp_path, damage):
    """Issue 30: a checkpoint config asking for 160 GB, or a weights header claiming an
    impossible size, is a corrupt store file --redo-corrupt quarantines (the job retrains)."""
    import struct

    preset, base = base_run
    run = _copy(base, tmp_path)
    (ckpt,) = run.glob("train/*/*/seed*/ckpt/final")
    if damage == "config":
        config = json.loads((ckpt / "checkpoint.json").read_text())["config"]
        _reseal(ckpt, config={**config, "hidden_dim": 200_000})
    else:
        weights = ckpt / "weights.safetensors"
        data = bytearray(weights.read_bytes())
        data[:8] = struct.pack("<Q", 2**40)
        weights.write_bytes(bytes(data))
        _reseal(ckpt)
    _reseal_record(run, ckpt)
    with pytest.raises(CorruptFileError, match="more than half this machine|header claims"):
        reproduce(preset, run, progress=False)
    reproduce(preset, run, progress=False, redo_corrupt=True)
    assert results_of(run) == results_of(base)
