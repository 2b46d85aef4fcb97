"""The jobs of a checked preset: pure functions of a :class:`~graphwm.checks.CheckedPreset`
(no work, no I/O, no validation: the preset was checked once, at its entry point, by
:mod:`graphwm.pipeline` or the CLI, and is passed down as it is).

Each job is content-keyed (:mod:`graphwm.stages`): its key hashes everything that determines
it, the keys of its inputs included (collected file -> fit -> training job -> evaluation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gdm_models.training import TrainConfig

from graphwm.checks import CheckedPreset
from graphwm.stages.collect import DataRef
from graphwm.stages.curve import curve_jobs_of
from graphwm.stages.ensemble import EnsembleJob, seed_units, unit_members
from graphwm.stages.evaluate import EvalJob
from graphwm.stages.fit import FitJob
from graphwm.stages.train import TRAINER_FIELDS, TrainJob
from graphwm.store.executors import default_workers

__all__ = [
    "curve_jobs",
    "data_refs",
    "evaluation_jobs",
    "executor_args",
    "fit_job",
    "threads",
    "train_plan",
    "train_job_for",
    "training_jobs",
    "training_units",
    "workers",
]


def workers(preset: CheckedPreset) -> int:
    """Worker processes of the preset's local executor (0: one per core)."""
    return preset.workers or default_workers()


#: torch threads of every job, whatever the executor or the worker count: the thread count
#: changes a job's floating-point results (reductions split differently), and it is not part
#: of the job key, so it is one fixed number (docs/cluster.md). It is also the CPUs each job
#: asks Ray for (``num_cpus``), and the local pool runs one job per core.
JOB_THREADS = 1

#: the share of a GPU an evaluation or downstream job on CUDA asks Ray for (training asks for
#: a whole GPU): four such jobs share a GPU, each with its CUDA_VISIBLE_DEVICES set by Ray
EVAL_GPU_FRACTION = 0.25


def threads(preset: CheckedPreset) -> int:
    """Torch threads per job: :data:`JOB_THREADS`, whatever the layout (so the same job gives
    the same bytes with ``--workers 1``, ``--workers 2`` or on Ray)."""
    return JOB_THREADS


def executor_args(preset: CheckedPreset, gpu: bool = False) -> dict:
    """Executor keyword arguments of :func:`graphwm.store.executors.run_jobs` for a preset:
    on a CUDA device ("cuda", "cuda:1", ...) a training job (``gpu``) asks Ray for a GPU,
    an evaluation or downstream job for :data:`EVAL_GPU_FRACTION` of one."""
    cuda = preset.device.split(":")[0] == "cuda"
    return {
        "executor": preset.executor,
        "max_workers": workers(preset),
        "num_gpus_per_job": (1.0 if gpu else EVAL_GPU_FRACTION) if cuda else 0.0,
    }


def data_refs(preset: CheckedPreset, env: str) -> dict[str, list[DataRef]]:
    """Every collected file of an env, per split (test: test sizes + the multi-step size)."""
    c = preset.collect
    test = set(preset.test_sizes(env)) | ({preset.multi_step.size} if preset.multi_step else set())
    return {
        "train": [DataRef(env, "train", n, c.train_episodes, True) for n in c.train_sizes],
        "val": [DataRef(env, "val", n, c.val_episodes, True) for n in c.val_sizes],
        "test": [DataRef(env, "test", n, c.test_episodes, False) for n in sorted(test)],
    }


def fit_job(preset: CheckedPreset, env: str) -> FitJob:
    """The bandwidth/scaler fit of an env."""
    return FitJob(
        env=env,
        train_data=tuple(data_refs(preset, env)["train"]),
        transitions_per_episode=preset.fit.transitions_per_episode,
        seed=preset.fit.seed,
    )


def train_job_for(
    preset: CheckedPreset,
    env: str,
    model: str,
    seed: int,
    model_overrides: Mapping[str, Any] | None = None,
    train_overrides: Mapping[str, Any] | None = None,
) -> TrainJob:
    """The training job of (env, model, seed): the model's hyperparameters (the paper's
    preset, else the defaults of an untuned env) under the preset's overrides and the extra
    ``model_overrides`` / ``train_overrides`` on top, and every other
    :class:`~gdm_models.training.TrainConfig` field from the preset's ``[train]``."""
    from graphwm.envs import resolved_configs

    t = preset.train
    base = model.split(":", 1)[0]
    model_config, trainer = resolved_configs(
        model,
        env,
        {**t.model_overrides.get(base, {}), **(model_overrides or {})},
        {**t.train_overrides, **(train_overrides or {})},
    )
    unknown = sorted(set(trainer) - {*TRAINER_FIELDS, "grad_clip"})
    if unknown:
        raise ValueError(
            f"{model} on {env}: the preset's 'train' table has keys {unknown}; a training "
            f"preset sets {[*TRAINER_FIELDS, 'grad_clip']} (gdm_models.training.TrainConfig)"
        )
    config = TrainConfig(
        seed=seed, **trainer, steps=t.steps, epochs=t.epochs, device=preset.device,
        precision=t.precision, compile=t.compile, checkpoint_every=t.checkpoint_every,
        log_every=t.log_every, ensemble=t.ensemble, threads=threads(preset),
    )  # fmt: skip
    return TrainJob(
        env=env,
        model=model,
        fit=fit_job(preset, env),
        model_config=tuple(sorted(model_config.items())),
        config=config,
        tensorboard=t.tensorboard,
    )


def training_units(preset: CheckedPreset) -> list[TrainJob | EnsembleJob]:
    """The units of training work in one pass from the preset: per (env, model or ablation),
    the seeds in preset order in groups of at most ``train.ensemble`` = K
    (:func:`~graphwm.stages.ensemble.ensemble_groups`); a group of one seed is its single
    :class:`TrainJob`, a larger one an :class:`EnsembleJob` of its members (each keyed as a
    member of that ensemble)."""
    keep = preset.train.eval_every or None  # the GDD curve's checkpoints (keyed only when kept)
    units: list[TrainJob | EnsembleJob] = []
    for env in preset.envs:
        for model in preset.models_of(env):
            job = train_job_for(preset, env, model, preset.seeds[0]).with_config(keep_every=keep)
            units += seed_units(job, preset.seeds, preset.train.ensemble)  # each seed keyed
    return units


def training_jobs(preset: CheckedPreset) -> list[TrainJob]:
    """Every (env, model, seed) training job, ablations included, in the order of
    :func:`training_units` (an ensemble's members in its seeds' order)."""
    return [job for unit in training_units(preset) for job in unit_members(unit)]


def _test_ref(preset: CheckedPreset, env: str, size: int) -> DataRef:
    return DataRef(env, "test", size, preset.collect.test_episodes, False)


def evaluation_jobs(preset: CheckedPreset) -> list[EvalJob]:
    """Self-GDD, single-step (models and ablations) and multi-step jobs of a preset."""
    e, n_threads = preset.evaluate, threads(preset)
    jobs: list[EvalJob] = []
    for env in preset.envs:
        fit = fit_job(preset, env)
        for size in preset.test_sizes(env):
            for seed in preset.seeds:
                jobs.append(
                    EvalJob(
                        "self_gdd",
                        env,
                        size,
                        seed,
                        _test_ref(preset, env, size),
                        fit,
                        e.num_samples,
                        e.reference_transitions,
                        e.max_episodes,
                        threads=n_threads,
                    )
                )
    for train in training_jobs(preset):
        fit = train.fit
        for size in preset.eval_sizes(train.env, train.model):
            jobs.append(
                EvalJob(
                    "single_step",
                    train.env,
                    size,
                    train.seed,
                    _test_ref(preset, train.env, size),
                    fit,
                    e.num_samples,
                    e.reference_transitions,
                    e.max_episodes,
                    train=train,
                    permutations=e.permutations,
                    alpha=e.alpha,
                    device=preset.device,
                    threads=n_threads,
                )
            )
        m = preset.multi_step
        if m is not None and train.model in preset.models:
            jobs.append(
                EvalJob(
                    "multi_step",
                    train.env,
                    m.size,
                    train.seed,
                    _test_ref(preset, train.env, m.size),
                    fit,
                    m.num_samples,
                    m.reference_transitions,
                    m.max_episodes,
                    horizon=m.horizon,
                    train=train,
                    device=preset.device,
                    threads=n_threads,
                )
            )
    return jobs


def curve_jobs(preset: CheckedPreset) -> list[EvalJob]:
    """The GDD curve's jobs (:mod:`graphwm.stages.curve`): one per checkpoint kept by each
    training job, on the env's smallest test size and the first ``evaluate.curve_episodes``
    test episodes; none when ``train.eval_every`` is 0."""
    if not preset.train.eval_every:
        return []
    e = preset.evaluate
    jobs: list[EvalJob] = []
    for train in training_jobs(preset):
        sizes = preset.test_sizes(train.env)
        if sizes:  # (RGC sizes all above collect.rgc_max_test_size: no evaluation at all)
            jobs += curve_jobs_of(
                train,
                _test_ref(preset, train.env, min(sizes)),
                train.fit,
                num_samples=e.num_samples,
                reference_transitions=e.reference_transitions,
                episodes=e.curve_episodes,
                device=preset.device,
                threads=threads(preset),
            )
    return jobs


@dataclass(frozen=True)
class TrainPlan:
    """What training a preset takes, derived from it up front: the files to collect, the fits,
    the units of training work, the executor settings of :func:`executor_args`, and what
    ``run.json`` names. The stage runs it without the preset."""

    data: tuple[DataRef, ...]
    fits: tuple[FitJob, ...]
    units: tuple[TrainJob | EnsembleJob, ...]
    executor: Mapping[str, Any]
    tensorboard: bool  # event files from every training job (``train.tensorboard``)
    downstream: bool  # the preset has a [downstream] stage (its agents' event folder)
    run_record: Mapping[str, Any]  # the preset's name and the report's env labels


def train_cost(unit: TrainJob | EnsembleJob) -> float:
    """A training unit's relative run time, for the executor's longest-first start: its
    members x steps x the estimated bytes of one step (the memory check's estimate, from the
    job's own resolved hyperparameters and training files)."""
    from graphwm.work_bounds import step_peak

    members = unit_members(unit)
    job, c = members[0], members[0].config
    files = job.fit.train_data
    peak, _ = step_peak(
        job.model, job.env, dict(job.model_config),
        batch=min(c.batch_size, sum(f.episodes for f in files)), seq_len=c.seq_len,
        nodes=max(f.num_nodes for f in files), members=len(members), device=c.device or "cpu",
    )  # fmt: skip
    return float(peak or 0) * (c.steps or 1) * len(members)


def train_executor_args(preset: CheckedPreset) -> dict[str, Any]:
    """:func:`executor_args` of the training stage, with its longest-first cost."""
    return {**executor_args(preset, gpu=True), "cost": train_cost}


def train_plan(preset: CheckedPreset) -> TrainPlan:
    """The :class:`TrainPlan` of a checked preset (pure: no I/O)."""
    return TrainPlan(
        executor=train_executor_args(preset),
        data=tuple(r for env in preset.envs for s in data_refs(preset, env).values() for r in s),
        fits=tuple(fit_job(preset, env) for env in preset.envs),
        units=tuple(training_units(preset)),
        tensorboard=preset.train.tensorboard,
        downstream=preset.downstream is not None,
        run_record={"preset": preset.name, "env_labels": dict(preset.env_labels)},
    )
