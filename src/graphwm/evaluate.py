"""Stages 4-7: single-step GDD, multi-step GDD, self-GDD and ablations (same protocol).

Every function here is a job: ``fn(config) -> result dict`` in the format of
``docs/reporting.md``. Model samples come from the model's own prediction from the reference
state: latent models condition on the posterior over the reference trajectory up to the
reference state (``observe``), state-space models start from the reference observation (their
``observe`` returns it). Sample seeds derive from (episode seed, step, stream), so a job is
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
    STREAM_POSTERIOR,
    STREAM_SELF,
    ReplayedEpisode,
    env_samples,
    reference_indices,
    replay_episode,
    sample_seeds,
    transition_gdd,
)

COMPONENTS = ("node", "graph", "edge", "joint")


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


def _summarise(gdds: list[list[float]], comps: list[list[dict]]) -> dict[str, Any]:
    per_episode = [float(np.mean(g)) for g in gdds]
    flat = [c for ep in comps for c in ep]
    return {
        "gdd": float(np.mean(per_episode)),
        "gdd_episodes": per_episode,
        "components": {k: float(np.mean([c[k] for c in flat])) for k in COMPONENTS},
        "num_transitions": len(flat),
    }


@dataclass
class ReferencePoint:
    """One reference transition: its episode, step, and env samples along the next actions."""

    episode_index: int
    seed: int
    t: int
    replay: ReplayedEpisode
    env_sets: list[dict[str, np.ndarray]]  # stacked metric sets after each step 1..K
    env_invalid: np.ndarray  # (K, S) invalid-action flags of the env samples
    terminal: list[bool]  # whether the reference step t + h - 1 terminated, h = 1..K


def reference_points(
    config: Mapping[str, Any], horizon: int, keep_observations: bool, stream: int = STREAM_ENV
) -> Iterator[ReferencePoint]:
    """Replay every test episode and yield its reference points with kappa env samples each.

    Only actions that exist in the reference episode are followed, so the last reference
    points get fewer than ``horizon`` steps.
    """
    kappa = int(config["num_samples"])
    for index, (episode, seed) in enumerate(zip(*_test_episodes(config), strict=True)):
        seed = int(seed)
        length = len(episode["reward"])
        refs = reference_indices(length, int(config["reference_transitions"]))
        replay = replay_episode(
            config["env"],
            config["size"],
            seed,
            episode["actions"],
            refs,
            keep_observations=keep_observations,
            check=episode,
        )
        for t in map(int, refs):
            steps = min(horizon, length - t)
            graphs, invalid = env_samples(
                config["env"],
                config["size"],
                replay.snapshots[t],
                episode["actions"][t : t + steps],
                sample_seeds(seed, t, stream, kappa),
            )
            yield ReferencePoint(
                index,
                seed,
                t,
                replay,
                [stack_graphs(g) for g in graphs],
                invalid,
                [bool(x) for x in replay.terminated[t : t + steps]],
            )


class ModelSampler:
    """The model's rollouts from each reference point of the episodes being evaluated.

    Latent models condition on the posterior over the reference trajectory up to the
    reference state. The posterior latents of all reference points of an episode come from
    one pass over it (``observe_at``), seeded per episode; imagination is seeded per point.
    """

    def __init__(self, model, num_samples: int) -> None:
        self.model = model
        self.num_samples = num_samples
        self._episode: int | None = None
        self._latents: dict[int, Any] = {}

    def __call__(self, point: ReferencePoint) -> list[dict[str, np.ndarray]]:
        import torch

        replay = point.replay
        with torch.no_grad():  # evaluation only: no autograd graph over the posterior
            if point.episode_index != self._episode:
                steps = sorted(replay.snapshots)
                obs = {k: np.stack([o[k] for o in replay.observations]) for k in OBS_KEYS}
                seed = sample_seeds(point.seed, 0, STREAM_POSTERIOR, 1)[0]
                latents = self.model.observe_at(obs, replay.action_nodes, steps, generator=seed)
                self._latents = dict(zip(steps, latents, strict=True))
                self._episode = point.episode_index
            actions = replay.action_nodes[point.t : point.t + len(point.env_sets)]
            seed = sample_seeds(point.seed, point.t, STREAM_MODEL, 1)[0]
            preds = self.model.imagine_multi(
                self._latents[point.t], actions, self.num_samples, generator=seed
            )
        return [model_samples_to_metric(p) for p in preds]


def _per_episode(points: Iterator[ReferencePoint], score) -> tuple[list, list]:
    """Group ``score(point) -> (gdd, components)`` by episode."""
    gdds: dict[int, list[float]] = {}
    comps: dict[int, list[dict]] = {}
    for point in points:
        gdd, comp = score(point)
        gdds.setdefault(point.episode_index, []).append(gdd)
        comps.setdefault(point.episode_index, []).append(comp)
    return list(gdds.values()), list(comps.values())


def _components(result) -> dict[str, float]:
    return {k: getattr(result, k) for k in COMPONENTS}


def single_step_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """Single-step GDD of one trained model on one test size (paper section 6.1)."""
    schema = env_schema(config["env"])
    bandwidths, _ = load_fitted(Path(config["fit_dir"]))
    model = _load_model(config)
    ext = extend_schema(schema)
    factors = []

    sampler = ModelSampler(model, int(config["num_samples"]))

    def score(point: ReferencePoint):
        model_set = sampler(point)[0]
        env_set, terminal = point.env_sets[0], point.terminal[0]
        result = transition_gdd(model_set, env_set, schema, bandwidths, terminal)
        factors.append(factor_metrics(model_set, env_set, ext, terminal))
        return result.gdd, _components(result)

    gdds, comps = _per_episode(reference_points(config, 1, keep_observations=True), score)
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
    """GDD of the environment against itself under the same protocol (paper's sanity table).

    The second sample set comes from an independent seed stream of the same reference states.
    """
    schema = env_schema(config["env"])
    bandwidths, _ = load_fitted(Path(config["fit_dir"]))
    kappa = int(config["num_samples"])

    def score(point: ReferencePoint):
        snapshot = point.replay.snapshots[point.t]
        action = point.replay.actions[point.t : point.t + 1]
        seeds = sample_seeds(point.seed, point.t, STREAM_SELF, kappa)
        graphs, _ = env_samples(config["env"], config["size"], snapshot, action, seeds)
        result = transition_gdd(
            stack_graphs(graphs[0]), point.env_sets[0], schema, bandwidths, point.terminal[0]
        )
        return result.gdd, _components(result)

    gdds, comps = _per_episode(reference_points(config, 1, keep_observations=False), score)
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
    horizon = int(config["horizon"])
    per_h: dict[int, dict[str, list]] = {
        h: {"gdd": [], **{k: [] for k in COMPONENTS}, "inv_m": [], "inv_e": []}
        for h in range(1, horizon + 1)
    }
    sampler = ModelSampler(model, int(config["num_samples"]))
    for point in reference_points(config, horizon, keep_observations=True):
        model_sets = sampler(point)
        nodes = point.replay.action_nodes[point.t : point.t + len(model_sets)]
        inv_m = _invalid_rate_model(model_sets, nodes)
        for h in range(1, len(point.env_sets) + 1):
            result = transition_gdd(
                model_sets[h - 1],
                point.env_sets[h - 1],
                schema,
                bandwidths,
                point.terminal[h - 1],
            )
            acc = per_h[h]
            acc["gdd"].append(result.gdd)
            for k in COMPONENTS:
                acc[k].append(getattr(result, k))
            acc["inv_m"].append(inv_m[h - 1])
            acc["inv_e"].append(float(point.env_invalid[h - 1].mean()))

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
