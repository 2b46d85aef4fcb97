"""Estimate the compute cost of a preset from per-job times measured on this device.

``graphwm estimate-cost --preset paper --device cuda`` measures, for every model and env of the
preset at the paper's hyperparameters: seconds per training step (batch 8, sequence 20, on
freshly recorded training-size episodes) and seconds per evaluated transition at two graph
sizes, extrapolated to the other test sizes with the O(N^2) cost of the pairwise terms. It
multiplies these by the preset's job counts.

An evaluated transition has two halves, reported apart: the model half (posterior +
kappa-sample imagination) runs on the preset's device (``EvalJob.device``) and is timed on
``device``; the metric half (kappa environment samples, the GDD, the preset's permutation test
and the factor-wise metrics: numpy and the envs) always runs on the CPU and is timed on this
machine's CPU. On a CPU run both are CPU-hours; on a GPU node the model half is GPU-hours and
the metric half CPU-hours of the same node.

With ``train.ensemble = K`` > 1 the seeds of a configuration train in ensembles of <= K
(:func:`graphwm.stages.ensemble.ensemble_groups`); the estimate then also measures one ensemble
step of each group size k on the device, as ``gdm_models.train_ensemble`` runs it ("auto":
the member engine, captured on CUDA, for models that support it, else the per-member loop),
as a ratio r(k) to the single step, and
training costs ``s/step x steps x sum over groups of r(k)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from graphwm.checks import parse_checked
from graphwm.envs import env_schema
from graphwm.episodes import record_episode
from graphwm.pipeline import training_jobs
from graphwm.stages.ensemble import ensemble_groups


@dataclass
class CostLine:
    """Measured unit costs and the resulting hours of one (env, model)."""

    env: str
    model: str
    sec_per_step: float
    train_jobs: int
    steps_per_job: int
    sec_per_transition: dict[int, float]
    eval_transitions: dict[int, int]
    #: members of each training unit (``(1,) * train_jobs`` without ensembles)
    groups: tuple[int, ...] = ()
    #: measured ensemble step / single step per group size k > 1
    step_ratio: dict[int, float] = field(default_factory=dict)
    #: seconds per transition of the metric half (env samples, GDD, test; on the CPU)
    sec_per_transition_cpu: dict[int, float] = field(default_factory=dict)

    def ratio(self, k: int) -> float:
        """Cost of one step of a k-member unit in single steps (1 for a single run)."""
        return 1.0 if k == 1 else self.step_ratio[k]

    @property
    def train_units(self) -> int:
        """Units of work: ensembles and single jobs."""
        return len(self.groups) if self.groups else self.train_jobs

    @property
    def train_hours(self) -> float:
        units = sum(self.ratio(k) for k in self.groups) if self.groups else self.train_jobs
        return self.sec_per_step * self.steps_per_job * units / 3600

    @property
    def eval_hours(self) -> float:
        """Hours of the model half of evaluation on the measured device."""
        return sum(self.sec_per_transition[n] * c for n, c in self.eval_transitions.items()) / 3600

    @property
    def eval_cpu_hours(self) -> float:
        """CPU-hours of the metric half of evaluation (env samples, GDD, permutation test)."""
        per = self.sec_per_transition_cpu
        return sum(per.get(n, 0.0) * c for n, c in self.eval_transitions.items()) / 3600


def _episodes(env: str, sizes, per_size: int) -> list[dict]:
    return [
        record_episode(env, n, seed=10_000_000 + 100 * n + i)
        for n in sizes
        for i in range(per_size)
    ]


def _model(env: str, model: str, device: str):
    import torch
    from gdm_models import FeatureScaler, make_model

    from graphwm.envs import model_hyperparameters

    eps = _episodes(env, (15, 20, 25), 2)
    schema = env_schema(env)
    values = model_hyperparameters(model, env)
    torch.manual_seed(0)
    built = make_model(model, schema, FeatureScaler.fit(eps, schema), **values["model"])
    return built.to(device), eps, values


def _engine_step(models, episodes, schema, hyper, device: str, strategy: str, seed0: int = 0):
    """One training step of ``models`` (1 model, or K members) exactly as ``gdm_models.train``
    (``strategy="loop"``) or ``train_ensemble`` runs it on ``device``: the trainers' engine
    (``gdm_models.training.engines.make_engine``, the model's training hyperparameters; the static
    step captured as one CUDA graph on CUDA), each member drawing from its own sampler and
    generator."""
    import torch
    from gdm_models import EpisodeDataset, EpochSampler, TrainConfig
    from gdm_models.training.engines import make_engine

    # the model's training hyperparameters; TrainConfig's defaults where it leaves one out
    config = TrainConfig(**hyper["train"])
    bs, seq_len = config.batch_size, config.seq_len
    ds = EpisodeDataset(episodes, schema, seq_len=seq_len)
    for m in models:
        m.to(device).train()
    engine = make_engine(models, ds, config, strategy)
    engine.build(list(range(len(models))), None)
    samplers = [EpochSampler(ds, bs, seq_len, seed=seed0 + s) for s in range(len(models))]
    gens = [torch.Generator(device=device).manual_seed(seed0 + s) for s in range(len(models))]

    def step() -> None:
        engine.step(samplers, gens)
        for k in range(len(gens)):  # a failed capture hands fresh generators
            gens[k] = engine.current_generator(gens[k])

    return step


def _timed(steps_fns, steps: int, device: str, warmup: int = 4) -> list[float]:
    """Seconds per call of each function, timed alternately after ``warmup`` calls (on CUDA
    the warm-up and the capture of the static step)."""
    import torch

    for _ in range(warmup):
        for fn in steps_fns:
            fn()
    elapsed = [0.0] * len(steps_fns)
    for _ in range(steps):
        for i, fn in enumerate(steps_fns):
            start = time.perf_counter()
            fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed[i] += time.perf_counter() - start
    return [e / steps for e in elapsed]


def _time_training(model, episodes, schema, hyper, steps: int, device: str) -> float:
    """Seconds per training step as ``gdm_models.train`` runs it on ``device`` (its engine)."""
    step = _engine_step([model], episodes, schema, hyper, device, "loop")
    return _timed([step], steps, device)[0]


def _time_ensemble_ratio(
    env: str, name: str, k: int, episodes, hyper, steps: int, device: str
) -> float:
    """One k-member ensemble step / one single step, timed alternately on ``device``, both as
    ``train_ensemble`` runs them: the member engine (on CUDA its static step captured as one
    CUDA graph) for a :class:`~gdm_models.MemberModel`, else the per-member loop."""
    import torch
    from gdm_models import FeatureScaler, MemberModel, make_model

    schema = env_schema(env)
    scaler = FeatureScaler.fit(episodes, schema)

    def engine(n: int):
        members = []
        for s in range(n):
            torch.manual_seed(s)
            members.append(make_model(name, schema, scaler, **hyper["model"]))
        # train_ensemble's "auto": the member engine for a MemberModel, else the loop
        strategy = "members" if isinstance(members[0], MemberModel) else "loop"
        return _engine_step(members, episodes, schema, hyper, device, strategy)

    single, ensemble = _timed([engine(1), engine(k)], steps, device)
    return ensemble / single


def _bandwidths(env: str, episodes: list[dict]):
    """GDD bandwidths fitted on the probe's training-size episodes (as the fit stage does)."""
    from gdd_metric import fit_bandwidths

    from graphwm.metric.graph import extend_schema
    from graphwm.stages.fit import bandwidth_transitions

    pairs = bandwidth_transitions(episodes, 8, np.random.default_rng(0))
    return fit_bandwidths(pairs, extend_schema(env_schema(env)))


def _time_transition(
    model, env: str, n: int, kappa: int, bandwidths=None, permutations: int = 0
) -> tuple[float, float]:
    """Seconds of one evaluated transition at ``n`` nodes: (model half on the model's device,
    metric half on the CPU: kappa env samples, the GDD with ``permutations`` relabelings and the
    factor-wise metrics, as ``single_step_job`` scores it; 0 without ``bandwidths``)."""
    import torch

    from graphwm.metric.factor_metrics import factor_metrics
    from graphwm.metric.graph import model_samples_to_metric, stack_graphs
    from graphwm.metric.protocol import EvalContext, sample_seeds

    seed = 20_000_000 + n
    ep = record_episode(env, n, seed=seed)
    t = min(5, len(ep["reward"]) - 1)
    obs = {
        k: ep[k][: t + 1]
        for k in ep
        if k not in ("actions", "action_nodes", "reward", "terminated", "truncated")
    }
    start = time.perf_counter()
    latent = model.observe(obs, ep["action_nodes"][:t], generator=0)
    pred = model.imagine(latent, ep["action_nodes"][t], kappa, generator=1)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    model_s = time.perf_counter() - start
    if bandwidths is None:
        return model_s, 0.0
    ctx = EvalContext.build(env, n, bandwidths)
    replay = ctx.replay(seed, ep["actions"], [t])
    start = time.perf_counter()
    graphs, _ = ctx.samples(
        replay.snapshots[t], ep["actions"][t : t + 1], sample_seeds(seed, t, 0, kappa)
    )
    env_set, model_set = stack_graphs(graphs[0]), model_samples_to_metric(pred)
    terminal = bool(replay.terminated[t])
    # both estimators and the test from one Gram computation, as single_step_job scores
    ctx.gdd_both(model_set, env_set, terminal, permutations, 0)
    factor_metrics(model_set, env_set, ctx.metric_schema, terminal)
    return model_s, time.perf_counter() - start


def _quadratic(probes: dict[int, float], sizes) -> dict[int, float]:
    """a + b N^2 through the two probes (pairwise terms dominate at large N) at ``sizes``."""
    (n0, s0), (n1, s1) = sorted(probes.items())
    b = max(s1 - s0, 0.0) / (n1**2 - n0**2)
    a = max(s0 - b * n0**2, 0.0)
    return {n: a + b * n**2 for n in sizes}


def estimate(
    preset, device: str = "cpu", steps: int = 5, probe_sizes: tuple[int, int] = (20, 50)
) -> list[CostLine]:
    """Measure unit costs on ``device`` and scale them to the preset's job counts."""
    import torch

    preset = parse_checked(preset)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t, c = preset.train, preset.collect
    per_job = (
        t.steps
        if t.steps is not None
        else t.epochs * int(np.ceil(len(c.train_sizes) * c.train_episodes / 8))
    )
    jobs = training_jobs(preset)  # only the job grid
    groups = tuple(len(g) for g in ensemble_groups(preset.seeds, t.ensemble))
    ev = preset.evaluate
    lines = []
    for env in preset.envs:
        models = sorted({j.model for j in jobs if j.env == env})
        for name in models:
            model, eps, p = _model(env, name, device)
            sec_step = _time_training(model, eps, env_schema(env), p, steps, device)
            ratios = {
                k: _time_ensemble_ratio(env, name, k, eps, p, steps, device)
                for k in sorted(set(groups) - {1})
            }
            model.eval()
            bw = _bandwidths(env, eps)
            with torch.no_grad():
                probes = {
                    n: _time_transition(model, env, n, ev.num_samples, bw, ev.permutations)
                    for n in probe_sizes
                }
            sizes = preset.eval_sizes(env, name)  # an ablation: its ablation_sizes
            per_size = ev.reference_transitions * c.test_episodes
            n_jobs = sum(1 for j in jobs if j.env == env and j.model == name)
            transitions = {n: per_size * n_jobs for n in sizes}
            test_sizes = preset.test_sizes(env)
            if t.eval_every and test_sizes:  # the GDD curve: its points at the smallest test size
                points = sum(len(j.kept_steps()) for j in jobs if j.env == env and j.model == name)
                curve = points * ev.reference_transitions * ev.curve_episodes
                transitions[min(test_sizes)] = transitions.get(min(test_sizes), 0) + curve
            sizes = tuple(sorted(transitions))
            lines.append(
                CostLine(
                    env,
                    name,
                    sec_step,
                    n_jobs,
                    per_job,
                    _quadratic({n: p[0] for n, p in probes.items()}, sizes),
                    transitions,
                    groups,
                    ratios,
                    _quadratic({n: p[1] for n, p in probes.items()}, sizes),
                )
            )
    return lines


def format_estimate(lines: list[CostLine], device: str) -> str:
    """A Markdown table of the estimate."""
    out = [
        f"Measured on {device}. Hours = s/step x steps x sum over training units of their "
        "step ratio (an ensemble of k seeds: its measured step / the single step; a single "
        "job: 1) + s/transition x transitions (eval). Evaluation in two halves: the model "
        f"(posterior + imagination) on {device}, the metric (env samples, GDD, permutation "
        "test) on this machine's CPU.",
        "",
        "| env | model | s/step | train jobs | units | step ratio (k) | steps/job | train h "
        f"| eval h, model ({device}) | eval h, metric (CPU) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in lines:
        ratio = ", ".join(f"{r:.2f} ({k})" for k, r in sorted(c.step_ratio.items())) or "1"
        out.append(
            f"| {c.env} | {c.model} | {c.sec_per_step:.3f} | {c.train_jobs} | "
            f"{c.train_units} | {ratio} | {c.steps_per_job} | {c.train_hours:.1f} | "
            f"{c.eval_hours:.1f} | {c.eval_cpu_hours:.1f} |"
        )
    total_t = sum(c.train_hours for c in lines)
    total_e = sum(c.eval_hours for c in lines)
    total_c = sum(c.eval_cpu_hours for c in lines)
    out.append(
        f"\nTotal: {total_t:.0f} h training + {total_e:.0f} h evaluation (model half) "
        f"= {total_t + total_e:.0f} device-hours on {device}, plus {total_c:.0f} CPU-hours "
        "of evaluation (metric half)."
    )
    return "\n".join(out)
