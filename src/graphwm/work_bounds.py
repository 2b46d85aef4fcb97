"""Bounds of the work a preset asks for that need a model or an env built, checked with the
other preset checks before any stage runs (issue 38; :func:`graphwm.checks.check_preset`
calls :func:`check_work_bounds`):

* **training memory**: the peak of one training step of every (env, model) the preset trains
  (:func:`gdm_models.memory.training_step_bytes`: activations from the batch B, the sequence
  length L, the largest training size N and the model's widths, calibrated against measured
  peaks) must fit the device: half this machine's memory on the CPU (as every other memory
  bound of :mod:`graphwm.checks`), the GPU's memory on CUDA where this machine has it (a
  preset for a GPU checked on a machine without one is not bounded here: its run is refused
  there by :func:`graphwm.checks.check_machine` anyway);
* **multi-step horizon**: ``multi_step.horizon`` at most the longest episode the env allows at
  ``multi_step.size`` (the largest reset ``"horizon"`` of the evaluated test episodes): a
  longer horizon only adds columns of ``nan``.

Each error is a :class:`~graphwm.config.PresetError` naming the key, the value and what to
lower (docs/reproducing.md, "Limits").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from graphwm.config import Preset, PresetError

__all__ = [
    "check_work_bounds",
    "device_memory_bytes",
    "longest_episode",
    "meta_model",
    "training_peak",
]


# ---------------------------------------------------------------------------------------------
# Training memory
# ---------------------------------------------------------------------------------------------
def device_memory_bytes(device: str, machine: int) -> int | None:
    """What one training job may use on ``device``: half of ``machine`` (this machine's
    memory, :func:`graphwm.checks.memory_bytes`) on the CPU (the OS, the data and the other
    workers live there too), the GPU's memory on CUDA when this machine has that GPU;
    ``None`` (not bounded here) otherwise (a CUDA preset checked on a machine without CUDA,
    ``mps``)."""
    if device == "cpu":
        return machine // 2
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        if torch.cuda.is_available() and index < torch.cuda.device_count():
            return int(torch.cuda.get_device_properties(index).total_memory)
    return None


@functools.lru_cache(maxsize=256)
def meta_model(model: str, env: str, config_json: str) -> Any:
    """``model`` on ``env`` built with the (JSON) config on torch's ``meta`` device: shapes,
    no memory (cached per config; the preset checks' one model builder)."""
    import torch
    from gdm_models import make_model

    from graphwm.envs import env_schema

    with torch.device("meta"):  # shapes only: nothing allocated
        return make_model(model, env_schema(env), None, **json.loads(config_json))


def training_peak(p: Preset, env: str, model: str) -> tuple[int | None, dict[str, int]]:
    """The estimated peak bytes of one training step of ``model`` on ``env`` under the
    preset (None: no estimate for this model), and the sizes it was computed from: ``batch``
    (the preset's batch size, at most the training episodes), ``seq_len``, ``nodes`` (the
    largest training size) and ``members`` (an ensemble's members trained as one model)."""
    from gdm_models.member_layers import MemberModel
    from gdm_models.memory import training_step_bytes
    from gdm_models.training import TrainConfig

    from graphwm.envs import resolved_configs

    base = model.split(":", 1)[0]
    config, trainer = resolved_configs(
        model, env, p.train.model_overrides.get(base, {}), p.train.train_overrides
    )
    episodes = p.collect.train_episodes * len(p.collect.train_sizes)
    try:
        built = meta_model(model, env, json.dumps(config, sort_keys=True))
    except (RuntimeError, NotImplementedError):  # a model of one's own that meta cannot build
        return None, {}
    # TrainConfig's defaults where a preset of one's own leaves them out
    default = TrainConfig()
    sizes = {
        # an epoch's batches are never larger than the training episodes
        "batch": min(int(trainer.get("batch_size", default.batch_size)), episodes),
        "seq_len": int(trainer.get("seq_len", default.seq_len)),
        "nodes": max(p.collect.train_sizes),
        # the K members of an ensemble train as one member model (one batch of K x B)
        "members": min(p.train.ensemble, len(p.seeds)) if isinstance(built, MemberModel) else 1,
    }
    need = training_step_bytes(
        built,
        batch_size=sizes["batch"],
        seq_len=sizes["seq_len"],
        num_nodes=sizes["nodes"],
        members=sizes["members"],
        device=p.device,
    )
    return need, sizes


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def _check_training_memory(p: Preset, machine: int) -> None:
    have = device_memory_bytes(p.device, machine)
    if have is None:
        return
    where = "half this machine's memory" if p.device == "cpu" else f"the memory of {p.device}"
    for env in p.envs:
        for model in p.models_of(env):
            need, s = training_peak(p, env, model)
            if need is None or need <= have:
                continue
            base = model.split(":", 1)[0]
            keys = [
                f"train.train_overrides.{k}"
                if k in p.train.train_overrides
                else f"{k} of {base}'s paper preset (train.train_overrides.{k})"
                for k in ("batch_size", "seq_len")
            ]
            raise PresetError(
                f"preset key 'train': one training step of {model!r} on {env} needs about "
                f"{_gib(need)} (batch {s['batch']} x seq_len {s['seq_len']} windows of "
                f"N = {s['nodes']} nodes"
                + (f", {s['members']} ensemble members at once" if s["members"] > 1 else "")
                + f"), more than {where} ({_gib(have)}); lower {keys[0]}, {keys[1]}, the "
                f"largest collect.train_sizes or the model's widths "
                f"(train.model_overrides.{base})"
            )


# ---------------------------------------------------------------------------------------------
# Multi-step horizon
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def longest_episode(env: str, size: int, episodes: int, enough: int | None = None) -> int | None:
    """The most steps any of the first ``episodes`` test episodes of ``env`` at ``size`` can
    last: the largest ``"horizon"`` of their reset infos (the env's truncation or termination
    limit of that episode; ``spec.max_episode_steps`` for an env whose reset info has none).
    ``None``: the env states no limit. Only resets run (no step), and they stop at the first
    episode whose limit reaches ``enough`` (its limit is returned)."""
    from graphwm.envs import make_env
    from graphwm.episodes import episode_seed

    real = make_env(env, size)
    longest = 0
    try:
        for i in range(episodes):
            _, info = real.reset(seed=episode_seed("test", size, i))
            limit = info.get("horizon") if isinstance(info, Mapping) else None
            if limit is None:
                spec = getattr(real, "spec", None)
                limit = getattr(spec, "max_episode_steps", None)
            if limit is None:
                return None
            longest = max(longest, int(limit))
            if enough is not None and longest >= enough:
                break
    finally:
        real.close()
    return longest


def _check_horizon(p: Preset) -> None:
    m = p.multi_step
    if m is None:
        return
    episodes = min(p.collect.test_episodes, m.max_episodes or p.collect.test_episodes)
    for env in p.envs:
        longest = longest_episode(env, m.size, episodes, enough=m.horizon)
        if longest is not None and m.horizon > longest:
            raise PresetError(
                f"preset key 'multi_step.horizon': {m.horizon} is longer than any {env} "
                f"episode at multi_step.size = {m.size} can last ({longest} steps, the "
                f"longest of its {episodes} evaluated test episodes): every horizon past "
                f"{longest} would be a column of nan; use at most {longest}"
            )


def check_work_bounds(p: Preset, machine: int) -> None:
    """The multi-step horizon and the training memory (see the module docstring);
    ``machine``: this machine's memory in bytes."""
    _check_horizon(p)
    _check_training_memory(p, machine)
