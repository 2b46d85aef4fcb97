"""Hyperparameter search (paper appendix "Hyperparameter Search").

A preset's ``[search.grid.<model>]`` table lists values per hyperparameter; the grid is their
cartesian product. A value that is a table (e.g. ``capacity``) sets several hyperparameters at
once. ``lr``, ``batch_size`` and ``seq_len`` go to the trainer, everything else to the model.
Every grid point is trained for every seed and scored by single-step GDD on the validation
split; the point with the lowest mean validation GDD (mean over sizes, then seeds) wins, as in
the paper. The choice is written to ``RUN_DIR/search/best.json``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from graphwm.checks import CheckedPreset, check_device, parse_checked
from graphwm.config import TRAINER_KEYS
from graphwm.jobs import executor_args, threads, train_job_for
from graphwm.pipeline import RunPaths, run_training_jobs, stage_collect, stage_fit
from graphwm.stages.collect import DataRef
from graphwm.stages.evaluate import EvalJob, single_step_job
from graphwm.store.executors import run_jobs
from graphwm.store.files import atomic_write_json, content_key, run_lock
from graphwm.store.results import ResultStore


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of a grid; table values are merged into the point."""
    keys = sorted(grid)
    points = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        point: dict[str, Any] = {}
        for key, value in zip(keys, combo, strict=True):
            if isinstance(value, dict):
                point.update(value)
            else:
                point[key] = value
        points.append(point)
    return points


def run_search(preset, paths: RunPaths, progress: bool = True) -> dict[str, Any]:
    """Train and validate every grid point; return ``{"<env>/<model>": best point}``."""
    p = parse_checked(preset)
    check_device(p.device)
    grids = p.search.grid if p.search is not None else {}
    if not grids:
        raise ValueError("the preset has no [search.grid.<model>] tables")
    with run_lock(paths):
        return _search(p, grids, paths, progress)


def _search(p: CheckedPreset, grids: dict, paths: RunPaths, progress: bool) -> dict[str, Any]:
    stage_collect(p, paths, progress)
    stage_fit(p, paths)
    val_sizes = (p.search.val_sizes if p.search else None) or p.collect.val_sizes
    jobs, owners = [], []
    for env in p.envs:
        for model, grid in grids.items():
            for point in grid_points(grid):
                tag = content_key("point", point)
                train_point = {k: v for k, v in point.items() if k in TRAINER_KEYS}
                model_point = {k: v for k, v in point.items() if k not in TRAINER_KEYS}
                for seed in p.seeds:
                    job = train_job_for(p, env, model, seed, model_point, train_point)
                    jobs.append(job)
                    owners.append((env, model, tag, point))
    trained = run_training_jobs(p, paths, jobs, desc="search-train", progress=progress)
    e = p.evaluate
    eval_jobs, eval_owner = [], []
    for (env, model, tag, point), job, record in zip(owners, jobs, trained, strict=True):
        for size in val_sizes:
            eval_jobs.append(
                EvalJob(
                    "validation",
                    env,
                    size,
                    record.seed,
                    DataRef(env, "val", size, p.collect.val_episodes, True),
                    job.fit,
                    e.num_samples,
                    e.reference_transitions,
                    e.max_episodes,
                    train=job,
                    device=p.device,
                    threads=threads(p),
                )
            )
            eval_owner.append((env, model, tag, point, record.seed))
    scores = run_jobs(
        single_step_job,
        eval_jobs,
        ResultStore(paths.root / "search" / "results"),
        paths,
        desc="search-eval",
        progress=progress,
        **executor_args(p),
    )
    table: dict[tuple, dict[int, list[float]]] = {}
    points: dict[tuple, dict] = {}
    for (env, model, tag, point, seed), result in zip(eval_owner, scores, strict=True):
        table.setdefault((env, model, tag), {}).setdefault(seed, []).append(result.gdd)
        points[(env, model, tag)] = point
    best: dict[str, Any] = {}
    summary = []
    for (env, model, tag), per_seed in table.items():
        score = float(np.mean([np.mean(v) for v in per_seed.values()]))
        summary.append(
            {"env": env, "model": model, "point": points[(env, model, tag)], "val_gdd": score}
        )
        key = f"{env}/{model}"
        if key not in best or score < best[key]["val_gdd"]:
            best[key] = {"point": points[(env, model, tag)], "val_gdd": score}
    atomic_write_json(Path(paths.root) / "search" / "best.json", best)
    atomic_write_json(Path(paths.root) / "search" / "all.json", summary)
    return best
