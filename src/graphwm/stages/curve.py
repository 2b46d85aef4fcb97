"""The GDD curve: single-step GDD of the checkpoints kept during training (``train.eval_every``).

With ``train.eval_every = k`` every training job keeps the model checkpoint of every k-th step
(``ckpt/step_<6 digits>/``, beside ``ckpt/final/``; the members of an ensemble each keep
their own) and :func:`curve_jobs` makes one stored evaluation job per kept checkpoint and
training job: kind ``curve``, on the smallest test size of the env, on the first
``evaluate.curve_episodes`` test episodes (the same subset at every step, chosen by position,
so the same at every rerun), with the final evaluation's ``num_samples`` and
``reference_transitions`` and no permutation test. The last point is the final checkpoint.

A curve job is scored by :func:`~graphwm.stages.evaluate.single_step_job` itself (the one code
path of the final evaluation); its record is a :class:`~graphwm.store.records.CurveRecord`,
the single-step record's GDD, components and per-episode GDDs plus the step. The jobs are
content-keyed like every evaluation (the key holds the training job's key and the step), so a
rerun recomputes nothing stored.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from graphwm.stages.collect import DataRef
from graphwm.stages.evaluate import EvalJob, single_step_job
from graphwm.stages.fit import FitJob
from graphwm.stages.train import TrainJob
from graphwm.store.records import CurveRecord

__all__ = ["curve_job", "curve_jobs_of"]


def curve_jobs_of(
    train: TrainJob,
    data: DataRef,
    fit: FitJob,
    *,
    num_samples: int,
    reference_transitions: int,
    episodes: int,
    device: str = "cpu",
    threads: int = 1,
) -> list[EvalJob]:
    """One ``curve`` job per checkpoint ``train`` keeps (:meth:`TrainJob.kept_steps`), in step
    order, each on the first ``episodes`` episodes of ``data``."""
    return [
        EvalJob(
            "curve",
            train.env,
            data.num_nodes,
            train.seed,
            data,
            fit,
            num_samples,
            reference_transitions,
            episodes,
            train=train,
            step=step,
            device=device,
            threads=threads,
        )
        for step in train.kept_steps()
    ]


def curve_job(job: EvalJob, run_dir: str | Path) -> CurveRecord:
    """One point of the GDD curve: :func:`single_step_job` of the checkpoint of ``job.step``."""
    if job.kind != "curve" or job.step is None or job.train is None:
        raise ValueError(
            f"a curve job needs kind 'curve', a step and a training job, got kind {job.kind!r}, "
            f"step {job.step!r}"
        )
    scored = single_step_job(job, run_dir)
    # the single-step record's fields that a curve point keeps, plus its step
    kept = {f.name: getattr(scored, f.name) for f in fields(CurveRecord) if hasattr(scored, f.name)}
    return CurveRecord(**{**kept, "kind": "curve", "step": job.step})
