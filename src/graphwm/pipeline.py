"""The whole experiment as stages; ``reproduce`` runs them all from one preset.

Stages (each also a CLI subcommand): collect -> fit -> train -> evaluate (single-step, self-GDD,
ablations, multi-step) -> report. Each stage's output is content-addressed: its key hashes
everything that determines it, the keys of its inputs included (collected file -> fit ->
training job -> evaluation), and every stored path is relative to the run directory. Rerunning
a changed preset into the same directory computes what changed and reuses exactly what did not;
a moved run directory reuses everything. ``RUN_DIR/run.json`` names the training runs and
results of the last preset run (what the report reads). One process at a time works on a run
directory (:func:`graphwm.store.files.run_lock`); a killed training job resumes from its last
checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphwm.checks import CheckedPreset, check_machine, parse_checked
from graphwm.config import (
    PRESET_NAMES,
    Preset,
    PresetError,
    apply_overrides,
    read_preset,
)
from graphwm.stages.collect import DataRef, collect
from graphwm.stages.curve import curve_job, curve_jobs_of
from graphwm.stages.ensemble import ensemble_groups, member_jobs, train_unit, training_units
from graphwm.stages.evaluate import EvalJob, multi_step_job, self_gdd_job, single_step_job
from graphwm.stages.fit import FitJob, run_fit
from graphwm.stages.train import TrainJob, make_train_job, verify_trained
from graphwm.store.executors import default_workers, run_jobs
from graphwm.store.files import atomic_write_json, read_json, run_lock
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

PresetLike = Preset | Mapping[str, Any]


def load_preset(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> dict:
    """A validated preset dict by name (``smoke``, ``paper``, ``tiny``) or from a TOML file.

    ``overrides`` replace top-level keys (``"train.precision"`` style keys set nested ones;
    ``None`` values are skipped). Raises :class:`PresetError` naming a bad key.
    """
    raw = apply_overrides(read_preset(name_or_path), overrides)
    parse_checked(raw)
    return raw


def _preset(preset: PresetLike) -> CheckedPreset:
    """The parsed, checked preset (a :class:`CheckedPreset` passes as it is: the stages hand
    theirs down, so a command checks its preset once), and this machine's device."""
    p = parse_checked(preset)
    check_machine(p)
    return p


def _workers(preset: Preset) -> int:
    return preset.workers or default_workers()


def _threads(preset: Preset) -> int:
    return 1 if _workers(preset) > 1 else 2


def executor_args(preset: PresetLike, gpu: bool = False) -> dict:
    """Executor keyword arguments of :func:`graphwm.store.executors.run_jobs` for a preset."""
    preset = _preset(preset)
    return {
        "executor": preset.executor,
        "max_workers": _workers(preset),
        # any CUDA device string ("cuda", "cuda:1", ...) asks Ray for a GPU per job
        "num_gpus_per_job": 1.0 if gpu and preset.device.split(":")[0] == "cuda" else 0.0,
    }


def test_sizes(preset: PresetLike, env: str) -> tuple[int, ...]:
    """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
    return _preset(preset).test_sizes(env)


# ---------------------------------------------------------------------------------------------
# Jobs of a preset (pure: no work, no I/O)
# ---------------------------------------------------------------------------------------------
def data_refs(preset: PresetLike, env: str) -> dict[str, list[DataRef]]:
    """Every collected file of an env, per split (test: test sizes + the multi-step size)."""
    p = _preset(preset)
    c = p.collect
    test = set(p.test_sizes(env)) | ({p.multi_step.size} if p.multi_step else set())
    return {
        "train": [DataRef(env, "train", n, c.train_episodes, True) for n in c.train_sizes],
        "val": [DataRef(env, "val", n, c.val_episodes, True) for n in c.val_sizes],
        "test": [DataRef(env, "test", n, c.test_episodes, False) for n in sorted(test)],
    }


def fit_job(preset: PresetLike, env: str) -> FitJob:
    """The bandwidth/scaler fit of an env."""
    p = _preset(preset)
    return FitJob(
        env=env,
        train_data=tuple(data_refs(p, env)["train"]),
        transitions_per_episode=p.fit.transitions_per_episode,
        seed=p.fit.seed,
    )


def train_job_for(
    preset: PresetLike,
    env: str,
    model: str,
    seed: int,
    model_overrides: Mapping[str, Any] | None = None,
    train_overrides: Mapping[str, Any] | None = None,
) -> TrainJob:
    """The training job of (env, model, seed); extra overrides on top of the preset's."""
    p = _preset(preset)
    t = p.train
    base = model.split(":", 1)[0]
    return make_train_job(
        env,
        model,
        seed,
        fit_job(p, env),
        steps=t.steps,
        epochs=t.epochs,
        model_overrides={**t.model_overrides.get(base, {}), **(model_overrides or {})},
        train_overrides={**t.train_overrides, **(train_overrides or {})},
        device=p.device,
        precision=t.precision,
        compile=t.compile,
        checkpoint_every=t.checkpoint_every,
        log_every=t.log_every,
        tensorboard=t.tensorboard,
        threads=_threads(p),
    )


def training_jobs(preset: PresetLike) -> list[TrainJob]:
    """Every (env, model, seed) training job, ablations included; with ``train.ensemble``
    = K > 1 the seeds are keyed as members of ensembles of <= K (preset order, chunked)."""
    p = _preset(preset)
    groups = ensemble_groups(p.seeds, p.train.ensemble)
    keep = p.train.eval_every or None  # the GDD curve's checkpoints (keyed only when kept)
    return [
        member
        for env in p.envs
        for model in p.models_of(env)
        for group in groups
        for member in member_jobs(
            dataclasses.replace(train_job_for(p, env, model, group[0]), keep_every=keep), group
        )
    ]


def _test_ref(preset: Preset, env: str, size: int) -> DataRef:
    return DataRef(env, "test", size, preset.collect.test_episodes, False)


def evaluation_jobs(preset: PresetLike) -> list[EvalJob]:
    """Self-GDD, single-step (models and ablations) and multi-step jobs of a preset."""
    p = _preset(preset)
    e, threads = p.evaluate, _threads(p)
    jobs: list[EvalJob] = []
    for env in p.envs:
        fit = fit_job(p, env)
        for size in p.test_sizes(env):
            for seed in p.seeds:
                jobs.append(
                    EvalJob(
                        "self_gdd",
                        env,
                        size,
                        seed,
                        _test_ref(p, env, size),
                        fit,
                        e.num_samples,
                        e.reference_transitions,
                        e.max_episodes,
                        threads=threads,
                    )
                )
    for train in training_jobs(p):
        fit = train.fit
        for size in p.test_sizes(train.env):
            jobs.append(
                EvalJob(
                    "single_step",
                    train.env,
                    size,
                    train.seed,
                    _test_ref(p, train.env, size),
                    fit,
                    e.num_samples,
                    e.reference_transitions,
                    e.max_episodes,
                    train=train,
                    permutations=e.permutations,
                    alpha=e.alpha,
                    device=p.device,
                    threads=threads,
                )
            )
        m = p.multi_step
        if m is not None and train.model in p.models:
            jobs.append(
                EvalJob(
                    "multi_step",
                    train.env,
                    m.size,
                    train.seed,
                    _test_ref(p, train.env, m.size),
                    fit,
                    m.num_samples,
                    m.reference_transitions,
                    m.max_episodes,
                    horizon=m.horizon,
                    train=train,
                    device=p.device,
                    threads=threads,
                )
            )
    return jobs


def curve_jobs(preset: PresetLike) -> list[EvalJob]:
    """The GDD curve's jobs (:mod:`graphwm.stages.curve`): one per checkpoint kept by each
    training job, on the env's smallest test size and the first ``evaluate.curve_episodes``
    test episodes; none when ``train.eval_every`` is 0."""
    p = _preset(preset)
    if not p.train.eval_every:
        return []
    e = p.evaluate
    jobs: list[EvalJob] = []
    for train in training_jobs(p):
        sizes = p.test_sizes(train.env)
        if sizes:  # (RGC sizes all above collect.rgc_max_test_size: no evaluation at all)
            jobs += curve_jobs_of(
                train,
                _test_ref(p, train.env, min(sizes)),
                train.fit,
                num_samples=e.num_samples,
                reference_transitions=e.reference_transitions,
                episodes=e.curve_episodes,
                device=p.device,
                threads=_threads(p),
            )
    return jobs


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


def stage_collect(preset: PresetLike, paths: RunPaths, progress: bool = True) -> list[DataRef]:
    """Stage 1: random-policy rollouts for every env and split."""
    p = _preset(preset)
    refs = [ref for env in p.envs for split in data_refs(p, env).values() for ref in split]
    with run_lock(paths):
        paths.check_logs()
        return collect(paths, refs, progress=progress)


def stage_fit(preset: PresetLike, paths: RunPaths) -> dict[str, Path]:
    """Stage 2: bandwidths and feature scaling per env; returns env -> fit folder."""
    p = _preset(preset)
    with run_lock(paths):
        return {env: run_fit(paths, fit_job(p, env)) for env in p.envs}


def run_training_jobs(
    preset: PresetLike, paths: RunPaths, jobs: list[TrainJob], desc: str, progress: bool = True
) -> list[TrainRecord]:
    """Run training jobs in the run's job store (shared by ``stage_train`` and the search),
    re-verifying every stored result's checkpoint (and log) before it is reused.

    The members of an ensemble run as one unit (:func:`graphwm.stages.ensemble.training_units`);
    the records come back in the order of ``jobs``.
    """
    units = training_units(jobs)
    records = run_jobs(
        train_unit,
        units,
        ResultStore(paths.jobs),
        paths,
        desc=desc,
        progress=progress,
        verify=lambda record, job: verify_trained(paths.root, record, job),
        **executor_args(preset, gpu=True),
    )
    parts = [part for unit in units for part in parts_of(unit)]
    by_key = dict(zip([part.key for part in parts], records, strict=True))
    return [by_key[job.key] for job in jobs]


def stage_train(preset: PresetLike, paths: RunPaths, progress: bool = True) -> list[TrainRecord]:
    """Stage 3: train every model (and ablation) on every env and seed."""
    p = _preset(preset)
    jobs = training_jobs(p)
    with run_lock(paths):
        stage_collect(p, paths, progress)
        stage_fit(p, paths)
        records = run_training_jobs(p, paths, jobs, desc="train", progress=progress)
        _update_run_record(
            paths,
            preset=p.name,
            train=[
                {"env": j.env, "model": j.model, "seed": j.seed, "key": j.key, "dir": j.reldir}
                for j in jobs
            ],
        )
    return records


def stage_evaluate(preset: PresetLike, paths: RunPaths, progress: bool = True) -> list[Record]:
    """Stages 4-7: self-GDD, single-step GDD (models and ablations), multi-step GDD.

    Trains whatever is not trained yet first (finished training jobs are skipped).
    """
    p = _preset(preset)
    with run_lock(paths):
        stage_train(p, paths, progress)
        return _evaluate_trained(p, paths, progress)


def _evaluate_trained(p: CheckedPreset, paths: RunPaths, progress: bool) -> list[Record]:
    """:func:`stage_evaluate` once training is done (the caller holds the run lock)."""
    jobs = evaluation_jobs(p)
    store = ResultStore(paths.results)
    records: list[Record] = []
    for fn, kind in (
        (self_gdd_job, "self_gdd"),
        (single_step_job, "single_step"),
        (multi_step_job, "multi_step"),
    ):
        batch = [j for j in jobs if j.kind == kind]
        if batch:
            records += run_jobs(
                fn,
                batch,
                store,
                paths,
                desc=fn.__name__,
                progress=progress,
                **executor_args(p),
            )
    _update_run_record(
        paths, results=sorted(f"results/{j.key}.json" for j in jobs), evaluated=p.name
    )
    return records


def stage_curve(preset: PresetLike, paths: RunPaths, progress: bool = True) -> list[Record]:
    """The GDD curve (``train.eval_every``): single-step GDD of every checkpoint the training
    jobs kept, stored in ``results/`` like every evaluation and listed in ``run.json``'s
    ``curve`` (empty when the curve is off). Trains whatever is not trained yet first."""
    p = _preset(preset)
    with run_lock(paths):
        if curve_jobs(p):
            stage_train(p, paths, progress)
        return _curve_trained(p, paths, progress)


def _curve_trained(p: CheckedPreset, paths: RunPaths, progress: bool) -> list[Record]:
    """:func:`stage_curve` once training is done (the caller holds the run lock)."""
    jobs = curve_jobs(p)
    records: list[Record] = []
    if jobs:
        records = run_jobs(
            curve_job,
            jobs,
            ResultStore(paths.results),
            paths,
            desc="curve",
            progress=progress,
            **executor_args(p),
        )
    _update_run_record(paths, curve=sorted(f"results/{j.key}.json" for j in jobs))
    return records


def _downstream_section(p: Preset):
    """The ``[downstream]`` section checked against the preset's envs and models."""
    section = p.downstream
    if section is not None:
        try:
            section.check(p.envs, p.models_of)
        except ValueError as err:
            raise PresetError(str(err)) from None
    return section


def stage_downstream(preset: PresetLike, paths: RunPaths, progress: bool = True) -> list[Record]:
    """Stage 8 (``[downstream]``): MaskablePPO (the graph policy unless the section says
    ``policy = "mlp"``) on parallel episodes of each trained model's dream env, evaluated
    in the real env, next to the real-env agent and the yardsticks (docs/dream.md).

    Trains whatever is not trained yet first; a preset without the section records none.
    """
    p = _preset(preset)
    with run_lock(paths):
        if _downstream_section(p) is not None:
            stage_train(p, paths, progress)
        return _downstream_trained(p, paths, progress)


def _downstream_trained(p: CheckedPreset, paths: RunPaths, progress: bool) -> list[Record]:
    """:func:`stage_downstream` once training is done (the caller holds the run lock)."""
    from graphwm.downstream.jobs import downstream_jobs, run_downstream_job
    from graphwm.downstream.record import STORE_DIR

    section = _downstream_section(p)
    if section is None:
        _update_run_record(paths, downstream=[])
        return []
    # the agents' networks are small: one thread each is fastest
    jobs = downstream_jobs(
        section, p.envs, training_jobs(p), device=p.device, tensorboard=p.train.tensorboard
    )
    records = run_jobs(
        run_downstream_job,
        jobs,
        ResultStore(paths.root / STORE_DIR),
        paths,
        desc="downstream",
        progress=progress,
        **executor_args(p),
    )
    _update_run_record(paths, downstream=sorted(f"{STORE_DIR}/{j.key}.json" for j in jobs))
    return records


def reproduce(
    preset: PresetLike, out: Path, progress: bool = True, redo_corrupt: bool = False
) -> Path:
    """Run every stage of ``preset`` into ``out``; returns the report directory.

    The preset is validated before any work starts.
    """
    return reproduce_report(preset, out, progress, redo_corrupt).report_dir


def reproduce_report(
    preset: PresetLike, out: Path, progress: bool = True, redo_corrupt: bool = False
) -> ReportPaths:
    """:func:`reproduce`, returning what the report wrote (what ``graphwm reproduce``
    prints): each stage runs once, training first, and the report is built once."""
    from graphwm.report.build import build_report

    p = _preset(preset)
    _downstream_section(p)  # a bad [downstream] section fails before any work
    if not str(out).strip():
        raise PresetError("the run directory (--out) must be a non-empty path")
    paths = RunPaths(Path(out), redo_corrupt=redo_corrupt)
    with run_lock(paths):
        paths.check_logs()
        stage_train(p, paths, progress)
        _evaluate_trained(p, paths, progress)
        _curve_trained(p, paths, progress)
        _downstream_trained(p, paths, progress)
        return build_report(paths.root)
