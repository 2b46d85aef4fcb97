"""Stage 2: fit the GDD bandwidths and the models' feature scaling on the training data.

Bandwidths (paper appendix "Bandwidth Fitting"): 8 transitions per training episode, chosen
uniformly without replacement with a seeded generator. A transition's pair is the metric graph
before and after it; the metric graph of the first observation of an episode carries reward 0
and continuation 1 (no transition has happened yet), every later one the reward and continuation
of the transition that produced it.

Feature scaling (appendix "Feature Scaling"): :meth:`gdm_models.FeatureScaler.fit` on all
stored observations and rewards of the training episodes.

The outputs of a :class:`FitJob` live in ``RUN_DIR/fit/<ENV>/<key>/`` (``bandwidths.json``,
``scaler.json``, ``schema.json``, and ``record.json`` with their SHA-256, written last).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphwm.envs import env_schema
from graphwm.metric.graph import OBS_KEYS, extend_schema, metric_graph
from graphwm.stages.collect import DataRef, load_episodes
from graphwm.store.files import (
    MAX_JSON_BYTES,
    CorruptFileError,
    atomic_write_json,
    atomic_write_text,
    content_key,
    read_json,
    regular_file,
    sha256_file,
)
from graphwm.store.paths import safe_name
from graphwm.store.results import log_event

FIT_FILES = ("bandwidths.json", "scaler.json", "schema.json")


@dataclass(frozen=True)
class FitJob:
    """Bandwidths and scaling of one env, fitted on the training files ``train_data``."""

    env: str
    train_data: tuple[DataRef, ...]
    transitions_per_episode: int
    seed: int = 0

    kind = "fit"

    def describe(self) -> dict:
        return {
            "env": self.env,
            "train_data": sorted(d.key for d in self.train_data),
            "transitions_per_episode": self.transitions_per_episode,
            "seed": self.seed,
        }

    @property
    def key(self) -> str:
        return content_key("fit", self.describe())

    @property
    def scaler_key(self) -> str:
        """Key of the feature scaling alone (it depends on the training data only), so a
        training job is reused when only the bandwidth settings change."""
        return content_key("scaler", sorted(d.key for d in self.train_data))

    @property
    def reldir(self) -> str:
        return f"fit/{safe_name(self.env)}/{self.key.split('-', 1)[1]}"

    def dir(self, run_dir: Path) -> Path:
        return Path(run_dir) / self.reldir


def training_episodes(run_dir: Path, refs: tuple[DataRef, ...]) -> list[dict[str, np.ndarray]]:
    """Every episode of the training files ``refs``, files in the order of their legacy names
    (``train_n10`` < ``train_n8``), which fixes the bandwidth draws and the sampler order."""
    episodes = []
    for ref in sorted(refs, key=lambda r: f"{r.split}_n{r.num_nodes}.npz"):
        episodes.extend(load_episodes(ref.path(run_dir))[0])
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


def verify_fit(run_dir: Path, job: FitJob) -> bool:
    """Whether ``job``'s outputs are present and intact (``False``: not fitted yet).

    Raises:
        CorruptFileError: the record is unreadable or a file differs from its SHA-256.
    """
    out = job.dir(run_dir)
    record_path = out / "record.json"
    if not record_path.exists():
        return False
    record = read_json(record_path)
    if not isinstance(record, dict) or record.get("key") != job.key:
        raise CorruptFileError(record_path, "not the record of this fit")
    for name in FIT_FILES:
        path = out / name
        if not path.exists() or sha256_file(path) != record.get("sha256", {}).get(name):
            raise CorruptFileError(path, "missing or its SHA-256 differs from record.json")
    return True


def fit_env(run_dir: Path, job: FitJob) -> Path:
    """Fit and save ``bandwidths.json`` and ``scaler.json`` of ``job``; returns the folder."""
    from gdd_metric import fit_bandwidths
    from gdm_models import FeatureScaler

    # the job's own values first, then the env's schema, then the metric, then the files
    out, record = job.dir(run_dir), {"key": job.key, "job": job.describe()}
    episodes = training_episodes(run_dir, job.train_data)
    rng = np.random.default_rng(job.seed)
    pairs = bandwidth_transitions(episodes, job.transitions_per_episode, rng)
    schema = env_schema(job.env)
    bandwidths = fit_bandwidths(pairs, extend_schema(schema))
    scaler = FeatureScaler.fit(episodes, schema)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "bandwidths.json", bandwidths.to_json() + "\n")
    atomic_write_json(out / "scaler.json", scaler.to_dict())
    atomic_write_json(out / "schema.json", schema)
    record["sha256"] = {name: sha256_file(out / name) for name in FIT_FILES}
    atomic_write_json(out / "record.json", record)
    return out


def run_fit(paths, job: FitJob) -> Path:
    """Fit ``job`` unless it is already fitted and intact (corruption: see ``RunPaths``)."""
    try:
        done = verify_fit(paths.root, job)
    except CorruptFileError as err:
        paths.recover(err, job.dir(paths.root))
        done = False
    if not done:
        started = time.time()
        fit_env(paths.root, job)
        log_event(paths.root, "fit", job.key, job.env, None, started, "done")
    return job.dir(paths.root)


def run_fits(paths, jobs: Iterable[FitJob]) -> dict[str, Path]:
    """``{env: fit folder}``: :func:`run_fit` of each job (one per env), in their order."""
    out = {}
    for job in jobs:
        out[job.env] = run_fit(paths, job)
    return out


def load_fitted(out_dir: Path):
    """``(bandwidths, scaler)`` saved by :func:`fit_env` in ``out_dir``."""
    from gdd_metric import Bandwidths
    from gdm_models import FeatureScaler

    out_dir = Path(out_dir)
    try:
        # parsed here, never handed to from_json: a string there would be read as a path
        for name in ("bandwidths.json", "scaler.json"):
            if (out_dir / name).exists():
                regular_file(out_dir / name, MAX_JSON_BYTES)  # a FIFO would block the read
        raw = json.loads((out_dir / "bandwidths.json").read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"bandwidths.json holds a JSON {type(raw).__name__}, not an object")
        bandwidths = Bandwidths.from_dict(raw)
        scaler = FeatureScaler.from_dict(json.loads((out_dir / "scaler.json").read_text()))
    except FileNotFoundError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise CorruptFileError(out_dir, f"fitted bandwidths/scaler unreadable ({err})") from None
    return bandwidths, scaler


__all__ = [
    "FitJob",
    "bandwidth_transitions",
    "fit_env",
    "load_fitted",
    "run_fit",
    "run_fits",
    "training_episodes",
    "verify_fit",
]
