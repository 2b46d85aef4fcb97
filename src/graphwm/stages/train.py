"""Stage 3: train one model on one env's training data (a content-keyed job).

A :class:`TrainJob` holds every resolved setting that determines its weights (the model and
trainer hyperparameters, the paper's under the preset's overrides; length, seed, device,
precision, and the key of the fit, which holds the keys of the training data). Its folder
``RUN_DIR/train/<ENV>/<model>/seed<k>-<key>/`` keeps the log and the checkpoints, so a changed
setting trains a new model from scratch and an unchanged one is reused.

Training is resumable: rerunning a job killed midway continues from its last checkpoint (the
trainer restores model, optimiser, sampler and RNG states) and ends with the same weights as
an uninterrupted run. A corrupt ``latest/`` checkpoint falls back to the previous good one
(``.latest_old``, left by a save that was cut short) or to a restart, said in the log.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdm_models.training import TrainConfig

from graphwm.config import TrainSection
from graphwm.config_values import defaults
from graphwm.envs import env_schema
from graphwm.stages.fit import FitJob, load_fitted, training_episodes
from graphwm.store.checkpoints import recover_latest
from graphwm.store.files import CorruptFileError, content_key, inside, sha256_file
from graphwm.store.paths import safe_name
from graphwm.store.records import TrainRecord

_TRAIN = defaults(TrainSection)  # the preset's [train] defaults (graphwm.config)
_CLIP = TrainConfig().grad_clip


#: the folder of a job's (or an ensemble's) TensorBoard event files, beside its log.csv
TENSORBOARD_DIRNAME = "tensorboard"


def model_dir_name(model: str) -> str:
    """File-system name of a model (``gdm:no-h-plus`` -> ``gdm__no-h-plus``)."""
    return safe_name(model)


def job_reldir(env: str, model: str, stem: str, key: str) -> str:
    """``train/<ENV>/<model>/<stem>-<digest of key>``: the folder of a training job or of an
    ensemble of them, relative to the run directory."""
    digest = key.split("-", 1)[1]
    return f"train/{safe_name(env)}/{model_dir_name(model)}/{stem}-{digest}"


#: the hyperparameters a job's ``trainer`` table holds (the paper's per model under the
#: preset's ``train_overrides``): fields of :class:`~gdm_models.training.TrainConfig`
TRAINER_FIELDS = ("batch_size", "lr", "seq_len")


@dataclass(frozen=True)
class TrainJob:
    """One training run: ``config`` holds every training hyperparameter
    (:class:`gdm_models.training.TrainConfig`: seed, length, batch, learning rate, device,
    precision, ...), and the key is derived from it (and from the model, its config and the
    fit). ``config``'s ``checkpoint_every``, ``log_every`` and ``threads`` do not change the
    weights and are not keyed; nor is ``tensorboard`` (an extra output). ``grad_clip``,
    ``capture`` and ``keep_every`` are keyed only when set (the keys of earlier jobs stand).
    """

    env: str
    model: str
    fit: FitJob
    #: the model's hyperparameters (the paper's, overridden) as sorted (name, value) pairs
    model_config: tuple[tuple[str, Any], ...]
    config: TrainConfig
    #: the seeds trained together with this one (``()``: a single run; see EnsembleJob)
    ensemble: tuple[int, ...] = ()
    #: also write TensorBoard event files into the job folder's ``tensorboard/``
    tensorboard: bool = field(default=_TRAIN["tensorboard"], compare=False)

    kind = "train"

    # the config's fields a job reads (its seed names its folder, its length its kept steps)
    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def steps(self) -> int | None:
        return self.config.steps

    @property
    def epochs(self) -> int | None:
        return self.config.epochs

    @property
    def device(self) -> str:
        return self.config.device or "cpu"

    @property
    def keep_every(self) -> int | None:
        return self.config.keep_every

    @property
    def threads(self) -> int:
        return self.config.threads or 1

    def with_config(self, **changes: Any) -> TrainJob:
        """This job with ``changes`` to its config (``seed=``, ``keep_every=``, ...)."""
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes))

    def describe(self) -> dict[str, Any]:
        # the payload (and key) of jobs from before the TrainConfig, field for field
        c = self.config
        trainer: dict[str, Any] = {k: getattr(c, k) for k in TRAINER_FIELDS}
        if c.grad_clip != _CLIP:  # only a preset that sets it (none shipped) keys it
            trainer["grad_clip"] = c.grad_clip
        out = {
            "env": self.env,
            "model": self.model,
            "seed": c.seed,
            "scaler": self.fit.scaler_key,  # holds the training data's keys
            "model_config": dict(self.model_config),
            "trainer": trainer,
            "steps": c.steps,
            "epochs": c.epochs,
            "device": c.device,
            "precision": c.precision,
            "compile": c.compile,
        }
        if self.ensemble:  # a single run's payload (and key) is unchanged
            out["ensemble"] = {"seeds": list(self.ensemble), "strategy": c.strategy}
        if c.keep_every:  # likewise without kept checkpoints
            out["keep_every"] = c.keep_every
        if c.capture is not None:  # forced on or off (the weights differ): keyed when set
            out["capture"] = c.capture
        return out

    @property
    def key(self) -> str:
        return content_key("train", self.describe())

    @property
    def reldir(self) -> str:
        return job_reldir(self.env, self.model, f"seed{self.seed}", self.key)

    def dir(self, run_dir: Path) -> Path:
        return Path(run_dir) / self.reldir

    def checkpoint(self, run_dir: Path, step: int | None = None) -> Path:
        """The final checkpoint of this job, or the one it kept at ``step`` (one of
        :meth:`kept_steps`; the last step is the final checkpoint)."""
        folder = self.dir(run_dir) / "ckpt"
        if step is None or step == self.steps:
            return folder / "final"
        if step not in self.kept_steps():
            raise ValueError(
                f"{self.reldir} keeps no checkpoint of step {step}; it keeps {self.kept_steps()}"
            )
        return folder / f"step_{step:06d}"  # gdm_models.training.checkpoint.kept_checkpoint_dir

    def kept_steps(self) -> tuple[int, ...]:
        """The steps whose checkpoints this job keeps: every ``keep_every``-th and the last
        (its final checkpoint); ``()`` without ``keep_every`` (or a length in epochs)."""
        if not self.keep_every or self.steps is None:
            return ()
        every = list(range(self.keep_every, self.steps + 1, self.keep_every))
        return tuple(every if every and every[-1] == self.steps else [*every, self.steps])


def build_model(job: TrainJob, run_dir: Path):
    """The freshly initialised model of a job (seeded by the job's seed)."""
    import torch
    from gdm_models import make_model

    _, scaler = load_fitted(job.fit.dir(run_dir))
    torch.manual_seed(int(job.seed))
    return make_model(job.model, env_schema(job.env), scaler, **dict(job.model_config))


def train_job(job: TrainJob, run_dir: str) -> TrainRecord:
    """Train ``job.model`` on ``job.env``; returns the record of the final checkpoint."""
    import torch
    from gdm_models import EpisodeDataset, train

    run_dir_path = Path(run_dir)
    torch.set_num_threads(job.threads)
    model = build_model(job, run_dir_path)
    dataset = EpisodeDataset(
        training_episodes(run_dir_path, job.fit.train_data),
        env_schema(job.env),
        seq_len=job.config.seq_len,
    )
    out = job.dir(run_dir_path)
    recover_latest(run_dir_path, out / "ckpt", verify_resumable)
    result = train(
        model,
        dataset,
        job.config,
        log_csv=out / "log.csv",
        tensorboard_dir=out / TENSORBOARD_DIRNAME if job.tensorboard else None,
        checkpoint_dir=out / "ckpt",
        resume=True,
        progress=False,
    )
    return train_record(job, result, run_dir_path)


def train_record(job: TrainJob, result: Any, run_dir: Path) -> TrainRecord:
    """The record of ``job``'s finished training (``result``: a single run's ``TrainResult``
    or an ensemble member's result, both with ``steps``, ``resumed_from``, ``last_terms``)."""
    from gdm_models.training.checkpoint import checkpoint_digest

    final = job.checkpoint(run_dir)
    log = job.dir(run_dir) / "log.csv"
    return TrainRecord(
        kind="train",
        env=job.env,
        model=job.model,
        seed=job.seed,
        steps=result.steps,
        resumed_from=result.resumed_from,
        checkpoint=final.relative_to(run_dir).as_posix(),
        checkpoint_digest=checkpoint_digest(final),
        # a job resumed from its final step's checkpoint (killed after it, before its record
        # was stored) trains no step: its last row is in its log, as an uninterrupted run's
        last_terms=dict(result.last_terms) or logged_terms(log, result.steps),
        log_digest=sha256_file(log) if log.is_file() else None,
    )


def logged_terms(log: Path, step: int) -> dict[str, float]:
    """The row of ``step`` in a training ``log.csv`` as the trainer logged it (``step`` an
    integer, the rest floats: a logged float reads back exactly); ``{}`` if it holds none."""
    import csv

    if not log.is_file():
        return {}
    with open(log, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("step") == str(step)]
    if not rows:
        return {}
    return {
        k: int(v) if k == "step" else float(v)
        for k, v in rows[-1].items()
        if k is not None and v not in ("", None)
    }


#: bytes of one element of each safetensors dtype
_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


def checkpoint_size_problem(path: Path) -> str | None:
    """What makes a checkpoint unloadable for its size, read before any weight is: its
    config asking for a model whose weights exceed half this machine's memory (counted on
    torch's ``meta`` device), or a ``weights.safetensors`` header that claims more bytes than
    the file holds. None: the sizes are sound. (The digests say a file is the one sealed;
    this says it can be loaded.)"""
    import json
    import struct

    from gdm_models.machine import memory_bytes
    from gdm_models.training.checkpoint import WEIGHTS_FILE, CheckpointError, read_manifest

    try:
        manifest = read_manifest(path)
        env_schema = manifest["schema"]
        config = manifest["config"]
        if not isinstance(config, dict):
            return "its config is not a table"
        count = _parameters_of(manifest["model_name"], env_schema, config)
    except (CheckpointError, OverflowError, KeyError, TypeError, ValueError) as err:
        return f"its model cannot be built from its config ({err})"
    if 4 * count > memory_bytes() // 2:
        return (
            f"its config asks for {count} parameters ({4 * count / 2**30:.3g} GiB of weights), "
            "more than half this machine's memory"
        )
    weights = path / WEIGHTS_FILE
    size = weights.stat().st_size
    try:
        with open(weights, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > size - 8:
                return f"{WEIGHTS_FILE}'s header claims {length} bytes, the file has {size}"
            header = json.loads(fh.read(length))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            need = _DTYPE_BYTES[entry["dtype"]]
            for dim in entry["shape"]:
                need *= int(dim)
            if not 0 <= start <= end <= size - 8 - length or end - start != need:
                return f"{WEIGHTS_FILE}: tensor {name!r} claims bytes the file does not hold"
    except (struct.error, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{WEIGHTS_FILE}'s header is unreadable ({err})"
    return None


def _refuse_unloadable(path: Path) -> None:
    """Raise ``CheckpointError`` where :func:`checkpoint_size_problem` finds one."""
    from gdm_models.training.checkpoint import CheckpointError

    problem = checkpoint_size_problem(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path}: {problem}")


def verify_resumable(latest: Path) -> dict[str, Any]:
    """A training job's ``latest/`` state before resuming: intact and sealed
    (``gdm_models.training.trainer.verify_trainer_state``) and loadable for its sizes
    (:func:`checkpoint_size_problem`); else ``CheckpointError``, and
    :func:`~graphwm.store.checkpoints.recover_latest` quarantines it."""
    from gdm_models.training.trainer import verify_trainer_state

    meta = verify_trainer_state(latest)
    _refuse_unloadable(Path(latest))
    return meta


def verify_resumable_ensemble(latest: Path) -> dict[str, Any]:
    """:func:`verify_resumable` for an ensemble's ``latest/`` state: the state
    (``gdm_models.training.ensemble.verify_ensemble_state``) and every member checkpoint it
    holds."""
    from gdm_models.training.ensemble import verify_ensemble_state

    meta = verify_ensemble_state(latest)
    for s in meta["seeds"]:
        member = Path(latest) / f"seed{s}"
        if member.is_dir():
            _refuse_unloadable(member)
    return meta


def _parameters_of(model: str, schema: Any, config: dict) -> int:
    """Parameters of ``model`` under the checkpoint's ``config`` on its ``schema``."""
    import torch
    from gdm_models import make_model

    try:
        with torch.device("meta"):
            built = make_model(model, schema, None, **config)
    except (RuntimeError, TypeError, ValueError, OverflowError, MemoryError, KeyError) as err:
        raise OverflowError(str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    return sum(int(t.numel()) for t in built.parameters())


def verify_trained(run_dir: Path, record: TrainRecord, job: TrainJob | None = None) -> None:
    """Raise :class:`CorruptFileError` unless the record's checkpoint is intact and its own.

    With ``job``: the checkpoint must be the job's own (in its folder: a record pointing
    elsewhere would have this check pass on a copy while evaluation loads the job's), and the
    job's ``log.csv`` must read (else the whole job folder is what ``--redo-corrupt``
    quarantines, so the job trains again).
    """
    from gdm_models.training.checkpoint import CheckpointError, checkpoint_digest

    from graphwm.store.records import ResultsFormatError
    from graphwm.store.training_log import read_log

    run_dir = Path(run_dir)
    if (
        job is not None
        and record.checkpoint != job.checkpoint(run_dir).relative_to(run_dir).as_posix()
    ):
        raise CorruptFileError(
            run_dir / record.checkpoint,
            f"the training record names checkpoint {record.checkpoint!r}, not its job's "
            f"{job.reldir}/ckpt/final",
            quarantine=job.dir(run_dir),
        )
    path = inside(run_dir, record.checkpoint, run_dir / record.checkpoint)
    try:
        digest = checkpoint_digest(path)
    except CheckpointError as err:
        raise CorruptFileError(path, str(err)) from None
    if digest != record.checkpoint_digest:
        raise CorruptFileError(path, "its digest differs from the training record's")
    problem = checkpoint_size_problem(path)
    if problem is not None:
        raise CorruptFileError(path, problem, quarantine=job.dir(run_dir) if job else None)
    for step in job.kept_steps() if job is not None else ():
        assert job is not None  # kept_steps() of a job only
        kept = job.checkpoint(run_dir, step)
        try:
            checkpoint_digest(kept)
        except CheckpointError as err:  # missing or damaged: the job trains again
            raise CorruptFileError(kept, str(err), quarantine=job.dir(run_dir)) from None
    if job is not None:
        log = job.dir(run_dir) / "log.csv"
        try:
            if log.is_symlink():
                raise ResultsFormatError(f"{log}: is a symlink")
            read_log(log, job.env, job.model, job.seed)
            if record.log_digest is not None and sha256_file(log) != record.log_digest:
                raise ResultsFormatError(
                    f"{log}: differs from the digest its training record sealed when the job "
                    "ended (edited?)"
                )
        except (ResultsFormatError, UnicodeDecodeError, OSError, CorruptFileError) as err:
            reason = err.reason if isinstance(err, CorruptFileError) else str(err)
            raise CorruptFileError(log, reason, quarantine=job.dir(run_dir)) from None
