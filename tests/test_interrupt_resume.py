"""Issue 47, section 4: SIGKILL and SIGTERM at random points of ``graphwm train``, ``evaluate``,
``curve`` and ``noise``, then the same command again; two ``noise`` commands on one run at once.

The run directory is hashed before each kill, after it and after the rerun: nothing stored is
lost or silently changed (a store file's bytes stay the same once written, every visible record
reads and carries its digest), and the finished run equals an uninterrupted one, file for file:
the trained weights, the kept checkpoints and ``log.csv`` exactly as docs/reproducing.md
("Resuming") says, every evaluation record and the noise table. The kill delays are drawn from
seeded generators (the "random points"), relative to when the command takes the run's lock.

tests/test_interrupt.py covers the messages and the pool workers of a stopped run; this file
covers what the store holds afterwards. The whole-command tests start real ``graphwm``
processes (tens of seconds each on a loaded 2-core machine), so they are slow-marked; the
default run has the fast variant at the store's level: a process SIGKILLed in the middle of a
store write (which write, and how much of it reached the disk, drawn from a seeded generator).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphwm.store.files import LOCK_NAME, read_json
from graphwm.store.records import check_digest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "src" / "graphwm" / "presets" / "tiny.toml"
REPEATS = 3  # graphwm noise --repeats
#: files a run rewrites or appends to by design (the lock, the logs of events and jobs,
#: run.json: derived, rebuilt by each command); every other stored file keeps its bytes
VOLATILE = {LOCK_NAME, "run.json", "jobs.log", "events.log"}


def interrupt_preset_text() -> str:
    """tiny.toml narrowed to SAR and the GDM, 30 steps checkpointed every 5, the GDD curve
    every 10 steps on two test episodes, no multi-step, downstream or search sections: one
    training job of ~10 s and ~10 evaluations on a loaded machine, so a kill has work to hit."""
    text = TINY.read_text()
    for pattern, repl in [
        (r"(?m)^envs = .*$", 'envs = ["SAR"]'),
        (r"(?m)^models = .*$", 'models = ["gdm"]'),
        (r"(?m)^ablations = .*$", "ablations = []"),
        (r"(?m)^test_episodes = \d+$", "test_episodes = 2"),
        (r"(?m)^steps = \d+$", "steps = 30\neval_every = 10"),
        (r"(?m)^checkpoint_every = \d+$", "checkpoint_every = 5"),
        (r"(?m)^permutations = \d+$", "permutations = 20\ncurve_episodes = 2"),
        (r"\[train\.model_overrides\.vanilla-gwm\]\nhidden_dim = \d+\n", ""),
    ]:
        text, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, pattern
    text = re.sub(r"(?m)^max_episodes = 1$", "max_episodes = 2", text, count=1)
    return text.split("[multi_step]")[0]  # the sections after it are left out


def digests(run_dir: Path) -> dict[str, str]:
    """SHA-256 of every regular file under ``run_dir``, by relative path."""
    out = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[path.relative_to(run_dir).as_posix()] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return out


def _temporary(rel: str) -> bool:
    """A writer's temporary file or folder (``.name.XXXX.tmp``, ``.tmp_*``, ``.latest_tmp``):
    never read as a store file; a SIGKILL can leave one behind."""
    return any(part.startswith(".") and "tmp" in part for part in rel.split("/"))


def _resumable(rel: str) -> bool:
    """The resumable training state: replaced at every checkpoint by design."""
    return "/ckpt/latest/" in rel or "/ckpt/.latest_old/" in rel


def assert_nothing_lost_or_changed(before: dict[str, str], after: dict[str, str], run: Path):
    """Every file stored before is still there with the same bytes, except the volatile ones
    (the logs only grow: :func:`_assert_logs_grow`), the resumable state, writers' temporary
    files and the ``log.csv`` of a training job without a record yet (resuming rewrites it up
    to the checkpoint it resumes from)."""
    trained = {p.stem.split("-", 1)[1] for p in run.glob("jobs/train-*.json")}
    for rel, digest in before.items():
        name = rel.rsplit("/", 1)[-1]
        if _temporary(rel) or _resumable(rel) or name in VOLATILE - {"jobs.log", "events.log"}:
            continue
        job_dir = rel.rsplit("/", 2)[0]
        if name == "log.csv" and not any(job_dir.endswith(f"-{d}") for d in trained):
            continue
        assert rel in after, f"{rel} was stored and is gone"
        if name not in VOLATILE:
            assert after[rel] == digest, f"{rel} was stored and changed"


def assert_records_intact(run: Path) -> None:
    """Every visible JSON file of the store parses, and every record carries its digest."""
    for path in run.rglob("*.json"):
        rel = path.relative_to(run).as_posix()
        if _temporary(rel):
            continue
        data = read_json(path)
        if rel.split("/")[0] in ("jobs", "results") or rel.startswith("noise/results/"):
            check_digest(data, path)


def _logs(run: Path) -> dict[str, bytes]:
    return {n: (run / n).read_bytes() for n in ("jobs.log", "events.log") if (run / n).exists()}


def _assert_logs_grow(before: dict[str, bytes], run: Path) -> None:
    after = _logs(run)
    for name, text in before.items():
        # a killed writer may leave no line, never a part of one (one O_APPEND write each)
        assert after[name].startswith(text), f"{name} lost lines"
        assert after[name].endswith(b"\n") or not after[name]


def _graphwm(command: str, preset: Path, run: Path) -> list[str]:
    args = [sys.executable, "-m", "graphwm.cli", command, "--preset", str(preset)]
    args += ["--out", str(run), "--quiet"]
    if command == "noise":
        args += ["--of", "curve", "--repeats", str(REPEATS)]
    return args


def _env() -> dict[str, str]:
    # one thread: the machine's cores are shared, and the reference ran on one
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def _started(args: list[str]) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)


# ---------------------------------------------------------------------------------------------
# The reference: the four commands uninterrupted, with a copy of the run after each
# ---------------------------------------------------------------------------------------------
COMMANDS = ("train", "evaluate", "curve", "noise")
#: the run each command starts from: the state the previous command left
START = {"train": None, "evaluate": "train", "curve": "evaluate", "noise": "curve"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The preset file, and per command: the uninterrupted run after it and the seconds from
    taking the run's lock to the end (the window the kill delays are drawn from). Each command
    runs as the killed ones do, a ``graphwm`` process."""
    tmp = tmp_path_factory.mktemp("interrupt_reference")
    preset_path = tmp / "preset.toml"
    preset_path.write_text(interrupt_preset_text())
    run = tmp / "run"
    runs, seconds = {}, {}
    for command in COMMANDS:
        with contextlib.suppress(FileNotFoundError):
            (run / LOCK_NAME).unlink()
        with _started(_graphwm(command, preset_path, run)) as proc:
            _wait_for_lock(proc, run)
            start = time.monotonic()
            _, stderr = proc.communicate(timeout=1800)
            seconds[command] = time.monotonic() - start
        assert proc.returncode == 0, stderr[-3000:]
        runs[command] = tmp / f"after-{command}"
        shutil.copytree(run, runs[command])
    return preset_path, runs, seconds


def _wait_for_lock(proc: subprocess.Popen, run: Path) -> None:
    """Wait until ``proc`` holds the run's lock: its work starts."""
    deadline = time.monotonic() + 600  # imports alone take tens of seconds under load
    while not (run / LOCK_NAME).exists():
        if proc.poll() is not None:
            pytest.fail(f"graphwm ended before its work: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "graphwm did not start its work"
        time.sleep(0.02)


def _start_state(reference, command: str, run: Path) -> None:
    _, runs, _ = reference
    if START[command] is not None:
        shutil.copytree(runs[START[command]], run)
        (run / LOCK_NAME).unlink()  # the command's lock file says when its work starts


def _assert_equals_uninterrupted(run: Path, clean: Path, command: str) -> None:
    """The finished run holds what the uninterrupted one holds, byte for byte: weights, kept
    checkpoints, training logs, evaluation records, noise repeats and table; training records
    differ only in ``resumed_from`` (and so in their digest)."""
    ours, theirs = digests(run), digests(clean)

    def stored(d: dict[str, str]) -> set[str]:
        return {
            rel
            for rel in d
            if not (_temporary(rel) or _resumable(rel) or rel.rsplit("/", 1)[-1] in VOLATILE)
            and not rel.endswith(".log")  # a job's captured output (timings, warnings)
        }

    assert stored(ours) == stored(theirs)
    for rel in stored(theirs):
        if rel.startswith("jobs/train-"):
            a, b = read_json(run / rel), read_json(clean / rel)
            for d in (a, b):
                d.pop("resumed_from", None)
                d.pop("digest", None)
            assert a == b, rel
        else:
            assert ours[rel] == theirs[rel], f"{rel} differs from the uninterrupted run's"
    if command in ("train",):
        (log,) = [rel for rel in ours if rel.endswith("log.csv")]
        assert (run / log).read_text() == (clean / log).read_text()


def _kill_at_random_point(
    args: list[str], run: Path, sig: signal.Signals, delay: float
) -> tuple[int, str]:
    """Start the command, wait until it holds the run's lock (its work starts), then ``delay``
    seconds more, and send ``sig``; return its exit code and stderr."""
    with _started(args) as proc:
        _wait_for_lock(proc, run)
        time.sleep(delay)
        if proc.poll() is None:
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)
            else:  # the scheduler's signal goes to graphwm, which stops its own workers
                proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    return proc.returncode, stderr


@pytest.mark.slow  # three graphwm processes per command (tens of seconds each under load)
@pytest.mark.parametrize("command", COMMANDS)
def test_killed_at_random_points_then_rerun_loses_nothing(reference, tmp_path, command):
    """SIGKILL, then SIGTERM, each at a random point of ``command``'s work, then the same
    command again: after each stop and after the rerun nothing stored is lost or changed, every
    visible record reads, and the finished run equals the uninterrupted one."""
    preset_path, runs, seconds = reference
    run = tmp_path / "run"
    _start_state(reference, command, run)
    args = _graphwm(command, preset_path, run)
    rng = np.random.default_rng([47, COMMANDS.index(command)])
    interrupted = 0
    for sig in (signal.SIGKILL, signal.SIGTERM):
        before, logs = (digests(run), _logs(run)) if run.exists() else ({}, {})
        # the kill lands anywhere in the work the uninterrupted command did (a rerun has less
        # left: a late draw may find it finished, which the next round or the count tells)
        delay = float(rng.uniform(0.0, 0.9 * seconds[command]))
        code, stderr = _kill_at_random_point(args, run, sig, delay)
        print(f"{command}: {sig.name} {delay:.2f} s into {seconds[command]:.1f} s: exit {code}")
        if code == 0:
            continue
        interrupted += 1
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL, stderr[-3000:]
        else:  # graphwm's handler (143), or the default action before it was installed
            assert code in (128 + signal.SIGTERM, -signal.SIGTERM), stderr[-3000:]
            assert "Traceback" not in stderr, stderr[-3000:]
        after = digests(run)
        assert_nothing_lost_or_changed(before, after, run)
        assert_records_intact(run)
        _assert_logs_grow(logs, run)
    assert interrupted >= 1, "every draw came after the command had finished"

    before, logs = digests(run), _logs(run)
    rerun = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=1800)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_nothing_lost_or_changed(before, digests(run), run)
    assert_records_intact(run)
    _assert_logs_grow(logs, run)
    _assert_equals_uninterrupted(run, runs[command], command)


# ---------------------------------------------------------------------------------------------
# Two noise commands on one run at once
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow  # two graphwm processes at once (a minute under load)
def test_two_noise_commands_at_once_compute_each_repeat_once(reference, tmp_path):
    """A user submits the same ``graphwm noise`` twice: the second waits for the run's lock
    (saying so) and then finds the repeats stored; both exit 0, every repeat is computed once,
    and the run equals the uninterrupted one."""
    preset_path, runs, _ = reference
    run = tmp_path / "run"
    _start_state(reference, "noise", run)
    args = _graphwm("noise", preset_path, run)
    with _started(args) as first, _started(args) as second:
        outs = [p.communicate(timeout=1800) for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), [e[-3000:] for _, e in outs]
    assert any("in use by another graphwm process; waiting" in e for _, e in outs), outs
    assert all("written: " in out for out, _ in outs)
    events = [json.loads(line) for line in (run / "jobs.log").read_text().splitlines()]
    done = [e["key"] for e in events if e["status"] == "done" and e["kind"] == "curve"]
    assert len(done) == len(set(done)), "a repeat was computed twice"
    noise_results = {p.name for p in (run / "noise" / "results").glob("*.json")}
    assert set(done) >= {n.removesuffix(".json") for n in noise_results}
    assert_records_intact(run)
    _assert_equals_uninterrupted(run, runs["noise"], "noise")


# ---------------------------------------------------------------------------------------------
# The fast variant: a process killed in the middle of a store write, at random points
# ---------------------------------------------------------------------------------------------
_WRITER = """
import os, pathlib, signal, sys
from pathlib import Path
from graphwm.store.records import SingleStepRecord
from graphwm.store.results import ResultStore, log_event

run, kill_at, cut = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
write_text, calls = pathlib.Path.write_text, 0


def torn_write_text(self, data, *args, **kwargs):
    # the kill-th write of a file: a part of it reaches the disk, then SIGKILL (a write cut
    # short by the kill); every other write as it is
    global calls
    calls += 1
    if calls == kill_at:
        with open(self, "w") as fh:
            fh.write(data[: int(len(data) * cut)])
        os.kill(os.getpid(), signal.SIGKILL)
    return write_text(self, data, *args, **kwargs)


pathlib.Path.write_text = torn_write_text


class Job:
    kind = "single_step"

    def __init__(self, i):
        self.key, self.i = f"single_step-{i:016x}", i

    def describe(self):
        return {"i": self.i}


store = ResultStore(run / "results")
for n in range(10**6):
    i = n % 20  # each record is written again and again: a kill may land on a replacement
    record = SingleStepRecord(
        kind="single_step", env="SAR", model="gdm", seed=0, size=7, gdd=0.25 + n,
        components={"node": 0.1, "graph": 0.2, "edge": 0.3, "joint": 0.01},
        factor_metrics={"adjacency_bce": 0.05, "features": {"reward": 0.1 + i}},
    )
    store.save(Job(i), record)
    log_event(run, "single_step", Job(i).key, "SAR", "gdm", 0.0, "done")
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_in_the_middle_of_store_writes_leaves_whole_records(tmp_path, seed):
    """A process writing (and rewriting) records through the store is SIGKILLed in the middle
    of its k-th file write, a part of that file written (k and the part drawn from a seeded
    generator; twice on the same folder): every record file reads whole with its digest, the
    one being replaced keeps its previous content, and ``jobs.log`` lists every stored one."""
    rng = np.random.default_rng([47, 4, seed])
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    run = tmp_path / "run"
    stored = 0
    for _ in range(2):
        kill_at, cut = int(rng.integers(1, 60)), float(rng.uniform(0.05, 0.95))
        res = subprocess.run(
            [sys.executable, str(script), str(run), str(kill_at), str(cut)], timeout=120
        )
        assert res.returncode == -signal.SIGKILL
        records = sorted((run / "results").glob("*.json"))
        # those written before the cut write (none lost of the first round's)
        stored = max(stored, min(kill_at - 1, 20))
        assert len(records) == stored
        for path in records:
            data = read_json(path)  # CorruptFileError for a torn file
            check_digest(data, path)
            i = int(path.stem.split("-")[1], 16)
            assert data["factor_metrics"]["features"]["reward"] == 0.1 + i
        logged = {json.loads(line)["key"] for line in (run / "jobs.log").read_text().splitlines()}
        assert logged >= {p.stem for p in records}
