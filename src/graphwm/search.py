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

from graphwm.evaluate import single_step_job
from graphwm.executors import run_jobs
from graphwm.jobs import ResultStore, atomic_write_json, job_key
from graphwm.pipeline import (
    RunPaths,
    eval_config_base,
    executor_args,
    stage_collect,
    stage_fit,
    train_config,
)
from graphwm.train import train_job

TRAINER_KEYS = {"lr", "batch_size", "seq_len"}


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


def run_search(preset: dict, paths: RunPaths, progress: bool = True) -> dict[str, Any]:
    """Train and validate every grid point; return ``{"<env>/<model>": best point}``."""
    search = preset.get("search", {})
    grids = search.get("grid", {})
    if not grids:
        raise ValueError("the preset has no [search.grid.<model>] tables")
    stage_collect(preset, paths, progress)
    stage_fit(preset, paths)
    val_sizes = search.get("val_sizes", preset["collect"]["val_sizes"])
    train_cfgs, owners = [], []
    for env in preset["envs"]:
        for model, grid in grids.items():
            for point in grid_points(grid):
                for seed in preset["seeds"]:
                    cfg = train_config(preset, paths, env, model, seed)
                    cfg["model_overrides"] = {
                        **cfg["model_overrides"],
                        **{k: v for k, v in point.items() if k not in TRAINER_KEYS},
                    }
                    cfg["train_overrides"] = {
                        **cfg["train_overrides"],
                        **{k: v for k, v in point.items() if k in TRAINER_KEYS},
                    }
                    cfg["subdir"] = "search"
                    cfg["tag"] = job_key({"point": point})
                    train_cfgs.append(cfg)
                    owners.append((env, model, point))
    trained = run_jobs(
        train_job,
        train_cfgs,
        ResultStore(paths.jobs),
        paths.root,
        desc="search-train",
        progress=progress,
        **executor_args(preset, gpu=True),
    )
    eval_cfgs, eval_owner = [], []
    for (env, model, point), t in zip(owners, trained, strict=True):
        for size in val_sizes:
            cfg = eval_config_base(preset, paths, env, "evaluate")
            cfg.update(
                kind="validation",
                result_kind="validation",
                split="val",
                size=size,
                model=model,
                seed=t["seed"],
                checkpoint=t["checkpoint"],
                point=point,
            )
            eval_cfgs.append(cfg)
            eval_owner.append((env, model, job_key({"point": point}), point, t["seed"]))
    scores = run_jobs(
        single_step_job,
        eval_cfgs,
        ResultStore(paths.root / "search" / "results"),
        paths.root,
        desc="search-eval",
        progress=progress,
        **executor_args(preset),
    )
    table: dict[tuple, dict[int, list[float]]] = {}
    points: dict[tuple, dict] = {}
    for (env, model, tag, point, seed), result in zip(eval_owner, scores, strict=True):
        table.setdefault((env, model, tag), {}).setdefault(seed, []).append(result["gdd"])
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
