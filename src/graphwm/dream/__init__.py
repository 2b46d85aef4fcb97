"""Trained world models as Gymnasium environments (docs/dream.md).

* :class:`DreamEnv` - one imagined episode at a time, a drop-in ``gym.Env`` for the real env;
* :class:`DreamVectorEnv` - B imagined episodes per batched forward pass (``VectorEnv``);
* :func:`load_world_model` / :func:`make_dream_env` - from a checkpoint of a run.
"""

from __future__ import annotations

from pathlib import Path

from gymnasium.vector import AutoresetMode

from graphwm.dream.core import DreamCore, StartState, real_horizon, real_start, stored_starts
from graphwm.dream.env import DreamEnv
from graphwm.dream.vector import DreamVectorEnv

__all__ = [
    "DreamCore",
    "DreamEnv",
    "DreamVectorEnv",
    "StartState",
    "load_world_model",
    "make_dream_env",
    "real_horizon",
    "real_start",
    "stored_starts",
]


def load_world_model(checkpoint: str | Path, device: str = "cpu"):
    """A trained model from a checkpoint directory (e.g. a run's ``.../ckpt/final``)."""
    from gdm_models import load_checkpoint

    return load_checkpoint(Path(checkpoint), device=device)


def make_dream_env(
    model_or_checkpoint,
    env_name: str,
    num_nodes: int,
    *,
    seed: int | None = None,
    device: str = "cpu",
    num_envs: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
):
    """A :class:`DreamEnv` (or, with ``num_envs``, a :class:`DreamVectorEnv`) of a model
    (or a checkpoint path) imitating ``env_name`` (``"SAR"``, ``"OD"``, ...) with N nodes.

    ``autoreset_mode`` is the vector env's (``NEXT_STEP`` or ``SAME_STEP``, the latter what
    :class:`~graphwm.dream.sb3_vec_env.DreamSB3VecEnv` needs); a single env has no autoreset,
    so any other value than the default is refused there."""
    from graphwm.envs import make_env

    model = model_or_checkpoint
    if isinstance(model, str | Path):
        model = load_world_model(model, device)
    real = make_env(env_name, num_nodes)
    if num_envs is None:
        if AutoresetMode(autoreset_mode) is not AutoresetMode.NEXT_STEP:
            raise ValueError("autoreset_mode applies to a vector env only: pass num_envs")
        return DreamEnv(model, real, seed=seed)
    return DreamVectorEnv(model, real, num_envs, seed=seed, autoreset_mode=autoreset_mode)
