"""Stage 2: fit the GDD bandwidths and the models' feature scaling on the training data.

Bandwidths (paper appendix "Bandwidth Fitting"): 8 transitions per training episode, chosen
uniformly without replacement with a seeded generator. A transition's pair is the metric graph
before and after it; the metric graph of the first observation of an episode carries reward 0
and continuation 1 (no transition has happened yet), every later one the reward and continuation
of the transition that produced it.

Feature scaling (appendix "Feature Scaling"): :meth:`gdm_models.FeatureScaler.fit` on all
stored observations and rewards of the training episodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from graphwm.collect import load_episodes
from graphwm.envs import env_schema
from graphwm.jobs import atomic_write_json
from graphwm.metric_graph import OBS_KEYS, extend_schema, metric_graph


def training_episodes(data_dir: Path, env_name: str) -> list[dict[str, np.ndarray]]:
    """Every training episode of an env (all training sizes)."""
    files = sorted((Path(data_dir) / env_name).glob("train_n*.npz"))
    if not files:
        raise FileNotFoundError(f"no training data for {env_name} under {data_dir}; run collect")
    episodes = []
    for path in files:
        episodes.extend(load_episodes(path)[0])
    return episodes


def _episode_metric_graph(episode: dict, t: int) -> dict:
    obs = {k: episode[k][t] for k in OBS_KEYS}
    if t == 0:
        return metric_graph(obs, 0.0, False)
    return metric_graph(obs, float(episode["reward"][t - 1]), bool(episode["terminated"][t - 1]))


def bandwidth_transitions(
    episodes: list[dict], per_episode: int, rng: np.random.Generator
) -> list[tuple[dict, dict]]:
    """``per_episode`` (metric graph before, metric graph after) pairs per episode."""
    pairs = []
    for episode in episodes:
        length = len(episode["reward"])
        chosen = rng.choice(length, size=min(per_episode, length), replace=False)
        for t in np.sort(chosen):
            pairs.append((_episode_metric_graph(episode, t), _episode_metric_graph(episode, t + 1)))
    return pairs


def fit_env(
    data_dir: Path, env_name: str, out_dir: Path, per_episode: int = 8, seed: int = 0
) -> dict[str, Path]:
    """Fit and save ``bandwidths.json`` and ``scaler.json`` for one env (skips if present)."""
    from gdd_metric import fit_bandwidths
    from gdm_models import FeatureScaler

    out_dir = Path(out_dir)
    paths = {"bandwidths": out_dir / "bandwidths.json", "scaler": out_dir / "scaler.json"}
    if all(p.exists() for p in paths.values()):
        return paths
    schema = env_schema(env_name)
    episodes = training_episodes(data_dir, env_name)
    rng = np.random.default_rng(seed)
    bandwidths = fit_bandwidths(
        bandwidth_transitions(episodes, per_episode, rng), extend_schema(schema)
    )
    scaler = FeatureScaler.fit(episodes, schema)
    out_dir.mkdir(parents=True, exist_ok=True)
    bandwidths.to_json(paths["bandwidths"])
    atomic_write_json(paths["scaler"], scaler.to_dict())
    atomic_write_json(out_dir / "schema.json", schema)
    return paths


def load_fitted(out_dir: Path):
    """``(bandwidths, scaler)`` saved by :func:`fit_env`."""
    from gdd_metric import Bandwidths
    from gdm_models import FeatureScaler

    out_dir = Path(out_dir)
    bandwidths = Bandwidths.from_json(out_dir / "bandwidths.json")
    scaler = FeatureScaler.from_dict(json.loads((out_dir / "scaler.json").read_text()))
    return bandwidths, scaler
