"""Stages 4-7: single-step GDD, multi-step GDD, self-GDD and ablations (same protocol).

Every function here is a job: ``fn(config) -> result dict`` in the format of
``docs/reporting.md``. Model samples come from the model's own prediction from the reference
state: latent models condition on the posterior over the reference trajectory up to the
reference state (``observe``), state-space models start from the reference observation (their
``observe`` returns it). Sample seeds derive from (episode seed, step, stream), so a job is
deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphwm.collect import load_episodes, split_path
from graphwm.envs import env_schema
from graphwm.factor_metrics import average_metrics, factor_metrics
from graphwm.fit import load_fitted
from graphwm.metric_graph import OBS_KEYS, extend_schema, model_samples_to_metric, stack_graphs
from graphwm.protocol import (
    STREAM_ENV,
    STREAM_MODEL,
    STREAM_SELF,
    env_samples,
    reference_indices,
    replay_episode,
    sample_seeds,
    transition_gdd,
)

COMPONENTS = ("node", "graph", "edge", "joint")


def _stack_obs(observations: list[dict], upto: int) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in observations[: upto + 1]]) for k in OBS_KEYS}


def _load_model(config: Mapping[str, Any]):
    import torch
    from gdm_models import load_checkpoint

    torch.set_num_threads(max(1, int(config.get("threads", 1))))
    return load_checkpoint(config["checkpoint"], device=config.get("device", "cpu"))


def _test_episodes(config: Mapping[str, Any]):
    split = config.get("split", "test")
    path = split_path(Path(config["data_dir"]), config["env"], split, config["size"])
    episodes, seeds = load_episodes(path)
    limit = config.get("max_episodes")
    if limit is not None:
        episodes, seeds = episodes[:limit], seeds[:limit]
    return episodes, seeds


def _model_set(model, replay, t: int, actions: np.ndarray, num: int, seed: int) -> list[dict]:
    """``num`` model rollouts from reference step ``t`` along ``actions`` (K, N)."""
    latent = model.observe(
        _stack_obs(replay.observations, t), replay.action_nodes[:t], generator=seed
    )
    preds = model.imagine_multi(latent, actions, num, generator=seed + 1)
    return [model_samples_to_metric(p) for p in preds]


def _summarise(gdds: list[list[float]], comps: list[list[dict]]) -> dict[str, Any]:
    per_episode = [float(np.mean(g)) for g in gdds]
    flat = [c for ep in comps for c in ep]
    return {
        "gdd": float(np.mean(per_episode)),
        "gdd_episodes": per_episode,
        "components": {k: float(np.mean([c[k] for c in flat])) for k in COMPONENTS},
        "num_transitions": len(flat),
    }


def single_step_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """Single-step GDD of one trained model on one test size (paper section 6.1)."""
    schema = env_schema(config["env"])
    bandwidths, _ = load_fitted(Path(config["fit_dir"]))
    model = _load_model(config)
    kappa = int(config["num_samples"])
    ext = extend_schema(schema)
    gdds, comps, factors = [], [], []
    for episode, seed in zip(*_test_episodes(config), strict=True):
        refs = reference_indices(len(episode["reward"]), int(config["reference_transitions"]))
        replay = replay_episode(
            config["env"],
            config["size"],
            int(seed),
            episode["actions"],
            refs,
            keep_observations=True,
            check=episode,
        )
        ep_gdd, ep_comp = [], []
        for t in refs:
            env_graphs, _ = env_samples(
                config["env"],
                config["size"],
                replay.snapshots[t],
                episode["actions"][t : t + 1],
                sample_seeds(int(seed), int(t), STREAM_ENV, kappa),
            )
            env_set = stack_graphs(env_graphs[0])
            seed_m = sample_seeds(int(seed), int(t), STREAM_MODEL, 1)[0]
            model_set = _model_set(
                model, replay, int(t), replay.action_nodes[t : t + 1], kappa, seed_m
            )[0]
            terminal = bool(replay.terminated[t])
            result = transition_gdd(model_set, env_set, schema, bandwidths, terminal)
            ep_gdd.append(result.gdd)
            ep_comp.append({k: getattr(result, k) for k in COMPONENTS})
            factors.append(factor_metrics(model_set, env_set, ext, terminal))
        gdds.append(ep_gdd)
        comps.append(ep_comp)
    out = {
        "kind": config.get("result_kind", "single_step"),
        "env": config["env"],
        "model": config["model"],
        "seed": config["seed"],
        "size": config["size"],
    }
    out.update(_summarise(gdds, comps))
    out["factor_metrics"] = average_metrics(factors)
    return out


def self_gdd_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """GDD of the environment against itself under the same protocol (paper's sanity table)."""
    schema = env_schema(config["env"])
    bandwidths, _ = load_fitted(Path(config["fit_dir"]))
    kappa = int(config["num_samples"])
    gdds, comps = [], []
    for episode, seed in zip(*_test_episodes(config), strict=True):
        refs = reference_indices(len(episode["reward"]), int(config["reference_transitions"]))
        replay = replay_episode(
            config["env"], config["size"], int(seed), episode["actions"], refs, check=episode
        )
        ep_gdd, ep_comp = [], []
        for t in refs:
            sets = []
            for stream in (STREAM_ENV, STREAM_SELF):
                graphs, _ = env_samples(
                    config["env"],
                    config["size"],
                    replay.snapshots[t],
                    episode["actions"][t : t + 1],
                    sample_seeds(int(seed), int(t), stream, kappa),
                )
                sets.append(stack_graphs(graphs[0]))
            result = transition_gdd(
                sets[1], sets[0], schema, bandwidths, bool(replay.terminated[t])
            )
            ep_gdd.append(result.gdd)
            ep_comp.append({k: getattr(result, k) for k in COMPONENTS})
        gdds.append(ep_gdd)
        comps.append(ep_comp)
    out = {"kind": "self_gdd", "env": config["env"], "seed": config["seed"], "size": config["size"]}
    out.update(_summarise(gdds, comps))
    return out


def _invalid_rate_model(preds: list[dict], actions: np.ndarray) -> np.ndarray:
    """Per step h: fraction of samples whose action h was not allowed by the predicted mask
    after step h-1 (step 1 starts from the reference state, where the action is valid)."""
    rates = [0.0]
    for h in range(1, len(actions)):
        selected = actions[h].astype(bool)
        mask = preds[h - 1]["node_categorical"][..., -1].astype(bool)  # appended action_mask
        rates.append(float(np.mean(~np.all(mask[:, selected], axis=1))))
    return np.asarray(rates)


def multi_step_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """GDD and invalid-action rates of 1..H-step rollouts along the reference actions.

    Only reference states with at least h remaining reference actions contribute to horizon
    h. A reference rollout that terminated at its h-th step is scored on reward and
    continuation at that horizon.
    """
    schema = env_schema(config["env"])
    bandwidths, _ = load_fitted(Path(config["fit_dir"]))
    model = _load_model(config)
    kappa, horizon = int(config["num_samples"]), int(config["horizon"])
    per_h: dict[int, dict[str, list]] = {
        h: {"gdd": [], **{k: [] for k in COMPONENTS}, "inv_m": [], "inv_e": []}
        for h in range(1, horizon + 1)
    }
    for episode, seed in zip(*_test_episodes(config), strict=True):
        length = len(episode["reward"])
        refs = reference_indices(length, int(config["reference_transitions"]))
        replay = replay_episode(
            config["env"],
            config["size"],
            int(seed),
            episode["actions"],
            refs,
            keep_observations=True,
            check=episode,
        )
        for t in refs:
            steps = min(horizon, length - int(t))
            actions = episode["actions"][t : t + steps]
            nodes = replay.action_nodes[t : t + steps]
            env_graphs, invalid = env_samples(
                config["env"],
                config["size"],
                replay.snapshots[t],
                actions,
                sample_seeds(int(seed), int(t), STREAM_ENV, kappa),
            )
            seed_m = sample_seeds(int(seed), int(t), STREAM_MODEL, 1)[0]
            model_sets = _model_set(model, replay, int(t), nodes, kappa, seed_m)
            inv_m = _invalid_rate_model(model_sets, nodes)
            for h in range(1, steps + 1):
                terminal = bool(replay.terminated[t + h - 1])
                result = transition_gdd(
                    model_sets[h - 1],
                    stack_graphs(env_graphs[h - 1]),
                    schema,
                    bandwidths,
                    terminal,
                )
                acc = per_h[h]
                acc["gdd"].append(result.gdd)
                for k in COMPONENTS:
                    acc[k].append(getattr(result, k))
                acc["inv_m"].append(inv_m[h - 1])
                acc["inv_e"].append(float(invalid[h - 1].mean()))

    def mean(values):
        return float(np.mean(values)) if values else float("nan")

    hs = list(range(1, horizon + 1))
    return {
        "kind": "multi_step",
        "env": config["env"],
        "model": config["model"],
        "seed": config["seed"],
        "size": config["size"],
        "horizons": hs,
        "gdd": [mean(per_h[h]["gdd"]) for h in hs],
        "components": {k: [mean(per_h[h][k]) for h in hs] for k in COMPONENTS},
        "invalid_rate_model": [mean(per_h[h]["inv_m"]) for h in hs],
        "invalid_rate_env": [mean(per_h[h]["inv_e"]) for h in hs],
    }
