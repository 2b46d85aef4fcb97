"""Stage 1: random-policy rollouts, stored as one compressed npz per env, split and size.

On-disk format (``DATA_DIR/<ENV>/<split>_n<N>.npz``, loaded with ``allow_pickle=False``):

* ``seeds`` (E,) int64: the reset seed of each episode (the policy RNG is derived from it);
* ``lengths`` (E,) int64: transitions per episode T_e;
* ``actions`` (sum T_e, k) int64: raw env actions (for exact replay from the seed);
* ``action_nodes`` (sum T_e, N) int8, ``reward`` (sum T_e,) float32,
  ``terminated`` / ``truncated`` (sum T_e,) bool;
* with observations stored: the six observation keys concatenated over episodes, each
  episode contributing T_e + 1 rows (``adjacency`` (sum (T_e + 1), N, N) int8, ...).

Test splits store no observations (they reach 1000 nodes): the evaluation replays each episode
from its seed and actions, which reproduces it exactly. ``DATA_DIR/manifest.json`` records the
seeds, sizes, episode counts and package versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from gdm_models.data import complete_observation
from tqdm.auto import tqdm

from graphwm.envs import make_env
from graphwm.metric_graph import OBS_KEYS

SPLIT_SEED_BASE = {"train": 0, "val": 100_000_000, "test": 200_000_000}
SEEDS_PER_SIZE = 10_000


def episode_seed(split: str, num_nodes: int, index: int) -> int:
    """Disjoint, recorded seed ranges per split and size (docs/architecture.md, contract 7)."""
    if split not in SPLIT_SEED_BASE:
        raise ValueError(f"unknown split {split!r}")
    if not 0 <= index < SEEDS_PER_SIZE:
        raise ValueError(f"episode index {index} outside [0, {SEEDS_PER_SIZE})")
    if not 0 < num_nodes < 10_000:
        raise ValueError(f"num_nodes {num_nodes} outside the seed scheme's range")
    return SPLIT_SEED_BASE[split] + num_nodes * SEEDS_PER_SIZE + index


@dataclass(frozen=True)
class SplitSpec:
    """Which episodes one split holds."""

    split: str
    sizes: tuple[int, ...]
    episodes_per_size: int
    store_observations: bool


def record_episode(
    env_name: str, num_nodes: int, seed: int, *, store_observations: bool = True
) -> dict[str, np.ndarray]:
    """One random-policy episode (uniform over valid actions) as an episode dict."""
    env = make_env(env_name, num_nodes)
    policy_rng = np.random.default_rng([seed, 1])
    obs, _ = env.reset(seed=seed)
    frames = [complete_observation(obs)] if store_observations else []
    actions, nodes, rewards, terms, truncs = [], [], [], [], []
    done = False
    while not done:
        action = env.sample_valid_action(policy_rng)
        nodes.append(env.action_to_nodes(action))
        obs, reward, terminated, truncated, _ = env.step(action)
        actions.append(np.atleast_1d(np.asarray(action, dtype=np.int64)))
        rewards.append(reward)
        terms.append(terminated)
        truncs.append(truncated)
        if store_observations:
            frames.append(complete_observation(obs))  # absent feature keys -> zero-width
        done = terminated or truncated
    episode = {
        "actions": np.stack(actions),
        "action_nodes": np.stack(nodes).astype(np.int8),
        "reward": np.asarray(rewards, dtype=np.float32),
        "terminated": np.asarray(terms, dtype=bool),
        "truncated": np.asarray(truncs, dtype=bool),
    }
    if store_observations:
        for key in OBS_KEYS:
            episode[key] = np.stack([f[key] for f in frames])
    return episode


def save_episodes(path: Path, episodes: list[dict], seeds: Iterable[int]) -> None:
    """Write episodes to one compressed npz (format in the module docstring)."""
    arrays = {
        "seeds": np.asarray(list(seeds), dtype=np.int64),
        "lengths": np.asarray([len(e["reward"]) for e in episodes], dtype=np.int64),
    }
    for key in episodes[0]:
        arrays[key] = np.concatenate([e[key] for e in episodes])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def load_episodes(path: Path) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """Read an npz written by :func:`save_episodes`; returns ``(episodes, seeds)``."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    lengths = arrays.pop("lengths")
    seeds = arrays.pop("seeds")
    has_obs = "adjacency" in arrays
    t_ends = np.cumsum(lengths)
    episodes = []
    for i, length in enumerate(lengths):
        t0 = int(t_ends[i] - length)
        ep = {k: arrays[k][t0 : t0 + length] for k in arrays if k not in OBS_KEYS}
        if has_obs:
            o0 = t0 + i  # each episode stores one more observation than transitions
            for key in OBS_KEYS:
                ep[key] = arrays[key][o0 : o0 + length + 1]
        episodes.append(ep)
    return episodes, seeds


def split_path(data_dir: Path, env_name: str, split: str, num_nodes: int) -> Path:
    """Where one env/split/size file lives."""
    return Path(data_dir) / env_name / f"{split}_n{num_nodes}.npz"


def collect(
    data_dir: Path, env_names: Iterable[str], specs: Iterable[SplitSpec], progress: bool = True
) -> dict:
    """Collect every (env, split, size) file that is not on disk yet; write the manifest.

    Idempotent: an existing file is kept (files are written atomically).
    """
    data_dir = Path(data_dir)
    manifest_path = data_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}}
    manifest["versions"] = {
        pkg: metadata.version(pkg) for pkg in ("graphwm-envs", "gdm-models", "gdd-metric", "graphwm")
    }
    manifest["seed_scheme"] = {
        "split_base": SPLIT_SEED_BASE,
        "formula": "split_base + num_nodes * 10000 + episode_index",
    }
    jobs = [(env, spec, n) for env in env_names for spec in specs for n in spec.sizes]
    for env, spec, n in tqdm(jobs, desc="collect", disable=not progress):
        path = split_path(data_dir, env, spec.split, n)
        seeds = [episode_seed(spec.split, n, i) for i in range(spec.episodes_per_size)]
        if not path.exists():
            episodes = [
                record_episode(env, n, s, store_observations=spec.store_observations) for s in seeds
            ]
            save_episodes(path, episodes, seeds)
        manifest["files"][str(path.relative_to(data_dir))] = {
            "env": env,
            "split": spec.split,
            "num_nodes": n,
            "episodes": spec.episodes_per_size,
            "seeds": seeds,
            "observations": spec.store_observations,
        }
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest
