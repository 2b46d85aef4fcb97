"""The whole experiment as stages; ``reproduce`` runs them all from one preset.

Stages (each also a CLI subcommand): collect -> fit -> train -> evaluate (single-step, self-GDD,
ablations, multi-step) -> report. Every job is keyed by its full config and stored under
``RUN_DIR/results`` (evaluation) or ``RUN_DIR/jobs`` (training), so rerunning skips finished
work and a killed job resumes from its last checkpoint.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from graphwm.collect import SplitSpec, collect
from graphwm.evaluate import multi_step_job, self_gdd_job, single_step_job
from graphwm.executors import default_workers, run_jobs
from graphwm.fit import fit_env
from graphwm.jobs import ResultStore
from graphwm.train import train_job

PRESET_NAMES = ("smoke", "paper", "tiny")


def load_preset(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> dict:
    """A preset by name (``smoke``, ``paper``, ``tiny``) or from a TOML file path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        preset = tomllib.loads(path.read_text())
    elif str(name_or_path) in PRESET_NAMES:
        text = resources.files("graphwm.presets").joinpath(f"{name_or_path}.toml").read_text()
        preset = tomllib.loads(text)
    else:
        raise ValueError(f"unknown preset {name_or_path!r}: give one of {PRESET_NAMES} or a .toml")
    preset = copy.deepcopy(preset)
    for key, value in (overrides or {}).items():
        if value is not None:
            preset[key] = value
    return preset


@dataclass(frozen=True)
class RunPaths:
    """Directory layout of a run."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def data(self) -> Path:
        return self.root / "data"

    def fit(self, env: str) -> Path:
        return self.root / "fit" / env

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"


def _workers(preset: dict) -> int:
    return int(preset.get("workers", 0)) or default_workers()


def executor_args(preset: dict, gpu: bool = False) -> dict:
    return {
        "executor": preset.get("executor", "local"),
        "max_workers": _workers(preset),
        "num_gpus_per_job": 1.0 if gpu and preset.get("device", "cpu") == "cuda" else 0.0,
    }


def test_sizes(preset: dict, env: str) -> list[int]:
    """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
    sizes = preset["collect"]["test_sizes"]
    if env == "RGC":
        sizes = [n for n in sizes if n <= preset["collect"].get("rgc_max_test_size", 200)]
    return sizes


def stage_collect(preset: dict, paths: RunPaths, progress: bool = True) -> None:
    """Stage 1: random-policy rollouts for every env and split."""
    c = preset["collect"]
    multi = preset.get("multi_step", {}).get("size")
    for env in preset["envs"]:
        sizes = sorted(set(test_sizes(preset, env)) | ({multi} if multi else set()))
        specs = [
            SplitSpec("train", tuple(c["train_sizes"]), c["train_episodes"], True),
            SplitSpec("val", tuple(c["val_sizes"]), c["val_episodes"], True),
            SplitSpec("test", tuple(sizes), c["test_episodes"], False),
        ]
        collect(paths.data, [env], specs, progress=progress)


def stage_fit(preset: dict, paths: RunPaths) -> None:
    """Stage 2: bandwidths and feature scaling per env."""
    per_episode = int(preset.get("fit", {}).get("transitions_per_episode", 8))
    for env in preset["envs"]:
        fit_env(paths.data, env, paths.fit(env), per_episode=per_episode)


def train_config(preset: dict, paths: RunPaths, env: str, model: str, seed: int) -> dict:
    t = preset["train"]
    base = model.split(":", 1)[0]
    config = {
        "kind": "train",
        "env": env,
        "model": model,
        "seed": seed,
        "run_dir": str(paths.root),
        "data_dir": str(paths.data),
        "fit_dir": str(paths.fit(env)),
        "device": preset.get("device", "cpu"),
        "checkpoint_every": int(t.get("checkpoint_every", 1000)),
        "model_overrides": dict(t.get("model_overrides", {}).get(base, {})),
        "train_overrides": dict(t.get("train_overrides", {})),
        "threads": 1 if _workers(preset) > 1 else 2,
    }
    if "steps" in t:
        config["steps"] = int(t["steps"])
    else:
        config["epochs"] = int(t["epochs"])
    return config


def training_configs(preset: dict, paths: RunPaths) -> list[dict]:
    """Every (env, model, seed) training job, ablations included."""
    configs = []
    for env in preset["envs"]:
        models = list(preset["models"])
        if env in preset.get("ablation_envs", preset["envs"]):
            models += [a for a in preset.get("ablations", []) if a not in models]
        for model in models:
            for seed in preset["seeds"]:
                configs.append(train_config(preset, paths, env, model, seed))
    return configs


def stage_train(preset: dict, paths: RunPaths, progress: bool = True) -> list[dict]:
    """Stage 3: train every model (and ablation) on every env and seed."""
    return run_jobs(
        train_job,
        training_configs(preset, paths),
        ResultStore(paths.jobs),
        paths.root,
        desc="train",
        progress=progress,
        **executor_args(preset, gpu=True),
    )


def eval_config_base(preset: dict, paths: RunPaths, env: str, section: str) -> dict:
    e = preset[section]
    config = {
        "env": env,
        "data_dir": str(paths.data),
        "fit_dir": str(paths.fit(env)),
        "num_samples": int(e["num_samples"]),
        "reference_transitions": int(e["reference_transitions"]),
        "device": preset.get("device", "cpu"),
        "threads": 1 if _workers(preset) > 1 else 2,
    }
    if e.get("max_episodes") is not None:
        config["max_episodes"] = int(e["max_episodes"])
    return config


def stage_evaluate(preset: dict, paths: RunPaths, trained: list[dict], progress: bool = True):
    """Stages 4-7: self-GDD, single-step GDD (models and ablations), multi-step GDD."""
    store = ResultStore(paths.results)
    jobs: list[tuple[Any, dict]] = []
    for env in preset["envs"]:
        for size in test_sizes(preset, env):
            for seed in preset["seeds"]:
                cfg = eval_config_base(preset, paths, env, "evaluate")
                jobs.append((self_gdd_job, {**cfg, "kind": "self_gdd", "size": size, "seed": seed}))
    for t in trained:
        env = t["env"]
        for size in test_sizes(preset, env):
            cfg = eval_config_base(preset, paths, env, "evaluate")
            jobs.append(
                (
                    single_step_job,
                    {
                        **cfg,
                        "kind": "single_step",
                        "size": size,
                        "model": t["model"],
                        "seed": t["seed"],
                        "checkpoint": t["checkpoint"],
                    },
                )
            )
        if "multi_step" in preset and t["model"] in preset["models"]:
            m = preset["multi_step"]
            cfg = eval_config_base(preset, paths, env, "multi_step")
            jobs.append(
                (
                    multi_step_job,
                    {
                        **cfg,
                        "kind": "multi_step",
                        "size": int(m["size"]),
                        "horizon": int(m["horizon"]),
                        "model": t["model"],
                        "seed": t["seed"],
                        "checkpoint": t["checkpoint"],
                    },
                )
            )
    results = []
    for fn in (self_gdd_job, single_step_job, multi_step_job):
        configs = [c for f, c in jobs if f is fn]
        if configs:
            results += run_jobs(
                fn,
                configs,
                store,
                paths.root,
                desc=fn.__name__,
                progress=progress,
                **executor_args(preset),
            )
    return results


def reproduce(preset: dict, out: Path, progress: bool = True) -> Path:
    """Run every stage of ``preset`` into ``out``; returns the report directory."""
    from graphwm.report import build_report

    paths = RunPaths(Path(out))
    paths.root.mkdir(parents=True, exist_ok=True)
    stage_collect(preset, paths, progress)
    stage_fit(preset, paths)
    trained = stage_train(preset, paths, progress)
    stage_evaluate(preset, paths, trained, progress)
    build_report(paths.root)
    return paths.root / "report"
