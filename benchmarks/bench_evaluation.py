"""Cost of evaluating one reference transition, part by part, before and after issue 39.

For each env and test size N it records one reference episode, fits the GDD bandwidths on a
few training-size episodes and replays the episode; for each model (freshly initialised at
the paper's hyperparameters: the cost does not depend on training) it then scores
``--refs`` reference transitions as ``graphwm.stages.evaluate.single_step_job`` does, twice,
alternately, in the same process:

* old: the ``"torch"`` backend (:mod:`gdm_models.backends`): every kappa sample's pairwise
  edge-MLP block computed with a SiLU per pair and hidden unit, no compiled loops, the GDD
  and the permutation
  test each validating the sets and building the Gram matrices;
* new: bitwise-equal samples' edge-MLP blocks computed once
  (:func:`gdm_models.adjacency.same_rows`), the pairwise SiLUs from per-node exponentials
  (the ``"auto"`` backend's ``exp_split``: float rounding apart, the same
  logits), the GDD and the test from one Gram computation
  (:meth:`graphwm.metric.protocol.EvalContext.gdd_and_p_value`).

The parts: ``replay`` (the episode's replay, per reference transition), ``env`` (kappa
environment samples and their stacking), ``observe`` (the posterior pass over the episode, per
reference transition), ``imagine`` (kappa model samples), ``metric`` (GDD, permutation test,
factor-wise metrics). It prints milliseconds per transition, the old / new ratio and how far
the two paths' GDDs are apart (``|dGDD|``: 0 when the model samples are the same bit for bit;
the split SiLU can move a pair whose logit is within float rounding of its threshold); it
stops if they differ by more than 1e-6 or the p-values differ. Proportions are what it is for
on a busy machine; time absolute numbers on an idle one.

    uv run python benchmarks/bench_evaluation.py
    uv run python benchmarks/bench_evaluation.py --envs OD --sizes 20 200 1000 --refs 1
    uv run python benchmarks/bench_evaluation.py --sizes 200 --models gdm --profile
    uv run python benchmarks/bench_evaluation.py --metric-only --repeats 5
    uv run python benchmarks/bench_evaluation.py --sizes 20 200 1000 --extrapolate paper
    uv run python benchmarks/bench_evaluation.py --sizes 20 200 1000 --timings 3 --extrapolate paper
    uv run python benchmarks/bench_evaluation.py --models all --timings 2 --extrapolate paper

``--metric-only`` times the metric half alone, best of ``--repeats`` old and new alternately,
on two sets of kappa environment samples of one transition, one of them with 1.8% of its node
pairs toggled (a freshly initialised GDM's edge-update rate, sigmoid(-4)) to stand in for
model samples.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

MODELS = ("gdm", "gdm:no-graph-state", "vanilla-gwm", "ea-gwm", "g-rssm")
#: the paper preset's ablations (``--models all`` times them too)
ABLATIONS = (
    "gdm:no-graph-state",
    "gdm:no-beta-h",
    "gdm:no-h-plus",
    "gdm:bernoulli-adj",
    "gdm:all-pairs-mp",
    "gdm:no-recurrent-adj",
    "gdm:no-graph-state+no-h-plus+no-recurrent-adj",
)
PARTS = ("replay", "env", "observe", "imagine", "metric")


def _setup(env: str, n: int, refs: int):
    from gdd_metric import fit_bandwidths

    from graphwm.envs import env_schema
    from graphwm.episodes import record_episode
    from graphwm.metric.graph import extend_schema, stack_graphs
    from graphwm.metric.protocol import (
        STREAM_ENV,
        EvalContext,
        reference_indices,
        sample_seeds,
    )
    from graphwm.stages.fit import bandwidth_transitions

    schema = env_schema(env)
    small = [record_episode(env, s, seed=100 + s) for s in (15, 20, 25)]
    pairs = bandwidth_transitions(small, 8, np.random.default_rng(0))
    ctx = EvalContext.build(env, n, fit_bandwidths(pairs, extend_schema(schema)))
    episode = record_episode(env, n, seed=7)
    all_refs = reference_indices(len(episode["reward"]), 20)
    start = time.perf_counter()
    replay = ctx.replay(7, episode["actions"], all_refs, keep_observations=True, check=episode)
    replay_s = (time.perf_counter() - start) / len(all_refs)
    chosen = [int(t) for t in all_refs[:: max(1, len(all_refs) // refs)][:refs]]
    env_sets, env_s = {}, 0.0
    for t in chosen:
        start = time.perf_counter()
        seeds = sample_seeds(7, t, STREAM_ENV, 30)
        graphs, _ = ctx.samples(replay.snapshots[t], episode["actions"][t : t + 1], seeds)
        env_sets[t] = stack_graphs(graphs[0])
        env_s += time.perf_counter() - start
    return schema, small, ctx, replay, all_refs, chosen, env_sets, replay_s, env_s / len(chosen)


def _score(model, ctx, replay, latents, t, env_set, permutations: int, new: bool):
    """One reference transition as single_step_job scores it: (times, gdd, p-value)."""
    import torch
    from gdm_models.backends import use_backend

    from graphwm.metric.factor_metrics import factor_metrics
    from graphwm.metric.graph import model_samples_to_metric

    terminal = bool(replay.terminated[t])
    start = time.perf_counter()
    with torch.no_grad(), use_backend("auto" if new else "torch"):
        preds = model.imagine_multi(latents[t], replay.action_nodes[t : t + 1], 30, generator=t)
    model_set = model_samples_to_metric(preds[0])
    mid = time.perf_counter()
    if new and hasattr(ctx, "gdd_both"):  # today's evaluation: both estimators, one Gram
        result, _, p = ctx.gdd_both(model_set, env_set, terminal, permutations, t)
    elif new:  # a tree before the unbiased GDD in every record
        result, p = ctx.gdd_and_p_value(model_set, env_set, terminal, permutations, t)
    else:
        result = ctx.gdd(model_set, env_set, terminal)
        p = ctx.p_value(model_set, env_set, terminal, permutations, t)
    factor_metrics(model_set, env_set, ctx.metric_schema, terminal)
    end = time.perf_counter()
    return {"imagine": mid - start, "metric": end - mid}, result.gdd, p


def _metric_only(env: str, n: int, repeats: int, permutations: int) -> None:
    from graphwm.metric.factor_metrics import factor_metrics
    from graphwm.metric.graph import stack_graphs
    from graphwm.metric.protocol import STREAM_SELF, sample_seeds

    _, _, ctx, replay, _, chosen, env_sets, _, _ = _setup(env, n, 1)
    t = chosen[0]
    action = replay.actions[t : t + 1]
    graphs, _ = ctx.samples(replay.snapshots[t], action, sample_seeds(7, t, STREAM_SELF, 30))
    model_set = stack_graphs(graphs[0])
    flip = np.triu(np.random.default_rng(0).random(model_set["adjacency"].shape) < 0.018, 1)
    model_set["adjacency"] = model_set["adjacency"] ^ (flip | flip.transpose(0, 2, 1))
    env_set, terminal = env_sets[t], bool(replay.terminated[t])
    best = {"old": np.inf, "new": np.inf}
    for _ in range(repeats):
        for path in best:
            start = time.perf_counter()
            if path == "new":
                ctx.gdd_and_p_value(model_set, env_set, terminal, permutations, 0)
            else:
                ctx.gdd(model_set, env_set, terminal)
                ctx.p_value(model_set, env_set, terminal, permutations, 0)
            factor_metrics(model_set, env_set, ctx.metric_schema, terminal)
            best[path] = min(best[path], time.perf_counter() - start)
    old, new = best["old"], best["new"]
    print(f"| {env} | {n} | {1e3 * old:.1f} | {1e3 * new:.1f} | {old / new:.2f} |", flush=True)


#: the parts of a transition that stay on the CPU when the model half runs on a GPU
METRIC_HALF = ("replay", "env", "metric")


def _per_size(costs: dict[int, float], n: int) -> float:
    """Cost at ``n`` from the measured sizes: the polynomial in N of degree (measured sizes
    - 1, at most 2) through them (a + b N + c N^2 through three: the pairwise terms are
    quadratic), never below the cheapest measured size's."""
    sizes = sorted(costs)
    coef = np.polyfit(sizes, [costs[k] for k in sizes], min(2, len(sizes) - 1))
    return max(float(np.polyval(coef, n)), min(costs.values()))


def extrapolate(preset_name: str, measured: dict, env: str) -> None:
    """:func:`extrapolate_with` every measured model, and, where ablations were measured,
    once more with each ablation at the GDM's cost (the figure without them)."""
    extrapolate_with(preset_name, measured, env)
    if any(":" in m for m, _ in measured):
        print("  with every ablation at the GDM's cost instead:")
        plain = {k: v for k, v in measured.items() if ":" not in k[0]}
        extrapolate_with(preset_name, plain, env)


def extrapolate_with(preset_name: str, measured: dict, env: str) -> None:
    """CPU-hours of the preset's single-step evaluations, old and new, from ``env``'s
    per-transition costs (``measured[(model, N)][path][part]`` seconds) used for every env:
    a model not measured costs what the GDM does (its ablations); all on the CPU, and the
    metric half alone (replay, env samples, GDD and test: the CPU's share when the model half
    runs on a GPU). Transitions per job and size: reference transitions x test episodes."""
    from graphwm.checks import parse_checked
    from graphwm.jobs import training_jobs
    from graphwm.pipeline import preset_dict

    preset = parse_checked(preset_dict(preset_name, {"device": "cpu"}))
    jobs = training_jobs(preset)
    per_size = preset.evaluate.reference_transitions * preset.collect.test_episodes
    models = {m for m, _ in measured}
    hours = {(path, half): 0.0 for path in ("old", "new") for half in ("all", "metric")}
    for job in jobs:
        model = job.model if job.model in models else "gdm"
        for path in ("old", "new"):
            for half, parts in (("all", PARTS), ("metric", METRIC_HALF)):
                costs = {
                    n: sum(p[path][k] for k in parts)
                    for (m, n), p in measured.items()
                    if m == model
                }
                for n in preset.test_sizes(job.env):
                    hours[path, half] += per_size * _per_size(costs, n) / 3600
    print(
        f"\n{preset_name} preset, {len(jobs)} training jobs x their test sizes x {per_size} "
        f"transitions, {env}'s per-transition costs for every env (models not measured "
        "cost the GDM's):"
    )
    for half, what in (("all", "all on the CPU"), ("metric", "metric half (model on a GPU)")):
        old, new = hours["old", half], hours["new", half]
        print(f"  {what}: {old:,.0f} -> {new:,.0f} CPU-hours ({old / new:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["OD"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[20, 200, 1000])
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(MODELS),
        help='model names, or "all" (with every ablation)',
    )
    parser.add_argument("--refs", type=int, default=1, help="reference transitions timed")
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument(
        "--timings",
        type=int,
        default=1,
        help="time each transition's model and metric parts this often (old and new "
        "alternately) and keep the least: steadier on a machine with noisy timings",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile of the new path")
    parser.add_argument("--metric-only", action="store_true", help="the metric half alone")
    parser.add_argument("--repeats", type=int, default=5, help="--metric-only: best of")
    parser.add_argument(
        "--extrapolate", metavar="PRESET", help="scale the first env's costs to PRESET's jobs"
    )
    args = parser.parse_args()
    if args.models == ["all"]:
        args.models = ["gdm", *ABLATIONS, "vanilla-gwm", "ea-gwm", "g-rssm"]
    if args.metric_only:
        print("| env | N | metric half old ms | new ms | ratio |\n|---|--:|--:|--:|--:|")
        for env in args.envs:
            for n in args.sizes:
                _metric_only(env, n, args.repeats, args.permutations)
        return
    import torch
    from gdm_models import FeatureScaler, make_model

    from graphwm.envs import model_hyperparameters
    from graphwm.metric.graph import OBS_KEYS
    from graphwm.metric.protocol import STREAM_POSTERIOR, sample_seeds

    torch.set_num_threads(1)  # an evaluation job runs one thread (EvalJob.threads)
    head = " | ".join(f"{p} old / new" for p in PARTS)
    print(f"| env | N | model | {head} | total old / new s | ratio | max abs dGDD |")
    print("|---|--:|---|" + "--:|" * (len(PARTS) + 3))
    profile = cProfile.Profile() if args.profile else None
    measured: dict[tuple[str, int], dict] = {}
    for env in args.envs:
        for n in args.sizes:
            schema, small, ctx, replay, refs, chosen, env_sets, replay_s, env_s = _setup(
                env, n, args.refs
            )
            obs = {k: np.stack([o[k] for o in replay.observations]) for k in OBS_KEYS}
            for name in args.models:
                torch.manual_seed(0)
                scaler = FeatureScaler.fit(small, schema)
                model = make_model(
                    name, schema, scaler, **model_hyperparameters(name, env)["model"]
                )
                model.eval()
                seed = sample_seeds(7, 0, STREAM_POSTERIOR, 1)[0]
                steps = sorted(replay.snapshots)
                start = time.perf_counter()
                with torch.no_grad():
                    lat = model.observe_at(obs, replay.action_nodes, steps, generator=seed)
                observe_s = (time.perf_counter() - start) / len(refs)
                latents = dict(zip(steps, lat, strict=True))
                parts = {
                    path: {"replay": replay_s, "env": env_s, "observe": observe_s}
                    for path in ("old", "new")
                }
                gap = 0.0
                for t in chosen:
                    scored, best = {}, {"old": {}, "new": {}}
                    for _ in range(args.timings):  # old and new alternately, same transition
                        for path in ("old", "new"):
                            if profile is not None and path == "new":
                                profile.enable()
                            times, value, p = _score(
                                model, ctx, replay, latents, t, env_sets[t],
                                args.permutations, path == "new",
                            )  # fmt: skip
                            if profile is not None and path == "new":
                                profile.disable()
                            scored[path] = (value, p)
                            for k, v in times.items():  # the least of the timings
                                best[path][k] = min(best[path].get(k, np.inf), v)
                    for path, times in best.items():
                        for k, v in times.items():
                            parts[path][k] = parts[path].get(k, 0.0) + v / len(chosen)
                    (g_old, p_old), (g_new, p_new) = scored["old"], scored["new"]
                    gap = max(gap, abs(g_old - g_new))
                    if not (abs(g_old - g_new) <= 1e-6 and p_old == p_new):
                        raise AssertionError(f"{env} N={n} {name} t={t}: {scored}")
                if env == args.envs[0]:
                    measured[name, n] = parts
                old, new = (sum(parts[p].values()) for p in ("old", "new"))
                cells = " | ".join(
                    f"{1e3 * parts['old'][k]:.1f} / {1e3 * parts['new'][k]:.1f}" for k in PARTS
                )
                total = f"{old:.3f} / {new:.3f} | {old / new:.2f} | {gap:.1e}"
                print(f"| {env} | {n} | {name} | {cells} | {total} |", flush=True)
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    if args.extrapolate:
        if len(args.sizes) < 3:
            raise SystemExit("--extrapolate needs three sizes or more, e.g. --sizes 20 200 1000")
        extrapolate(args.extrapolate, measured, args.envs[0])


if __name__ == "__main__":
    main()
