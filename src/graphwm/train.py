"""Stage 3: train one model on one env's training data (a job keyed by its full config).

Training is resumable: checkpoints go to a directory derived from the job key, so rerunning a
job killed midway continues from its last checkpoint (the trainer restores model, optimiser,
sampler and RNG states) and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphwm.envs import env_schema
from graphwm.fit import load_fitted, training_episodes
from graphwm.jobs import job_key


def model_dir_name(model: str) -> str:
    """File-system name of a model (``gdm:no-h-plus`` -> ``gdm__no-h-plus``)."""
    return model.replace(":", "__")


def train_dir(config: Mapping[str, Any]) -> Path:
    """Where a training job keeps its log and checkpoints."""
    base = Path(config["run_dir"]) / config.get("subdir", "train") / config["env"]
    path = base / model_dir_name(config["model"])
    if config.get("tag"):
        path = path / config["tag"]
    return path / f"seed{config['seed']}"


def build_model(config: Mapping[str, Any]):
    """The model of a training config: the paper's preset plus the config's overrides."""
    import torch
    from gdm_models import get_preset, make_model

    _, scaler = load_fitted(Path(config["fit_dir"]))
    preset = get_preset(config["model"], config["env"])
    overrides = {**preset["model"], **config.get("model_overrides", {})}
    torch.manual_seed(int(config["seed"]))
    return make_model(config["model"], env_schema(config["env"]), scaler, **overrides), preset


def train_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """Train ``config["model"]`` on ``config["env"]``; returns the checkpoint path and losses."""
    import torch
    from gdm_models import EpisodeDataset, train

    torch.set_num_threads(max(1, int(config.get("threads", 1))))
    model, preset = build_model(config)
    train_args = {**preset["train"], **config.get("train_overrides", {})}
    seq_len = int(train_args.get("seq_len", 20))
    dataset = EpisodeDataset(
        training_episodes(Path(config["data_dir"]), config["env"]),
        env_schema(config["env"]),
        seq_len=seq_len,
    )
    out = train_dir(config)
    length = (
        {"steps": int(config["steps"])} if "steps" in config else {"epochs": int(config["epochs"])}
    )
    result = train(
        model,
        dataset,
        **length,
        batch_size=int(train_args.get("batch_size", 8)),
        seq_len=seq_len,
        lr=float(train_args["lr"]),
        seed=int(config["seed"]),
        device=config.get("device", "cpu"),
        log_csv=out / "log.csv",
        checkpoint_dir=out / "ckpt",
        checkpoint_every=int(config.get("checkpoint_every", 50)),
        resume=True,
        progress=bool(config.get("progress", False)),
    )
    return {
        "kind": "train",
        "env": config["env"],
        "model": config["model"],
        "seed": config["seed"],
        "checkpoint": str(out / "ckpt" / "final"),
        "steps": result.steps,
        "resumed_from": result.resumed_from,
        "last_terms": result.last_terms,
        "job": job_key(config),
    }
