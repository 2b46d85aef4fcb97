"""Bounds of the work and memory a preset asks for, checked with the other preset checks
before any stage runs (:func:`graphwm.checks.check_preset` calls :func:`check_work_bounds`):

* **evaluation memory**: the samples and Gram matrices of one reference transition
  (:func:`sample_bytes`) and the graph policy's weights within half this machine's memory;
* **permutation work**: the run's permutation tests at most :data:`MAX_PERMUTATION_HOURS`;
* **model size**: a model's weights, gradients and Adam state (16 bytes a parameter, counted
  on torch's meta device) within half this machine's memory;

* **training memory**: the peak of one training step of every (env, model) the preset trains
  (:func:`gdm_models.memory.training_step_bytes`: activations from the batch B, the sequence
  length L, the largest training size N and the model's widths, calibrated against measured
  peaks) must fit the device: half this machine's memory on the CPU (as every other memory
  bound of :mod:`graphwm.checks`), the GPU's memory on CUDA where this machine has it (a
  preset for a GPU checked on a machine without one is not bounded here: its run is refused
  there by :func:`graphwm.checks.check_device` anyway);
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

from gdm_models.machine import memory_bytes

from graphwm.config import Preset, PresetError
from graphwm.config_values import MAX_SEED

__all__ = [
    "MAX_PERMUTATION_HOURS",
    "check_model_size",
    "check_work_bounds",
    "device_memory_bytes",
    "longest_episode",
    "memory_bytes",
    "meta_model",
    "permutation_hours",
    "reference_transitions",
    "sample_bytes",
    "step_peak",
    "training_peak",
]


# ---------------------------------------------------------------------------------------------
# Evaluation memory, permutation work and model sizes
# ---------------------------------------------------------------------------------------------
def _fits(key: str, value: Any, need: float, what: str) -> None:
    """Refuse ``value`` of ``key`` when ``need`` bytes exceed half this machine's memory."""
    have = memory_bytes() // 2
    if need > have:
        raise PresetError(
            f"preset key {key!r}: {value!r} needs about {_gib(need)} ({what}), more than half "
            f"this machine's memory ({_gib(have)})"
        )


#: float64 (T, T) matrices alive at once at the peak of one GDD, T = 2 kappa pooled samples
#: (gdd_metric.grams: the eight kernel terms, the four component Grams and the temporaries of
#: their assembly). Measured with tracemalloc: 16.0 x 8 T^2 bytes at kappa = 250, 500, 1000.
GRAM_MATRICES_AT_PEAK = 16
#: seconds per pooled-Gram entry of one permutation-test relabeling (gdd_metric.stats: each
#: relabeling sums the (T, T) Gram under a mask); measured 7 ns on a 2-core CPU, rounded up
PERMUTATION_SECONDS_PER_ENTRY = 10e-9
#: the most CPU-hours the permutation tests of one run may take (the paper preset's: 2.3)
MAX_PERMUTATION_HOURS = 1000.0


def sample_bytes(num_samples: int, num_nodes: int) -> int:
    """Bytes held at once for one reference transition's GDD: the two sets of
    ``num_samples`` sampled N x N graphs (float32) and the peak of the pooled float64 Gram
    matrices (:data:`GRAM_MATRICES_AT_PEAK` of them, T = 2 ``num_samples``)."""
    pooled = 2 * num_samples
    return 4 * pooled * num_nodes * num_nodes + 8 * GRAM_MATRICES_AT_PEAK * pooled * pooled


def reference_transitions(p: Preset) -> int:
    """Reference transitions the final evaluation scores: per env, evaluated test size (an
    ablation's: ``ablation_sizes``), model and seed, ``evaluate.reference_transitions`` of
    each evaluated test episode."""
    per_run = p.evaluate.reference_transitions * p.evaluate.evaluated(p.collect.test_episodes)
    return sum(
        len(p.eval_sizes(env, model)) * per_run * len(p.seeds)
        for env in p.envs
        for model in p.models_of(env)
    )


def permutation_hours(p: Preset) -> float:
    """CPU-hours of the run's permutation tests: relabelings x transitions x (2 kappa)^2
    Gram entries at :data:`PERMUTATION_SECONDS_PER_ENTRY`."""
    pooled = 2 * p.evaluate.num_samples
    entries = p.evaluate.permutations * reference_transitions(p) * pooled * pooled
    return entries * PERMUTATION_SECONDS_PER_ENTRY / 3600


def _check_evaluation(p: Preset) -> None:
    """The samples of one GDD and the graph policy fit half this machine's memory, the
    permutation tests take at most :data:`MAX_PERMUTATION_HOURS`, and a dream agent's env
    seeds stay seeds."""
    largest = max(max(p.test_sizes(env), default=0) for env in p.envs)
    k = p.evaluate.num_samples
    _fits("evaluate.num_samples", k, sample_bytes(k, largest), f"samples of N = {largest}")
    if p.multi_step is not None:
        m = p.multi_step
        need = sample_bytes(m.num_samples, m.size)
        _fits("multi_step.num_samples", m.num_samples, need, f"samples of N = {m.size}")
    section = p.downstream
    if section is not None:
        width, depth = section.policy_hidden_dim, max(1, section.policy_num_layers)
        # weights, gradients and Adam's two moments, float32
        need = 16 * width * width * (depth + 2)
        _fits("downstream.policy_hidden_dim", width, need, "the graph policy's weights")
        if max(p.seeds) + section.dream_envs - 1 > MAX_SEED:
            raise PresetError(
                f"preset key 'seeds': {max(p.seeds)} plus downstream.dream_envs - 1 "
                f"({section.dream_envs - 1}) must be <= {MAX_SEED} (a dream agent's envs reset "
                "with seed + i, and seeds stop there)"
            )
    hours = permutation_hours(p)
    if hours > MAX_PERMUTATION_HOURS:
        raise PresetError(
            f"preset key 'evaluate.permutations': {p.evaluate.permutations} relabelings of "
            f"{reference_transitions(p)} reference transitions need about {hours:.3g} CPU-hours "
            f"(more than {MAX_PERMUTATION_HOURS:g}); lower evaluate.permutations (the paper: "
            "200) or the transitions evaluated (evaluate.reference_transitions, "
            "evaluate.max_episodes)"
        )


def check_model_size(model: str, env: str, values: Mapping[str, Any], key: str) -> None:
    """A model whose weights, gradients and Adam state (16 bytes a parameter) would not fit
    half this machine's memory is refused, naming the size key(s) of ``values``."""
    from graphwm.envs import resolved_configs

    sizes = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    if not sizes:
        return
    what = ", ".join(f"{key}.{k} = {v}" for k, v in sizes.items())
    config, _ = resolved_configs(model, env, values)
    try:
        built = meta_model(model, env, json.dumps(config, sort_keys=True))
        count = sum(int(t.numel()) for t in built.parameters())
    except (RuntimeError, TypeError, ValueError, OverflowError, MemoryError) as err:
        said = str(err).splitlines()[0]
        raise PresetError(f"preset key {key!r}: {what} is too large to build ({said})") from None
    have = memory_bytes() // 2
    if 16 * count > have:
        raise PresetError(
            f"preset key {key!r}: {what} makes {model!r} hold {count} parameters, about "
            f"{_gib(16 * count)} with gradients and Adam's state, more than half this "
            f"machine's memory ({_gib(have)})"
        )


# ---------------------------------------------------------------------------------------------
# Training memory
# ---------------------------------------------------------------------------------------------
def device_memory_bytes(device: str, machine: int) -> int | None:
    """What one training job may use on ``device``: half of ``machine`` (this machine's
    memory, :func:`memory_bytes`) on the CPU (the OS, the data and the other
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


def step_peak(
    model: str,
    env: str,
    config: Mapping[str, Any],
    *,
    batch: int,
    seq_len: int,
    nodes: int,
    members: int,
    device: str,
) -> tuple[int | None, int]:
    """The estimated peak bytes of one training step of ``model`` (hyperparameters ``config``)
    on ``env`` (None: no estimate), ``batch`` x ``seq_len`` windows of ``nodes`` nodes, and the
    members trained at once: an ensemble's ``members`` where the model trains them as one
    member model, else 1."""
    from gdm_models.member_layers import MemberModel
    from gdm_models.memory import training_step_bytes

    try:
        built = meta_model(model, env, json.dumps(dict(config), sort_keys=True))
    except (RuntimeError, NotImplementedError):  # a model of one's own that meta cannot build
        return None, 1
    # the K members of an ensemble train as one member model (one batch of K x B)
    k = members if isinstance(built, MemberModel) else 1
    need = training_step_bytes(
        built, batch_size=batch, seq_len=seq_len, num_nodes=nodes, members=k, device=device
    )
    return need, k


def training_peak(p: Preset, env: str, model: str) -> tuple[int | None, dict[str, int]]:
    """:func:`step_peak` of ``model`` on ``env`` under the preset, and the sizes it was
    computed from: ``batch`` (the preset's batch size, at most the training episodes),
    ``seq_len``, ``nodes`` (the largest training size) and ``members`` (trained at once)."""
    from gdm_models.training import TrainConfig

    from graphwm.envs import resolved_configs

    base = model.split(":", 1)[0]
    config, trainer = resolved_configs(
        model, env, p.train.model_overrides.get(base, {}), p.train.train_overrides
    )
    episodes = p.collect.train_episodes * len(p.collect.train_sizes)
    default = TrainConfig()  # its defaults where a preset of one's own leaves them out
    sizes = {
        # an epoch's batches are never larger than the training episodes
        "batch": min(int(trainer.get("batch_size", default.batch_size)), episodes),
        "seq_len": int(trainer.get("seq_len", default.seq_len)),
        "nodes": max(p.collect.train_sizes),
    }
    members = min(p.train.ensemble, len(p.seeds))
    need, sizes["members"] = step_peak(
        model, env, config, **sizes, members=members, device=p.device
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
                else f"{k} of {base}'s paper hyperparameters (train.train_overrides.{k})"
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


def check_work_bounds(p: Preset) -> None:
    """Every bound of this module (see its docstring)."""
    _check_evaluation(p)
    _check_horizon(p)
    _check_training_memory(p, memory_bytes())
