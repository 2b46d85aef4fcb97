"""`graphwm demo`: run every registered env with the random policy and render start/end states."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class EpisodeStats:
    """Summary of one random-policy episode."""

    env_id: str
    seed: int
    length: int
    episode_return: float
    edges_removed: int
    edges_added: int
    invalid_actions: int
    terminated: bool


def _edge_changes(before: np.ndarray, after: np.ndarray) -> tuple[int, int]:
    upper = np.triu(np.ones_like(before, dtype=bool), k=1)
    removed = int(np.count_nonzero(upper & (before == 1) & (after == 0)))
    added = int(np.count_nonzero(upper & (before == 0) & (after == 1)))
    return removed, added


def run_episode(
    env_id: str, seed: int, num_nodes: int, out_dir: Path | None = None, max_steps: int = 10_000
) -> EpisodeStats:
    """Run one random-valid-action episode; optionally save start/end PNGs into ``out_dir``."""
    import graph_envs  # noqa: F401  (registers the ids)

    env = gym.make(env_id, num_nodes=num_nodes, render_mode="rgb_array" if out_dir else None)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    short = env_id.split("/")[-1].removesuffix("-v0")
    if out_dir is not None:
        _save_png(env.render(), out_dir / f"{short}_seed{seed}_start.png")
    total, removed, added, invalid, steps = 0.0, 0, 0, 0, 0
    terminated = truncated = False
    while not (terminated or truncated) and steps < max_steps:
        action = env.unwrapped.sample_valid_action(rng)
        next_obs, reward, terminated, truncated, info = env.step(action)
        r, a = _edge_changes(obs["adjacency"], next_obs["adjacency"])
        removed, added = removed + r, added + a
        invalid += int(info.get("invalid_action", False))
        total += reward
        steps += 1
        obs = next_obs
    if out_dir is not None:
        _save_png(env.render(), out_dir / f"{short}_seed{seed}_end.png")
    env.close()
    return EpisodeStats(env_id, seed, steps, total, removed, added, invalid, bool(terminated))


def _save_png(image: np.ndarray | None, path: Path) -> None:
    import matplotlib.image

    if image is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    matplotlib.image.imsave(path, image)


def available_env_ids() -> list[str]:
    """Registered ``graphenv/*`` ids whose implementation imports."""
    import importlib

    import graph_envs

    ids = []
    for env_id in graph_envs.ENV_IDS:
        module = gym.registry[env_id].entry_point.split(":")[0]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        ids.append(env_id)
    return ids


def run_demo(out_dir: Path, seeds: int = 3, num_nodes: int = 20) -> list[EpisodeStats]:
    """Run every available env for ``seeds`` seeds, print a table and write PNGs."""
    stats = []
    header = f"{'env':<18}{'seed':>5}{'length':>8}{'return':>10}{'removed':>9}{'added':>7}"
    print(header)
    print("-" * len(header))
    for env_id in available_env_ids():
        for seed in range(seeds):
            s = run_episode(env_id, seed, num_nodes, out_dir if seed == 0 else None)
            stats.append(s)
            print(
                f"{env_id:<18}{seed:>5}{s.length:>8}{s.episode_return:>10.3f}"
                f"{s.edges_removed:>9}{s.edges_added:>7}"
            )
    print(f"\nrendered start/end states written to {out_dir}/")
    return stats
