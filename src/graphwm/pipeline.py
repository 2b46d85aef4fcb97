"""The whole experiment as stages; ``reproduce`` runs them all from one preset.

Stages (each also a CLI subcommand): collect -> fit -> train -> evaluate (single-step, self-GDD,
ablations, multi-step) -> curve (GDD over training, with ``train.eval_every``) -> downstream ->
report. The public functions here check their preset once and pass the checked preset to the
stages' bodies; the jobs themselves are :mod:`graphwm.jobs`. Each stage's output is
content-addressed: its key hashes everything that determines it, the keys of its inputs
included (collected file -> fit -> training job -> evaluation), and every stored path is
relative to the run directory. Rerunning a changed preset into the same directory computes
what changed and reuses exactly what did not; a moved run directory reuses everything.
``RUN_DIR/run.json`` names the training runs and results of the last preset run (what the
report reads). One process at a time works on a run directory
(:func:`graphwm.store.files.run_lock`); a killed training job resumes from its last
checkpoint. A command's stages share one local worker pool
(:func:`graphwm.store.executors.shared_pool`): its workers start once per command.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from graphwm import jobs
from graphwm.checks import CheckedPreset, check_device, parse_checked
from graphwm.config import (
    PRESET_NAMES,
    DownstreamConfig,
    Preset,
    PresetError,
    preset_dict,
    read_preset,
)
from graphwm.stages.collect import DataRef, collect
from graphwm.stages.curve import curve_job
from graphwm.stages.ensemble import EnsembleJob, train_unit, training_units, unit_members
from graphwm.stages.evaluate import EvalJob, multi_step_job, self_gdd_job, single_step_job
from graphwm.stages.fit import FitJob, run_fits
from graphwm.stages.tensorboard import check_tensorboard, write_from_logs
from graphwm.stages.train import TrainJob, verify_trained
from graphwm.store.executors import run_jobs, shared_pool, warm_pool
from graphwm.store.files import atomic_write_json, read_json, run_lock
from graphwm.store.outcomes import JobsFailed
from graphwm.store.paths import RunPaths
from graphwm.store.records import Record, TrainRecord
from graphwm.store.results import ResultStore, parts_of

if TYPE_CHECKING:
    from graphwm.report.build import ReportPaths

__all__ = [
    "PRESET_NAMES",
    "Preset",
    "PresetError",
    "RunPaths",
    "curve_jobs",
    "data_refs",
    "evaluation_jobs",
    "executor_args",
    "fit_job",
    "load_preset",
    "preset_dict",
    "reproduce",
    "reproduce_report",
    "stage_collect",
    "stage_curve",
    "stage_downstream",
    "stage_evaluate",
    "stage_fit",
    "stage_train",
    "test_sizes",
    "training_jobs",
]

#: what the public entries take: a checked preset as it is, anything else parsed once
PresetLike = Preset | Mapping[str, Any] | str | Path


def load_preset(
    name_or_path: str | Path, overrides: Mapping[str, Any] | None = None
) -> CheckedPreset:
    """The preset by name (``smoke``, ``paper``, ``tiny``) or TOML file, parsed and checked
    once, as the CLI does: pass it to every function here as it is. ``overrides`` replace
    keys (``"train.precision"`` style keys set nested ones; ``None`` values are skipped); a
    ``"models"`` override narrows the file's models as ``--models`` does (the
    ``train.model_overrides`` of those it leaves out stay checked). Raises
    :class:`PresetError` naming a bad key."""
    return parse_checked(read_preset(name_or_path), overrides)


def _preset(preset: PresetLike) -> CheckedPreset:
    """The parsed, checked preset (a :class:`CheckedPreset` passes as it is: the CLI and the
    entries below parse theirs once), and this machine's device."""
    if isinstance(preset, str | Path):
        preset = read_preset(preset)
    p = parse_checked(preset)
    check_device(p.device)
    return p


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _entry(
    body: Callable[Concatenate[CheckedPreset, _P], _R],
) -> Callable[Concatenate[PresetLike, _P], _R]:
    """A public entry whose first argument is a preset: a :class:`CheckedPreset` (what the
    CLI gives) is passed on as it is; a name, a TOML path, a dict or an unchecked
    :class:`Preset` is parsed and checked here, once; this machine's device is checked either
    way. The body takes the checked preset and checks nothing again."""

    @functools.wraps(body)
    def entry(preset: PresetLike, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return body(_preset(preset), *args, **kwargs)

    return entry


@_entry
def test_sizes(preset: CheckedPreset, env: str) -> tuple[int, ...]:
    """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
    return preset.test_sizes(env)


# ---------------------------------------------------------------------------------------------
# Jobs of a preset (pure: no work, no I/O): graphwm.jobs on the checked preset
# ---------------------------------------------------------------------------------------------
@_entry
def executor_args(preset: CheckedPreset, gpu: bool = False) -> dict:
    """Executor keyword arguments of :func:`graphwm.store.executors.run_jobs` for a preset."""
    return jobs.executor_args(preset, gpu)


@_entry
def data_refs(preset: CheckedPreset, env: str) -> dict[str, list[DataRef]]:
    """Every collected file of an env, per split (test: test sizes + the multi-step size)."""
    return jobs.data_refs(preset, env)


@_entry
def fit_job(preset: CheckedPreset, env: str) -> FitJob:
    """The bandwidth/scaler fit of an env."""
    return jobs.fit_job(preset, env)


@_entry
def training_jobs(preset: CheckedPreset) -> list[TrainJob]:
    """Every (env, model, seed) training job, ablations included; with ``train.ensemble``
    = K > 1 the seeds are keyed as members of ensembles of <= K (preset order, chunked)."""
    return jobs.training_jobs(preset)


@_entry
def evaluation_jobs(preset: CheckedPreset) -> list[EvalJob]:
    """Self-GDD, single-step (models and ablations) and multi-step jobs of a preset."""
    return jobs.evaluation_jobs(preset)


@_entry
def curve_jobs(preset: CheckedPreset) -> list[EvalJob]:
    """The GDD curve's jobs (:func:`graphwm.jobs.curve_jobs`); none when ``train.eval_every``
    is 0."""
    return jobs.curve_jobs(preset)


# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------
def _update_run_record(paths: RunPaths, **entries: Any) -> None:
    """Merge ``entries`` into ``run.json`` (rebuilt from scratch if unreadable)."""
    current: dict[str, Any] = {}
    if paths.run_record.exists():
        try:
            loaded = read_json(paths.run_record)
            current = loaded if isinstance(loaded, dict) else {}
        except Exception:  # run.json is derived: a corrupt one is simply rewritten
            current = {}
    current.update(entries)
    atomic_write_json(paths.run_record, current)


class _Failed:
    """The failed jobs of one command: a stage goes on with the records of the jobs that
    finished, the jobs that need a failed one's output are left out, and the command raises
    :class:`JobsFailed` naming them all at its end (after the report, for ``reproduce``)."""

    def __init__(self) -> None:
        self.errors: list[JobsFailed] = []

    def run(self, call: Any) -> list:
        """``call()``'s records; on :class:`JobsFailed` those of the jobs that finished."""
        try:
            return call()
        except JobsFailed as err:
            self.errors.append(err)
            return [r for r in err.records if r is not None]

    @property
    def keys(self) -> set[str]:
        return {job.key for err in self.errors for _, job, _ in err.failures}

    def needed(self, job: Any) -> bool:
        """Whether ``job`` can run: the training job it reads did not fail."""
        train = getattr(job, "train", None)
        key = train.key if train is not None else getattr(job, "train_key", None)
        return key is None or key not in self.keys

    def entries(self) -> list[dict[str, Any]]:
        """``run.json``'s ``failed``: each failed job with its cause."""
        return [
            {
                "key": job.key,
                "kind": job.kind,
                "env": getattr(job, "env", None),
                "model": getattr(job, "model", None),
                "seed": getattr(job, "seed", None),
                "cause": failure.cause,
            }
            for err in self.errors
            for _, job, failure in err.failures
        ]

    def finish(self, paths: RunPaths) -> None:
        """Record the failures in ``run.json`` and raise them (nothing when none)."""
        _update_run_record(paths, failed=self.entries())
        if self.errors:
            merged = self.errors[0]
            for err in self.errors[1:]:
                merged = merged.merged(err)
            raise merged


@_entry
def stage_collect(preset: CheckedPreset, paths: RunPaths, progress: bool = True) -> list[DataRef]:
    """Stage 1: random-policy rollouts for every env and split."""
    with run_lock(paths):
        return _collect(preset, paths, progress)


@_entry
def stage_fit(preset: CheckedPreset, paths: RunPaths) -> dict[str, Path]:
    """Stage 2: bandwidths and feature scaling per env; returns env -> fit folder."""
    with run_lock(paths):
        return _fit(preset, paths)


@_entry
def stage_train(preset: CheckedPreset, paths: RunPaths, progress: bool = True) -> list[TrainRecord]:
    """Stage 3: train every model (and ablation) on every env and seed (collecting and
    fitting what is not there yet first)."""
    return _stages(preset, paths, progress)


@_entry
def stage_evaluate(preset: CheckedPreset, paths: RunPaths, progress: bool = True) -> list[Record]:
    """Stages 4-7: self-GDD, single-step GDD (models and ablations), multi-step GDD.

    Trains whatever is not trained yet first (finished training jobs are skipped).
    """
    return _stages(preset, paths, progress, _evaluate)


@_entry
def stage_curve(preset: CheckedPreset, paths: RunPaths, progress: bool = True) -> list[Record]:
    """The GDD curve (``train.eval_every``): single-step GDD of every checkpoint the training
    jobs kept, stored in ``results/`` like every evaluation and listed in ``run.json``'s
    ``curve`` (empty when the curve is off). Trains whatever is not trained yet first."""
    return _stages(preset, paths, progress, _curve, train=bool(jobs.curve_jobs(preset)))


@_entry
def stage_downstream(preset: CheckedPreset, paths: RunPaths, progress: bool = True) -> list[Record]:
    """Stage 8 (``[downstream]``): MaskablePPO (the graph policy unless the section says
    ``policy = "mlp"``) on parallel episodes of each trained model's dream env, evaluated
    in the real env, next to the real-env agent and the yardsticks (docs/dream.md).

    Trains whatever is not trained yet first; a preset without the section records none.
    """
    train = _downstream_section(preset) is not None
    return _stages(preset, paths, progress, _downstream, train=train)


@_entry
def run_training_jobs(
    preset: CheckedPreset, paths: RunPaths, train: list[TrainJob], desc: str, progress: bool = True
) -> list[TrainRecord]:
    """Run training jobs in the run's job store (shared by ``stage_train`` and the search),
    re-verifying every stored result's checkpoint (and log) before it is reused.

    The members of an ensemble run as one unit (:func:`graphwm.stages.ensemble.training_units`);
    the records come back in the order of ``train``.
    """
    return _run_training(preset, paths, train, desc, progress)


# The stages' bodies: a checked preset, the run lock held by the caller; each runs its own
# stage only (the public stage_* functions and reproduce decide what runs first).
_Body = Callable[[CheckedPreset, RunPaths, bool, "_Failed"], list]


def _stages(
    p: CheckedPreset, paths: RunPaths, progress: bool, then: _Body | None = None, train: bool = True
) -> list:
    """Under the run lock and one worker pool for every stage: collect, fit and train (with
    ``train``), then ``then``; its records (else the training's), the failed jobs raised at
    the end."""
    with run_lock(paths), shared_pool():
        _warm(p)
        failed = _Failed()
        records: list = _train(p, paths, progress, failed) if train else []
        if then is not None:
            records = then(p, paths, progress, failed)
        failed.finish(paths)
        return records


#: what a local pool worker imports as it starts (the jobs' modules and their lazy imports:
#: torch.optim's first step imports torch._dynamo), beside the driver's checks and collect
WARM_MODULES = ("graphwm.pipeline", "torch._dynamo", "gdd_metric", "graphwm.metric.factor_metrics")
#: and, with a [downstream] section, the agents' libraries
WARM_DOWNSTREAM = ("graphwm.downstream.runs", "stable_baselines3", "sb3_contrib")


def _warm(p: CheckedPreset) -> None:
    """Start the local worker pool now, its workers importing :data:`WARM_MODULES`."""
    if p.executor == "local":
        warm_pool(jobs.workers(p), WARM_MODULES + (WARM_DOWNSTREAM if p.downstream else ()))


def _collect(p: CheckedPreset, paths: RunPaths, progress: bool) -> list[DataRef]:
    paths.check_logs()
    refs = [ref for env in p.envs for split in jobs.data_refs(p, env).values() for ref in split]
    return collect(paths, refs, progress=progress)


def _fit(p: CheckedPreset, paths: RunPaths) -> dict[str, Path]:
    return run_fits(paths, [jobs.fit_job(p, env) for env in p.envs])


def _eval_cost(job: EvalJob) -> float:
    """An evaluation's relative run time (its pairwise terms: size^2 x horizon)."""
    return float(job.size) ** 2 * job.horizon


def _run_units(
    paths: RunPaths,
    units: Sequence[TrainJob | EnsembleJob],
    desc: str,
    progress: bool,
    executor: Mapping[str, Any],
) -> list[TrainRecord]:
    """The records of ``units``' parts (an ensemble's members), in their order."""
    return run_jobs(
        train_unit,
        units,
        ResultStore(paths.jobs),
        paths,
        desc=desc,
        progress=progress,
        verify=lambda record, job: verify_trained(paths.root, record, job),
        **executor,
    )


def _run_training(
    p: CheckedPreset, paths: RunPaths, train: list[TrainJob], desc: str, progress: bool
) -> list[TrainRecord]:
    # jobs made elsewhere (the search): regrouped into units, records back in their order
    units = training_units(train)
    records = _run_units(paths, units, desc, progress, jobs.train_executor_args(p))
    parts = [part for unit in units for part in parts_of(unit)]
    by_key = dict(zip([part.key for part in parts], records, strict=True))
    return [by_key[job.key] for job in train]


def _train(p: CheckedPreset, paths: RunPaths, progress: bool, failed: _Failed) -> list[TrainRecord]:
    """Collect, fit and train (each reuses what is stored): the preset's plan, derived once."""
    return _run_plan(jobs.train_plan(p), paths, progress, failed)


def _run_plan(
    plan: jobs.TrainPlan, paths: RunPaths, progress: bool, failed: _Failed
) -> list[TrainRecord]:
    """Run a training plan; ``run.json`` lists the training jobs that finished (a failed one
    is in its ``failed``) with the preset's name and the report's env labels."""
    from graphwm.store.versions import code_record

    units = plan.units
    train = [job for unit in units for job in unit_members(unit)]
    if plan.tensorboard:  # before any work
        check_tensorboard(paths.root, units, plan.downstream)
    paths.check_logs()
    collect(paths, list(plan.data), progress=progress)
    run_fits(paths, plan.fits)
    _update_run_record(paths, code=code_record())
    records = failed.run(lambda: _run_units(paths, units, "train", progress, plan.executor))
    if plan.tensorboard:  # jobs trained earlier without it: their curves from their log.csv
        write_from_logs(paths.root, units, [j.key for j in train if j.key not in failed.keys])
    _update_run_record(
        paths,
        **plan.run_record,
        train=[
            {"env": j.env, "model": j.model, "seed": j.seed, "key": j.key, "dir": j.reldir}
            for j in train
            if j.key not in failed.keys
        ],
    )
    return records


def _evaluate(p: CheckedPreset, paths: RunPaths, progress: bool, failed: _Failed) -> list[Record]:
    evaluation = [j for j in jobs.evaluation_jobs(p) if failed.needed(j)]
    store = ResultStore(paths.results)
    records: list[Record] = []
    for fn, kind in (
        (self_gdd_job, "self_gdd"),
        (single_step_job, "single_step"),
        (multi_step_job, "multi_step"),
    ):
        batch = [j for j in evaluation if j.kind == kind]
        if batch:
            records += failed.run(
                lambda fn=fn, batch=batch: run_jobs(
                    fn, batch, store, paths, desc=fn.__name__, progress=progress,
                    cost=_eval_cost, **jobs.executor_args(p),
                )
            )  # fmt: skip
    done = [j for j in evaluation if j.key not in failed.keys]
    _update_run_record(
        paths, results=sorted(f"results/{j.key}.json" for j in done), evaluated=p.name
    )
    return records


def _curve(p: CheckedPreset, paths: RunPaths, progress: bool, failed: _Failed) -> list[Record]:
    curve = [j for j in jobs.curve_jobs(p) if failed.needed(j)]
    records: list[Record] = []
    if curve:
        records = failed.run(
            lambda: run_jobs(
                curve_job, curve, ResultStore(paths.results), paths, desc="curve",
                progress=progress, **jobs.executor_args(p),
            )
        )  # fmt: skip
    done = [j for j in curve if j.key not in failed.keys]
    _update_run_record(paths, curve=sorted(f"results/{j.key}.json" for j in done))
    return records


def _downstream_section(p: Preset) -> DownstreamConfig | None:
    """The ``[downstream]`` section checked against the preset's envs and models (here, not
    with the preset: ``--models`` and ``--envs`` may leave out what it names, which only
    the stages that read it refuse)."""
    section = p.downstream
    if section is not None:
        try:
            section.check(p.envs, p.models_of)
        except ValueError as err:
            raise PresetError(str(err)) from None
    return section


def _downstream(p: CheckedPreset, paths: RunPaths, progress: bool, failed: _Failed) -> list[Record]:
    from graphwm.downstream.jobs import downstream_jobs, run_downstream_job
    from graphwm.downstream.record import STORE_DIR

    section = _downstream_section(p)
    if section is None:
        _update_run_record(paths, downstream=[])
        return []
    agents = downstream_jobs(
        section, p.envs, jobs.training_jobs(p), device=p.device, tensorboard=p.train.tensorboard
    )
    agents = [j for j in agents if failed.needed(j)]
    records = failed.run(
        lambda: run_jobs(
            run_downstream_job, agents, ResultStore(paths.root / STORE_DIR), paths,
            desc="downstream", progress=progress, **jobs.executor_args(p),
        )
    )  # fmt: skip
    done = [j for j in agents if j.key not in failed.keys]
    _update_run_record(paths, downstream=sorted(f"{STORE_DIR}/{j.key}.json" for j in done))
    return records


def reproduce(
    preset: PresetLike,
    out: Path,
    progress: bool = True,
    redo_corrupt: bool = False,
    retry_failed: bool = False,
) -> Path:
    """Run every stage of ``preset`` into ``out``; returns the report directory.

    The preset is validated before any work starts.
    """
    return reproduce_report(preset, out, progress, redo_corrupt, retry_failed).report_dir


class RunFailed(JobsFailed):
    """:class:`JobsFailed` of ``reproduce``: every other job ran and the report was built
    (``report``) over the seeds that finished, the missing ones marked."""

    def __init__(self, err: JobsFailed, report: ReportPaths | None) -> None:
        super().__init__(err.failures, err.records)
        self.report = report


@_entry
def reproduce_report(
    preset: CheckedPreset,
    out: Path,
    progress: bool = True,
    redo_corrupt: bool = False,
    retry_failed: bool = False,
) -> ReportPaths:
    """:func:`reproduce`, returning what the report wrote (what ``graphwm reproduce``
    prints): each stage runs once, training first, and the report is built once.

    Raises:
        RunFailed: some jobs failed; all others ran, and the report (built over the seeds
            that finished, the missing ones marked) is the exception's ``report``.
    """
    from graphwm.report.build import build_report

    _downstream_section(preset)  # a bad [downstream] section fails before any work
    if not str(out).strip():
        raise PresetError("the run directory (--out) must be a non-empty path")
    paths = RunPaths(Path(out), redo_corrupt=redo_corrupt, retry_failed=retry_failed)
    with run_lock(paths), shared_pool():  # one worker pool for every stage
        _warm(preset)
        failed = _Failed()
        _train(preset, paths, progress, failed)
        _evaluate(preset, paths, progress, failed)
        _curve(preset, paths, progress, failed)
        _downstream(preset, paths, progress, failed)
        try:
            failed.finish(paths)
        except JobsFailed as err:
            report = None
            with contextlib.suppress(FileNotFoundError):  # nothing finished: no report
                report = build_report(paths.root)
            raise RunFailed(err, report) from None
        return build_report(paths.root)
