"""`graphwm demo`: random-policy episodes of every env, each one rendered.

For every env and every seed it runs, the demo writes the start and end frames as PNGs and,
with ``run_demo(..., gif=True)``, the whole episode as a GIF (one frame per state).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import graphwm_envs
import gymnasium as gym
import numpy as np
from graphwm_envs.animation import save_gif
from graphwm_envs.heuristics import random_action


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


def short_name(env_id: str) -> str:
    """``graphenv/SAR-v0`` -> ``SAR``."""
    return env_id.split("/")[-1].removesuffix("-v0")


def run_episode(
    env_id: str,
    seed: int,
    num_nodes: int,
    out_dir: Path | None = None,
    max_steps: int = 10_000,
    gif: bool = False,
) -> EpisodeStats:
    """Run one random-valid-action episode.

    With ``out_dir``, save ``<ENV>_seed<seed>_start.png`` and ``..._end.png`` there, and with
    ``gif=True`` also ``<ENV>_seed<seed>.gif`` (one frame per state).
    """
    render = out_dir is not None
    env = gym.make(env_id, num_nodes=num_nodes, render_mode="rgb_array" if render else None)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    frames = [_frame(env)] if render else []
    total, removed, added, invalid, steps = 0.0, 0, 0, 0, 0
    terminated = truncated = False
    while not (terminated or truncated) and steps < max_steps:
        action = random_action(env.unwrapped, rng)
        next_obs, reward, terminated, truncated, info = env.step(action)
        r, a = _edge_changes(obs["adjacency"], next_obs["adjacency"])
        removed, added = removed + r, added + a
        invalid += int(info.get("invalid_action", False))
        total += float(reward)
        steps += 1
        obs = next_obs
        if render and (gif or terminated or truncated or steps == max_steps):
            frames.append(_frame(env))
    env.close()
    if out_dir is not None:
        stem = f"{short_name(env_id)}_seed{seed}"
        _save_png(frames[0], out_dir / f"{stem}_start.png")
        _save_png(frames[-1], out_dir / f"{stem}_end.png")
        if gif:
            save_gif(frames, out_dir / f"{stem}.gif")
    return EpisodeStats(env_id, seed, steps, total, removed, added, invalid, bool(terminated))


def _frame(env: gym.Env) -> np.ndarray:
    """One ``rgb_array`` frame (gymnasium types ``render()`` loosely: lists or None too)."""
    frame = env.render()
    if not isinstance(frame, np.ndarray):
        raise TypeError(f"render() returned {type(frame).__name__}, expected an rgb_array image")
    return frame


def _save_png(image: np.ndarray, path: Path) -> None:
    import matplotlib.image

    path.parent.mkdir(parents=True, exist_ok=True)
    matplotlib.image.imsave(path, image)


def run_demo(
    out_dir: Path, seeds: int = 3, num_nodes: int = 20, gif: bool = False
) -> list[EpisodeStats]:
    """Run every env for ``seeds`` seeds, print a table and render every episode.

    Raises:
        ValueError: ``seeds`` < 1 (nothing would be written) or ``num_nodes`` below the envs'
            minimum.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    stats = []
    header = f"{'env':<18}{'seed':>5}{'length':>8}{'return':>10}{'removed':>9}{'added':>7}"
    print(header)
    print("-" * len(header))
    for env_id in graphwm_envs.ENV_IDS:
        for seed in range(seeds):
            s = run_episode(env_id, seed, num_nodes, out_dir, gif=gif)
            stats.append(s)
            print(
                f"{env_id:<18}{seed:>5}{s.length:>8}{s.episode_return:>10.3f}"
                f"{s.edges_removed:>9}{s.edges_added:>7}"
            )
    kinds = "start/end PNGs and a GIF" if gif else "start/end PNGs"
    print(f"\n{kinds} of every episode written to {out_dir}/")
    return stats
