"""Stage 3 with ``train.ensemble = K``: the seeds of one configuration trained together.

The training jobs of one (env, model, configuration) that differ only in seed are grouped, in
the preset's seed order, into ensembles of at most K members (:func:`ensemble_groups`); a
group of one seed is an ordinary single job. Each member stays a :class:`TrainJob` (its key
holds the ensemble's seeds and strategy, so changing K trains anew instead of reusing), with
its own folder, ``log.csv``, ``ckpt/final`` and record exactly as a single job's: evaluation,
dream envs and the report read members like single runs.

An :class:`EnsembleJob` is one unit of work for the executors that yields one record per
member (:func:`graphwm.store.results.parts_of`). Its folder
``RUN_DIR/train/<ENV>/<model>/ensemble-<digest>/`` holds the ensemble's ``latest/`` (every
member's trainer state at one step), so a killed ensemble resumes every member from that step
and ends with the weights of an uninterrupted run. That ``latest/`` recovers as a single
job's (:func:`graphwm.store.checkpoints.recover_latest`): a corrupt one is quarantined and the
ensemble resumes from ``.latest_old`` or restarts; one that is not this ensemble's (other seeds,
extra members, members at different steps) is refused with a ``CheckpointError`` naming it.
A member whose loss goes non-finite fails alone: the others' records are stored, then its
:class:`FloatingPointError` is raised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphwm.envs import env_schema
from graphwm.stages.fit import load_fitted, training_episodes
from graphwm.stages.train import (
    TENSORBOARD_DIRNAME,
    TrainJob,
    job_reldir,
    train_job,
    train_record,
    verify_resumable_ensemble,
)
from graphwm.store.checkpoints import recover_latest
from graphwm.store.files import content_key
from graphwm.store.records import TrainRecord

__all__ = [
    "EnsembleJob",
    "ensemble_groups",
    "train_ensemble_job",
    "train_unit",
    "training_units",
    "unit_members",
]


def ensemble_groups(seeds: Sequence[int], k: int) -> list[tuple[int, ...]]:
    """The seeds in their order, chunked into groups of at most ``k`` (``k >= 1``)."""
    if k < 1:
        raise ValueError(f"an ensemble needs k >= 1 members, got {k}")
    seeds = tuple(int(s) for s in seeds)
    return [seeds[i : i + k] for i in range(0, len(seeds), k)]


def member_jobs(job: TrainJob, group: tuple[int, ...]) -> list[TrainJob]:
    """``job`` for every seed of ``group``, each keyed as a member of that ensemble (a group
    of one seed: the single job itself)."""
    if len(group) == 1:
        return [dataclasses.replace(job.with_config(seed=group[0]), ensemble=())]
    return [dataclasses.replace(job.with_config(seed=s), ensemble=tuple(group)) for s in group]


def seed_units(job: TrainJob, seeds: Sequence[int], k: int) -> list[TrainJob | EnsembleJob]:
    """``job`` over ``seeds``: the seeds in groups of at most ``k`` (:func:`ensemble_groups`),
    a group of one seed its single job, a larger one an :class:`EnsembleJob` of its members."""
    units: list[TrainJob | EnsembleJob] = []
    for group in ensemble_groups(seeds, k):
        members = member_jobs(job, group)
        units.append(members[0] if len(members) == 1 else EnsembleJob(tuple(members)))
    return units


@dataclass(frozen=True)
class EnsembleJob:
    """The members of one ensemble trained as one unit (``parts``: one record each)."""

    members: tuple[TrainJob, ...]

    kind = "train_ensemble"

    def __post_init__(self) -> None:
        seeds = tuple(m.seed for m in self.members)
        if len(seeds) < 2 or any(m.ensemble != seeds for m in self.members):
            raise ValueError(f"ensemble members must list their seeds {seeds} as their group")
        first = self.members[0].with_config(seed=0)
        if any(m.with_config(seed=0) != first for m in self.members[1:]):
            raise ValueError("ensemble members must differ only in their seed")

    @property
    def parts(self) -> tuple[TrainJob, ...]:
        return self.members

    @property
    def env(self) -> str:
        return self.members[0].env

    @property
    def model(self) -> str:
        return self.members[0].model

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(m.seed for m in self.members)

    def describe(self) -> dict[str, Any]:
        return {"members": [m.key for m in self.members]}

    @property
    def key(self) -> str:
        return content_key("train_ensemble", self.describe())

    @property
    def reldir(self) -> str:
        return job_reldir(self.env, self.model, "ensemble", self.key)

    def dir(self, run_dir: Path) -> Path:
        return Path(run_dir) / self.reldir


def unit_members(unit: TrainJob | EnsembleJob) -> tuple[TrainJob, ...]:
    """The training jobs of a unit: an ensemble's members, or the single job itself."""
    return unit.members if isinstance(unit, EnsembleJob) else (unit,)


def training_units(jobs: Iterable[TrainJob]) -> list[TrainJob | EnsembleJob]:
    """The units of work of ``jobs``, in order: a single job as itself, the members of an
    ensemble as one :class:`EnsembleJob` (with every member of the group, named or not)."""
    units: dict[str, TrainJob | EnsembleJob] = {}
    for job in jobs:
        if job.ensemble:
            unit: TrainJob | EnsembleJob = EnsembleJob(tuple(member_jobs(job, job.ensemble)))
        else:
            unit = job
        units.setdefault(unit.key, unit)
    return list(units.values())


def train_ensemble_job(unit: EnsembleJob, run_dir: str) -> list[TrainRecord | BaseException]:
    """Train the members of ``unit`` together; one record (or failure) per member."""
    import torch
    from gdm_models import EpisodeDataset, train_ensemble

    root = Path(run_dir)
    job = unit.members[0]
    torch.set_num_threads(job.threads)
    _, scaler = load_fitted(job.fit.dir(root))
    dataset = EpisodeDataset(
        training_episodes(root, job.fit.train_data), env_schema(job.env),
        seq_len=job.config.seq_len,
    )  # fmt: skip
    recover_latest(root, unit.dir(root), verify_resumable_ensemble)  # as a single job's
    result = train_ensemble(
        job.model,
        unit.seeds,
        dataset,
        job.config,
        scaler=scaler,
        model_config=dict(job.model_config),
        out_dir=unit.dir(root),
        member_logs=[m.dir(root) / "log.csv" for m in unit.members],
        # one TensorBoard run per member: <ensemble folder>/tensorboard/seed<s>/
        tensorboard_dir=unit.dir(root) / TENSORBOARD_DIRNAME if job.tensorboard else None,
        member_finals=[m.checkpoint(root) for m in unit.members],
        resume=True,
        progress=False,
    )
    out: list[TrainRecord | BaseException] = []
    for member, res in zip(unit.members, result.members, strict=True):
        out.append(res.error if res.error is not None else train_record(member, res, root))
    return out


def train_unit(unit: TrainJob | EnsembleJob, run_dir: str) -> Any:
    """The job function of :func:`training_units`' units (for the executors)."""
    if isinstance(unit, EnsembleJob):
        return train_ensemble_job(unit, run_dir)
    return train_job(unit, run_dir)
