"""Episode animations: record the frames of an episode and save them as a GIF.

Like Jumanji's ``animate``, with matplotlib's Pillow writer (no extra dependency)::

    import gymnasium as gym
    import graphwm_envs
    from graphwm_envs.animation import animate_episode
    from graphwm_envs.heuristics import greedy_action

    env = gym.make("graphenv/SAR-v0", num_nodes=20, render_mode="rgb_array")
    frames = animate_episode(env, greedy_action, "sar.gif", seed=0)

The GIF holds one frame per state: the initial state, then one frame after every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["animate_episode", "record_episode", "save_gif"]


def record_episode(
    env: Any,
    policy: Callable[[Any, np.random.Generator], Any],
    *,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    max_steps: int | None = None,
) -> list[np.ndarray]:
    """Run one episode of ``policy`` and return its frames (reset state, then one per step).

    Args:
        env: a graph env made with ``render_mode="rgb_array"`` (wrapped or not).
        policy: ``policy(env, rng) -> action`` on the unwrapped env (see
            :mod:`graphwm_envs.heuristics`).
        seed: the ``reset`` seed.
        rng: the policy's generator (default ``numpy.random.default_rng(seed)``).
        max_steps: stop after this many steps even if the episode has not ended.
    """
    if getattr(env, "render_mode", None) != "rgb_array":
        raise ValueError(
            "record_episode needs an env made with render_mode='rgb_array', got "
            f"render_mode={getattr(env, 'render_mode', None)!r}"
        )
    if max_steps is not None and max_steps < 0:
        raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    rng = rng if rng is not None else np.random.default_rng(seed)
    env.reset(seed=seed)
    frames = [env.render()]
    steps, done = 0, False
    while not done and (max_steps is None or steps < max_steps):
        _, _, terminated, truncated, _ = env.step(policy(env.unwrapped, rng))
        frames.append(env.render())
        steps += 1
        done = terminated or truncated
    return frames


def save_gif(frames: Sequence[np.ndarray], path: str | Path, *, fps: float = 4.0) -> Path:
    """Write ``frames`` ((H, W, 3) uint8 arrays of one size) to a GIF at ``path``.

    Uses matplotlib's ``PillowWriter``; every frame is kept (each shows a different step).
    Returns the path.
    """
    if len(frames) == 0:
        raise ValueError("save_gif needs at least one frame")
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    shape = np.shape(frames[0])
    if len(shape) != 3 or shape[2] != 3:
        raise ValueError(f"frames must be (H, W, 3) RGB arrays, got shape {shape}")
    if any(np.shape(f) != shape for f in frames):
        raise ValueError("every frame must have the same shape")
    from matplotlib.animation import PillowWriter
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = shape[:2]
    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    image = ax.imshow(frames[0], interpolation="nearest")
    # matplotlib's stub says int, but PillowWriter only computes 1000 / fps (a float is fine)
    writer = PillowWriter(fps=fps)  # type: ignore[arg-type]
    with writer.saving(fig, str(path), dpi=dpi):
        for frame in frames:
            image.set_data(frame)
            writer.grab_frame()
    return path


def animate_episode(
    env: Any,
    policy: Callable[[Any, np.random.Generator], Any],
    path: str | Path,
    *,
    seed: int | None = None,
    fps: float = 4.0,
    max_steps: int | None = None,
) -> list[np.ndarray]:
    """Record an episode (:func:`record_episode`) and save it as a GIF; returns the frames."""
    frames = record_episode(env, policy, seed=seed, max_steps=max_steps)
    save_gif(frames, path, fps=fps)
    return frames
