"""Stages 4-7: single-step GDD, multi-step GDD, self-GDD and ablations (same protocol).

Every function here is a job: ``fn(job, run_dir) -> record`` (:mod:`graphwm.store.records`, format
in ``docs/reporting.md``) for an :class:`EvalJob`, whose key holds the keys of the training
job, the test data and the fit it uses. Model samples come from the model's own prediction
from the reference state: latent models condition on the posterior over the reference
trajectory up to the reference state (``observe``), state-space models start from the
reference observation (their ``observe`` returns it). Sample seeds derive from (episode
seed, step, stream), so a job is deterministic.

A job builds one :class:`~graphwm.metric.protocol.EvalContext` (extended schema, bandwidths,
one env instance) and passes it to every step: replay, env samples and scoring. Every
evaluation stores both GDD estimators from one Gram computation per transition: ``gdd`` (biased
V-statistic, the paper's definition) and ``gdd_unbiased`` (per transition the signed square
root of the unbiased U-statistic MMD^2, averaged over transitions and episodes as ``gdd``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphwm.metric.factor_metrics import average_metrics, factor_metrics
from graphwm.metric.graph import OBS_KEYS, model_samples_to_metric, stack_graphs
from graphwm.metric.protocol import (
    STREAM_ENV,
    STREAM_MODEL,
    STREAM_PERMUTATION,
    STREAM_POSTERIOR,
    STREAM_SELF,
    EvalContext,
    ReplayedEpisode,
    reference_indices,
    sample_seeds,
)
from graphwm.stages.collect import DataRef, load_episodes
from graphwm.stages.fit import FitJob, load_fitted
from graphwm.stages.train import TrainJob
from graphwm.store.files import content_key
from graphwm.store.records import MultiStepRecord, SelfGddRecord, SingleStepRecord

COMPONENTS = ("node", "graph", "edge", "joint")


@dataclass(frozen=True)
class EvalJob:
    """One evaluation: ``kind`` ``self_gdd``, ``single_step``, ``multi_step``,
    ``validation`` (single-step on the validation split, for the search) or ``curve``
    (single-step of a checkpoint kept during training, :mod:`graphwm.stages.curve`).

    ``data`` is the reference file (test or validation split, ``size`` nodes); ``train`` the
    training job of the evaluated model (None for self-GDD); ``step`` the training step of the
    checkpoint evaluated (None: the final one). ``permutations`` > 0 adds the permutation test
    (single-step). ``threads`` does not change results (not keyed). ``repeat`` > 0: an
    independent redraw of the model samples (and, with ``repeat_env``, of the env samples)
    for measuring evaluation noise (:mod:`graphwm.noise`); keyed only when set, so repeat 0
    is the evaluation itself.
    """

    kind: str
    env: str
    size: int
    seed: int
    data: DataRef
    fit: FitJob
    num_samples: int
    reference_transitions: int
    max_episodes: int | None = None
    horizon: int = 1
    train: TrainJob | None = None
    permutations: int = 0
    alpha: float = 0.05
    device: str = "cpu"
    step: int | None = None
    threads: int = field(default=1, compare=False)
    repeat: int = 0
    repeat_env: bool = False

    @property
    def model(self) -> str | None:
        return None if self.train is None else self.train.model

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "env": self.env,
            "size": self.size,
            "seed": self.seed,
            "data": self.data.key,
            "fit": self.fit.key,
            "num_samples": self.num_samples,
            "reference_transitions": self.reference_transitions,
            "max_episodes": self.max_episodes,
            "horizon": self.horizon,
            "train": None if self.train is None else self.train.key,
            "permutations": self.permutations,
            "alpha": self.alpha,
            "device": self.device,
            # keyed only when set: a final evaluation's payload (and key) is unchanged
            **({"step": self.step} if self.step is not None else {}),
            **({"repeat": self.repeat, "repeat_env": self.repeat_env} if self.repeat else {}),
        }

    @property
    def key(self) -> str:
        return content_key(self.kind, self.describe())


def _train_job(job: EvalJob) -> TrainJob:
    """The training job of the evaluated model (``ValueError`` for a job without one)."""
    if job.train is None:
        raise ValueError(f"a {job.kind} job needs the training job of its model, got train=None")
    return job.train


def _load_model(job: EvalJob, run_dir: Path):
    import torch
    from gdm_models import load_checkpoint

    train = _train_job(job)
    torch.set_num_threads(max(1, job.threads))
    return load_checkpoint(
        train.checkpoint(run_dir, job.step), model_name=train.model, device=job.device
    )


def eval_context(job: EvalJob, run_dir: Path) -> EvalContext:
    """The job's constants, built once: extended schema, fitted bandwidths, one env."""
    bandwidths, _ = load_fitted(job.fit.dir(run_dir))
    return EvalContext.build(job.env, job.size, bandwidths)


def _test_episodes(job: EvalJob, run_dir: Path):
    episodes, seeds = load_episodes(job.data.path(run_dir))
    if job.max_episodes is not None:
        episodes, seeds = episodes[: job.max_episodes], seeds[: job.max_episodes]
    return episodes, seeds


def _episode_mean(values: dict[int, list[float]]) -> float:
    """Mean over episodes of each episode's mean (how the GDD averages transitions)."""
    return float(np.mean([np.mean(v) for v in values.values()]))


def _summarise(
    gdds: list[list[float]], comps: list[list[dict]], unbiased: dict[int, list[float]]
) -> dict[str, Any]:
    per_episode = [float(np.mean(g)) for g in gdds]
    flat = [c for ep in comps for c in ep]
    return {
        "gdd": float(np.mean(per_episode)),
        # the unbiased estimator's GDD, averaged exactly as the GDD (evaluate.py's header)
        "gdd_unbiased": _episode_mean(unbiased),
        "gdd_episodes": per_episode,
        # per episode, per reference transition: the bootstrap of the noise band (graphwm.noise)
        "gdd_transitions": [[float(x) for x in g] for g in gdds],
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


#: the bytes of reference points one evaluation may leave for the next jobs of its process
#: (:func:`reference_points`), and of all it keeps: a worker then replays and samples each
#: test file once for every model it evaluates there, instead of once per model
REFERENCE_CACHE_BYTES = 64 << 20
REFERENCE_CACHE_TOTAL = 256 << 20
_reference_cache: OrderedDict[tuple, tuple[list[ReferencePoint], int]] = OrderedDict()


def reference_points(
    job: EvalJob,
    run_dir: Path,
    ctx: EvalContext,
    horizon: int,
    keep_observations: bool,
    stream: int = STREAM_ENV,
) -> Iterator[ReferencePoint]:
    """Replay every test episode and yield its reference points with kappa env samples each.

    Only actions that exist in the reference episode are followed, so the last reference
    points get fewer than ``horizon`` steps.

    The points depend on the test file and the sampling settings, not on the model: the last
    ones this process made (at most :data:`REFERENCE_CACHE_BYTES` per job) are kept, keyed by
    those settings and the file's size and modification time, and yielded again to the next
    job that asks for them. Their arrays are read-only, so no job can change another's."""
    path = job.data.path(run_dir)
    stat = path.stat()
    key = (
        str(path.resolve()), stat.st_size, stat.st_mtime_ns, job.env, job.size, job.max_episodes,
        job.num_samples, job.reference_transitions, job.repeat if job.repeat_env else 0,
        horizon, keep_observations, stream,
    )  # fmt: skip
    if key in _reference_cache:
        _reference_cache.move_to_end(key)
        yield from _reference_cache[key][0]
        return
    kept: list[ReferencePoint] | None = []
    size = 0
    frozen: set[int] = set()  # the replays whose observations are counted (once per episode)
    for point in _make_reference_points(job, run_dir, ctx, horizon, keep_observations, stream):
        if kept is not None:
            size += _freeze(point, frozen)
            if size <= REFERENCE_CACHE_BYTES:
                kept.append(point)
            else:  # too large to keep: this job's points are made and dropped one by one
                kept = None
        yield point
    if kept is not None:
        _reference_cache[key] = (kept, size)
        while sum(n for _, n in _reference_cache.values()) > REFERENCE_CACHE_TOTAL:
            _reference_cache.popitem(last=False)


def _freeze(point: ReferencePoint, frozen: set[int]) -> int:
    """Make ``point``'s sample arrays, and its episode's observations unless ``frozen`` holds
    that replay, read-only; their bytes."""
    arrays = [a for s in point.env_sets for a in s.values()] + [point.env_invalid]
    if id(point.replay) not in frozen:  # the points of an episode share one replay
        frozen.add(id(point.replay))
        arrays += [a for o in point.replay.observations or [] for a in o.values()]
    for a in arrays:
        a.flags.writeable = False
    return sum(a.nbytes for a in arrays)


def _make_reference_points(
    job: EvalJob,
    run_dir: Path,
    ctx: EvalContext,
    horizon: int,
    keep_observations: bool,
    stream: int,
) -> Iterator[ReferencePoint]:
    kappa = job.num_samples
    for index, (episode, seed) in enumerate(zip(*_test_episodes(job, run_dir), strict=True)):
        seed = int(seed)
        length = len(episode["reward"])
        refs = reference_indices(length, job.reference_transitions)
        replay = ctx.replay(
            seed, episode["actions"], refs, keep_observations=keep_observations, check=episode
        )
        for t in map(int, refs):
            steps = min(horizon, length - t)
            graphs, invalid = ctx.samples(
                replay.snapshots[t],
                episode["actions"][t : t + steps],
                sample_seeds(seed, t, stream, kappa, job.repeat if job.repeat_env else 0),
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


#: most R * kappa * N^2 entries of one batched imagination of R reference transitions (each
#: (R * kappa, N, N) tensor of the step: 512 MiB in float32): 4 transitions at kappa = 30 and
#: N = 1000, all 20 of an episode up to N = 470
BATCH_PAIR_ELEMS = 1 << 27


class ModelSampler:
    """The model's rollouts from each reference point of the episodes being evaluated.

    Latent models condition on the posterior over the reference trajectory up to the
    reference state. The posterior latents of all reference points of an episode come from
    one pass over it (``observe_at``), seeded per episode; imagination is seeded per point.

    ``batch`` (default: on a GPU): the imaginations of consecutive reference points of an
    episode run as one batch (``WorldModel.imagine_batch``, up to :data:`BATCH_PAIR_ELEMS`),
    each point from its own seed, so the samples are those of the per-point path up to float
    rounding; on the CPU the per-point path is as fast and is the default.
    """

    def __init__(self, model, num_samples: int, repeat: int = 0, batch: bool | None = None) -> None:
        self.model = model
        self.num_samples = num_samples
        self.repeat = repeat  # the evaluation repeat of the model's seeds (sample_seeds)
        self.batch = model.device.type == "cuda" if batch is None else batch
        self._episode: int | None = None
        self._latents: dict[int, Any] = {}
        self._preds: dict[int, list[dict[str, np.ndarray]]] = {}

    def __call__(self, point: ReferencePoint) -> list[dict[str, np.ndarray]]:
        import torch

        replay = point.replay
        with torch.no_grad():  # evaluation only: no autograd graph over the posterior
            if point.episode_index != self._episode:
                steps = sorted(replay.snapshots)
                # reference_points(..., keep_observations=True) for every model job
                assert replay.observations is not None
                obs = {k: np.stack([o[k] for o in replay.observations]) for k in OBS_KEYS}
                seed = sample_seeds(point.seed, 0, STREAM_POSTERIOR, 1, self.repeat)[0]
                latents = self.model.observe_at(obs, replay.action_nodes, steps, generator=seed)
                self._latents = dict(zip(steps, latents, strict=True))
                self._episode = point.episode_index
                self._preds = {}
            if self.batch:
                if point.t not in self._preds:
                    self._imagine_from(point)
                return self._preds.pop(point.t)
            actions = replay.action_nodes[point.t : point.t + len(point.env_sets)]
            seed = sample_seeds(point.seed, point.t, STREAM_MODEL, 1, self.repeat)[0]
            preds = self.model.imagine_multi(
                self._latents[point.t], actions, self.num_samples, generator=seed
            )
        return [model_samples_to_metric(p) for p in preds]

    def _imagine_from(self, point: ReferencePoint) -> None:
        """Imagine ``point`` and the next reference points of its episode with as many
        actions, as one batch within :data:`BATCH_PAIR_ELEMS`."""
        replay, length = point.replay, len(point.replay.action_nodes)
        horizon = len(point.env_sets)  # min(job horizon, length - point.t)
        n = replay.action_nodes.shape[1]
        size = max(1, BATCH_PAIR_ELEMS // max(1, self.num_samples * n * n))
        later = [t for t in sorted(self._latents) if t >= point.t]
        chosen = [t for t in later if min(horizon, length - t) == horizon][:size]
        preds = self.model.imagine_batch(
            [self._latents[t] for t in chosen],
            [replay.action_nodes[t : t + horizon] for t in chosen],
            self.num_samples,
            [sample_seeds(point.seed, t, STREAM_MODEL, 1, self.repeat)[0] for t in chosen],
        )
        for t, rollout in zip(chosen, preds, strict=True):
            self._preds[t] = [model_samples_to_metric(p) for p in rollout]


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


def single_step_job(job: EvalJob, run_dir: str | Path) -> SingleStepRecord:
    """Single-step GDD of one trained model on one test size (paper section 6.1).

    With ``job.permutations`` > 0, each reference transition also gets gdd-metric's
    permutation test (GDD statistic, ``job.permutations`` relabelings seeded from the
    transition); ``indistinguishable`` is the share with p >= ``job.alpha``. Both estimators
    come from one Gram computation per transition: ``gdd`` the biased one (the paper's),
    ``gdd_unbiased`` the unbiased one (see :func:`self_gdd_job`), averaged alike.
    """
    run_dir = Path(run_dir)
    ctx = eval_context(job, run_dir)
    model = _load_model(job, run_dir)
    factors: list[dict] = []
    p_values: list[float] = []
    unbiased: dict[int, list[float]] = {}  # per episode: signed sqrt of the unbiased MMD^2

    sampler = ModelSampler(model, job.num_samples, job.repeat)

    def score(point: ReferencePoint):
        model_set = sampler(point)[0]
        env_set, terminal = point.env_sets[0], point.terminal[0]
        # both estimators (and the test) from one Gram computation
        seed = sample_seeds(point.seed, point.t, STREAM_PERMUTATION, 1)[0]
        result, u, p = ctx.gdd_both(model_set, env_set, terminal, job.permutations, seed)
        unbiased.setdefault(point.episode_index, []).append(u)
        if p is not None:
            p_values.append(p)
        factors.append(factor_metrics(model_set, env_set, ctx.metric_schema, terminal))
        return result.gdd, _components(result)

    points = reference_points(job, run_dir, ctx, 1, keep_observations=True)
    gdds, comps = _per_episode(points, score)
    summary = _summarise(gdds, comps, unbiased)
    share = None
    if job.permutations:
        share = float(np.mean(np.asarray(p_values) >= job.alpha))
    return SingleStepRecord(
        kind=job.kind,
        env=job.env,
        model=_train_job(job).model,
        seed=job.seed,
        size=job.size,
        factor_metrics=average_metrics(factors),
        indistinguishable=share,
        num_permutations=job.permutations or None,
        alpha=job.alpha if job.permutations else None,
        **summary,
    )


def self_gdd_job(job: EvalJob, run_dir: str | Path) -> SelfGddRecord:
    """GDD of the environment against itself under the same protocol (paper's sanity table).

    The second sample set comes from an independent seed stream of the same reference states.
    Both estimators are reported on the same samples: the biased V-statistic (the paper's
    definition, ``gdd``), which is positive even for two sample sets of one distribution (its
    squared value has expectation of order 1/kappa), and the unbiased U-statistic, whose
    expectation is 0 there. ``gdd_unbiased`` averages the signed square root of each
    transition's unbiased MMD^2 exactly as ``gdd`` averages the GDD (over reference transitions,
    then episodes), so noise shows on both sides of 0 instead of being clamped away; per
    transition it never exceeds the biased GDD (the kernel is largest on the diagonal).
    """
    run_dir = Path(run_dir)
    ctx = eval_context(job, run_dir)
    kappa = job.num_samples
    unbiased: dict[int, list[float]] = {}  # per episode: signed sqrt of the unbiased MMD^2

    def score(point: ReferencePoint):
        snapshot = point.replay.snapshots[point.t]
        action = point.replay.actions[point.t : point.t + 1]
        seeds = sample_seeds(point.seed, point.t, STREAM_SELF, kappa)
        graphs, _ = ctx.samples(snapshot, action, seeds)
        other = stack_graphs(graphs[0])
        result, u, _ = ctx.gdd_both(other, point.env_sets[0], point.terminal[0])
        unbiased.setdefault(point.episode_index, []).append(u)
        return result.gdd, _components(result)

    points = reference_points(job, run_dir, ctx, 1, keep_observations=False)
    gdds, comps = _per_episode(points, score)
    return SelfGddRecord(
        kind="self_gdd",
        env=job.env,
        seed=job.seed,
        size=job.size,
        **_summarise(gdds, comps, unbiased),
    )


def _invalid_rate_model(preds: list[dict], actions: np.ndarray) -> np.ndarray:
    """Per step h: fraction of samples whose action h was not allowed by the predicted mask
    after step h-1 (step 1 starts from the reference state, where the action is valid)."""
    rates = [0.0]
    for h in range(1, len(actions)):
        selected = actions[h].astype(bool)
        mask = preds[h - 1]["node_categorical"][..., -1].astype(bool)  # appended action_mask
        rates.append(float(np.mean(~np.all(mask[:, selected], axis=1))))
    return np.asarray(rates)


def multi_step_job(job: EvalJob, run_dir: str | Path) -> MultiStepRecord:
    """GDD and invalid-action rates of 1..H-step rollouts along the reference actions.

    Only reference states with at least h remaining reference actions contribute to horizon
    h. A reference rollout that terminated at its h-th step is scored on reward and
    continuation at that horizon. ``gdd_unbiased``: per horizon the unbiased estimator's GDD
    (each transition's signed square root of the unbiased MMD^2), averaged as ``gdd``.
    """
    run_dir = Path(run_dir)
    ctx = eval_context(job, run_dir)
    model = _load_model(job, run_dir)
    horizon = job.horizon
    per_h: dict[int, dict[str, list]] = {
        h: {"gdd": [], "gdd_u": [], **{k: [] for k in COMPONENTS}, "inv_m": [], "inv_e": []}
        for h in range(1, horizon + 1)
    }
    sampler = ModelSampler(model, job.num_samples, job.repeat)
    for point in reference_points(job, run_dir, ctx, horizon, keep_observations=True):
        model_sets = sampler(point)
        nodes = point.replay.action_nodes[point.t : point.t + len(model_sets)]
        inv_m = _invalid_rate_model(model_sets, nodes)
        for h in range(1, len(point.env_sets) + 1):
            result, u, _ = ctx.gdd_both(
                model_sets[h - 1], point.env_sets[h - 1], point.terminal[h - 1]
            )
            acc = per_h[h]
            acc["gdd"].append(result.gdd)
            acc["gdd_u"].append(u)
            for k in COMPONENTS:
                acc[k].append(getattr(result, k))
            acc["inv_m"].append(inv_m[h - 1])
            acc["inv_e"].append(float(point.env_invalid[h - 1].mean()))

    def mean(values):
        return float(np.mean(values)) if values else float("nan")

    hs = list(range(1, horizon + 1))
    return MultiStepRecord(
        kind="multi_step",
        env=job.env,
        model=_train_job(job).model,
        seed=job.seed,
        size=job.size,
        horizons=hs,
        gdd=[mean(per_h[h]["gdd"]) for h in hs],
        gdd_unbiased=[mean(per_h[h]["gdd_u"]) for h in hs],
        components={k: [mean(per_h[h][k]) for h in hs] for k in COMPONENTS},
        invalid_rate_model=[mean(per_h[h]["inv_m"]) for h in hs],
        invalid_rate_env=[mean(per_h[h]["inv_e"]) for h in hs],
    )
