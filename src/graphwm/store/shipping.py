"""Jobs on nodes that cannot see the run directory (the Ray executor's mode).

The run store stays the driver's. A job's inputs travel to its node through Ray's object
store: the files of the run directory it reads (:func:`job_inputs`: its training data, fit,
checkpoints, and its own folder for a resumed training job), each put once per driver. The
node runs the job in a private temporary run directory holding those files and sends back
what it wrote (records, weights, logs; :class:`~graphwm.store.outcomes.Outcome`), which the
driver installs and checks as it does a local job's.

A long training job also sends its resumable state back while it runs: every
:data:`STATE_SECONDS` the node copies its ``ckpt/latest/`` (checked sealed, so never a
half-written state) and its log to a small actor on the driver's node (:class:`StateInbox`),
and the driver writes them into the job's folder. A job lost with its node is submitted again
with that state among its inputs and resumes from it: a lost node costs at most one
checkpoint interval (``train.checkpoint_every``) plus :data:`STATE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from graphwm.store.outcomes import Outcome, execute
from graphwm.store.results import parts_of

#: how often a running training job sends its latest resumable state to the driver
STATE_SECONDS = 2.0
#: how long a state push may take before it is given up (the next one tries again)
PUT_SECONDS = 30.0


def job_inputs(job: Any) -> list[str]:
    """The paths (relative to the run directory, files or folders) that ``job`` reads: its
    training data and fit (``fit``), its test data (``data``), the checkpoints of the
    training job it evaluates (``train``) or the one it loads (``checkpoint``), and its own
    folder (``reldir``: a training job resumes from it). A unit's are its parts'."""
    out: list[str] = []
    for part in (job, *(parts_of(job) if hasattr(job, "parts") else ())):
        fit = getattr(part, "fit", None)
        if fit is not None:
            out.append(Path(fit.dir(Path("."))).as_posix())
            for ref in getattr(fit, "train_data", ()):
                out += [ref.relpath, Path(ref.relpath).with_suffix(".json").as_posix()]
        data = getattr(part, "data", None)
        if data is not None and hasattr(data, "relpath"):
            out += [data.relpath, Path(data.relpath).with_suffix(".json").as_posix()]
        train = getattr(part, "train", None)
        if train is not None and hasattr(train, "checkpoint"):
            out.append(Path(train.checkpoint(Path("."))).parent.as_posix())
        checkpoint = getattr(part, "checkpoint", None)
        if isinstance(checkpoint, str):
            out.append(checkpoint)
        reldir = getattr(part, "reldir", None)
        if isinstance(reldir, str):
            out.append(reldir)
    return [p for p in dict.fromkeys(out) if p not in ("", ".")]


def input_files(run_dir: Path, job: Any) -> list[str]:
    """Every file under :func:`job_inputs` that exists in ``run_dir`` (relative paths)."""
    run_dir = Path(run_dir)
    files: list[str] = []
    for rel in job_inputs(job):
        path = run_dir / rel
        if path.is_file():
            files.append(rel)
        elif path.is_dir():
            for top, _, names in os.walk(path):
                for name in names:
                    if not name.endswith(".tmp"):
                        files.append((Path(top) / name).relative_to(run_dir).as_posix())
    return sorted(set(files))


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """``relpath -> (size, mtime_ns, sha256)`` of every file under ``root``."""
    out = {}
    for top, _, names in os.walk(root):
        for name in names:
            path = Path(top) / name
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[path.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns, digest)
    return out


class StatePusher:
    """Sends a training job's verified ``latest/`` state and log to the driver's inbox every
    :data:`STATE_SECONDS` (a thread beside the job)."""

    def __init__(self, job: Any, run_dir: Path, inbox: Any, node: str) -> None:
        self.job, self.run_dir, self.inbox, self.node = job, Path(run_dir), inbox, node
        self.stop = threading.Event()
        self.sent: str | None = None
        self.thread = threading.Thread(target=self._loop, name="graphwm-state", daemon=True)

    def __enter__(self) -> StatePusher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=PUT_SECONDS)  # a push in flight: never hold the job back

    def _loop(self) -> None:
        while not self.stop.wait(STATE_SECONDS):
            with contextlib.suppress(Exception):  # a state caught mid-save: the next one
                self.push()

    def push(self) -> None:
        # the trainers' own seals (graphwm.stages.train adds size checks, done on resume)
        from gdm_models.training.ensemble_state import verify_ensemble_state
        from gdm_models.training.state import verify_trainer_state

        folder = self.run_dir / self.job.reldir
        latest = folder / "ckpt" / "latest"
        if not latest.is_dir():
            return
        with tempfile.TemporaryDirectory(prefix="graphwm-state-") as tmp:
            copy = Path(tmp) / "latest"
            shutil.copytree(latest, copy)
            verify = verify_ensemble_state if hasattr(self.job, "parts") else verify_trainer_state
            meta = verify(copy)  # sealed: never a half-written state
            digest = hashlib.sha256(
                b"".join(p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file())
            ).hexdigest()
            if digest == self.sent:
                return
            files = {}
            for path in sorted(copy.rglob("*")):
                if path.is_file():
                    rel = Path(self.job.reldir) / "ckpt" / "latest" / path.relative_to(copy)
                    files[rel.as_posix()] = path.read_bytes()
        # the logs after the state: they hold at least its rows (rows reach the disk first);
        # an ensemble's members log in their own folders
        parts: tuple[Any, ...] = parts_of(self.job)
        folders = [folder, *(self.run_dir / p.reldir for p in parts)]
        for log in dict.fromkeys(p for f in folders for p in sorted(f.rglob("log.csv"))):
            files[log.relative_to(self.run_dir).as_posix()] = log.read_bytes()
        import ray

        put = self.inbox.put.remote(self.job.key, int(meta.get("step", 0)), self.node, files)
        ray.get(put, timeout=PUT_SECONDS)
        self.sent = digest


class StateInbox:
    """The driver-side mailbox of running jobs' states (a Ray actor on the driver's node)."""

    def __init__(self) -> None:
        self.states: dict[str, tuple[int, str, dict[str, bytes]]] = {}

    def put(self, key: str, step: int, node: str, files: dict[str, bytes]) -> None:
        self.states[key] = (step, node, files)

    def take(self) -> dict[str, tuple[int, str, dict[str, bytes]]]:
        states, self.states = self.states, {}
        return states


def run_shipped(fn: Any, job: Any, inputs: dict[str, Any], inbox: Any, code: str) -> Outcome:
    """A Ray task: run ``job`` in a private run directory holding its ``inputs`` (``relpath
    -> ObjectRef`` of the bytes), return its outcome with the files it wrote or changed.

    ``code`` is the driver's code digest: a node running other code refuses the job."""
    import ray

    from graphwm.store.versions import check_code

    check_code(code)
    blobs = ray.get(list(inputs.values())) if inputs else []
    with tempfile.TemporaryDirectory(prefix="graphwm-job-") as tmp:
        root = Path(tmp) / "run"
        for rel, data in zip(inputs, blobs, strict=True):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        root.mkdir(exist_ok=True)
        before = _snapshot(root)
        pusher = (
            StatePusher(job, root, inbox, ray.get_runtime_context().get_node_id())
            if inbox is not None and isinstance(getattr(job, "reldir", None), str)
            else contextlib.nullcontext()
        )
        with pusher:
            outcome = execute(fn, job, str(root))
        after = _snapshot(root)
        outcome.files = {
            rel: (root / rel).read_bytes()
            for rel, stamp in after.items()
            if before.get(rel, (None, None, None))[2] != stamp[2] and not rel.endswith(".tmp")
        }
        outcome.deleted = sorted(set(before) - set(after))
    return outcome
