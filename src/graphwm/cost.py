"""Estimate the compute cost of a preset from per-job times measured on this device.

``graphwm estimate-cost --preset paper --device cuda`` measures, for every model and env of the
preset at the paper's hyperparameters: seconds per training step (batch 8, sequence 20, on
freshly recorded training-size episodes) and seconds per evaluated transition (posterior +
kappa-sample imagination) at two graph sizes, extrapolated to the other test sizes with the
O(N^2) cost of the pairwise terms. It multiplies these by the preset's job counts.

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
        return sum(self.sec_per_transition[n] * c for n, c in self.eval_transitions.items()) / 3600


def _episodes(env: str, sizes, per_size: int) -> list[dict]:
    return [
        record_episode(env, n, seed=10_000_000 + 100 * n + i)
        for n in sizes
        for i in range(per_size)
    ]


def _model(env: str, model: str, device: str):
    import torch
    from gdm_models import FeatureScaler, make_model

    from graphwm.envs import model_preset

    eps = _episodes(env, (15, 20, 25), 2)
    schema = env_schema(env)
    preset = model_preset(model, env)
    torch.manual_seed(0)
    built = make_model(model, schema, FeatureScaler.fit(eps, schema), **preset["model"])
    return built.to(device), eps, preset


def _time_training(model, episodes, schema, preset, steps: int, device: str) -> float:
    """Seconds per training step as ``gdm_models.train`` runs it on ``device``: the static
    step captured as one CUDA graph on CUDA, the eager step elsewhere."""
    import torch
    from gdm_models import EpisodeDataset
    from gdm_models.capture import StaticShape, StaticTrainStep, make_adam

    t = preset["train"]
    bs, seq_len, lr = int(t.get("batch_size", 8)), int(t.get("seq_len", 20)), float(t["lr"])
    ds = EpisodeDataset(episodes, schema, seq_len=seq_len)
    rng = np.random.default_rng(0)
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    dev = torch.device(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if dev.type == "cuda":
        static = StaticTrainStep(
            model, make_adam(params, lr, dev), params, gen, 100.0,
            StaticShape.for_dataset(ds, bs, seq_len),
        )  # fmt: skip
        while static.calls <= static.warmup:  # warm-up, capture and the first replay
            static(ds.sample_batch(bs, rng))

        def step() -> None:
            static(ds.sample_batch(bs, rng))
    else:
        opt = torch.optim.Adam(params, lr=lr)

        def step() -> None:
            batch = ds.sample_batch(bs, rng).to(device)
            loss, _ = model.training_loss(batch, generator=gen)
            opt.zero_grad()
            loss.backward()
            opt.step()

    elapsed = 0.0
    for i in range(steps + 1):  # step 0 warms up
        start = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i:
            elapsed += time.perf_counter() - start
    return elapsed / steps


def _time_ensemble_ratio(
    env: str, name: str, k: int, episodes, preset, steps: int, device: str
) -> float:
    """One k-member ensemble step / one single step, timed alternately on ``device``, both as
    ``train_ensemble`` runs them: the member engine (on CUDA its static step captured as one
    CUDA graph) for a model that supports it, else the per-member loop."""
    import torch
    from gdm_models import EpisodeDataset, EpochSampler, FeatureScaler, make_model
    from gdm_models.capture import StaticShape
    from gdm_models.ensemble_engines import LoopEngine, MemberEngine

    schema = env_schema(env)
    t = preset["train"]
    bs, seq_len, lr = int(t.get("batch_size", 8)), int(t.get("seq_len", 20)), float(t["lr"])
    ds = EpisodeDataset(episodes, schema, seq_len=seq_len)
    scaler = FeatureScaler.fit(episodes, schema)
    autocast = torch.autocast(torch.device(device).type, enabled=False)

    def engine(n: int):
        members = []
        for s in range(n):
            torch.manual_seed(s)
            members.append(make_model(name, schema, scaler, **preset["model"]).to(device).train())
        # train_ensemble's "auto": the member engine for models that support it (static and
        # captured on CUDA), else the loop
        eng: MemberEngine | LoopEngine
        if members[0].supports_members:
            cuda = torch.device(device).type == "cuda"
            static = StaticShape.for_dataset(ds, bs, seq_len) if cuda else None
            eng = MemberEngine(members, lr=lr, clip=100.0, autocast=autocast, static_shape=static)
        else:
            eng = LoopEngine(members, lr=lr, clip=100.0, autocast=autocast, compile=False)
        eng.build(list(range(n)), None)
        samplers = [EpochSampler(ds, bs, seq_len, seed=s) for s in range(n)]
        gens = [torch.Generator(device=device).manual_seed(s) for s in range(n)]
        return lambda: eng.step(samplers, gens)

    single, ensemble = engine(1), engine(k)
    for _ in range(4):  # warm-up, then capture (on CUDA)
        single()
        ensemble()
    elapsed = [0.0, 0.0]
    for step in range(steps + 1):  # step 0 warms up
        for i, fn in enumerate((single, ensemble)):
            start = time.perf_counter()
            fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if step:
                elapsed[i] += time.perf_counter() - start
    return elapsed[1] / elapsed[0]


def _time_transition(model, env: str, n: int, kappa: int) -> float:
    ep = record_episode(env, n, seed=20_000_000 + n)
    t = min(5, len(ep["reward"]) - 1)
    obs = {
        k: ep[k][: t + 1]
        for k in ep
        if k not in ("actions", "action_nodes", "reward", "terminated", "truncated")
    }
    start = time.perf_counter()
    latent = model.observe(obs, ep["action_nodes"][:t], generator=0)
    model.imagine(latent, ep["action_nodes"][t], kappa, generator=1)
    return time.perf_counter() - start


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
            with torch.no_grad():
                probes = {n: _time_transition(model, env, n, ev.num_samples) for n in probe_sizes}
            n0, n1 = probe_sizes
            # fit a + b N^2 through the two probes (pairwise terms dominate at large N)
            b = max(probes[n1] - probes[n0], 0.0) / (n1**2 - n0**2)
            a = max(probes[n0] - b * n0**2, 0.0)
            sizes = preset.test_sizes(env)
            per_size = ev.reference_transitions * c.test_episodes
            n_jobs = sum(1 for j in jobs if j.env == env and j.model == name)
            transitions = {n: per_size * n_jobs for n in sizes}
            if t.eval_every and sizes:  # the GDD curve: its points at the smallest test size
                points = sum(len(j.kept_steps()) for j in jobs if j.env == env and j.model == name)
                transitions[min(sizes)] += points * ev.reference_transitions * ev.curve_episodes
            lines.append(
                CostLine(
                    env,
                    name,
                    sec_step,
                    n_jobs,
                    per_job,
                    {n: a + b * n**2 for n in sizes},
                    transitions,
                    groups,
                    ratios,
                )
            )
    return lines


def format_estimate(lines: list[CostLine], device: str) -> str:
    """A Markdown table of the estimate."""
    out = [
        f"Measured on {device}. Hours = s/step x steps x sum over training units of their "
        "step ratio (an ensemble of k seeds: its measured step / the single step; a single "
        "job: 1) + s/transition x transitions (eval).",
        "",
        "| env | model | s/step | train jobs | units | step ratio (k) | steps/job | train h "
        "| eval h |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in lines:
        ratio = ", ".join(f"{r:.2f} ({k})" for k, r in sorted(c.step_ratio.items())) or "1"
        out.append(
            f"| {c.env} | {c.model} | {c.sec_per_step:.3f} | {c.train_jobs} | "
            f"{c.train_units} | {ratio} | {c.steps_per_job} | {c.train_hours:.1f} | "
            f"{c.eval_hours:.1f} |"
        )
    total_t = sum(c.train_hours for c in lines)
    total_e = sum(c.eval_hours for c in lines)
    out.append(
        f"\nTotal: {total_t:.0f} h training + {total_e:.0f} h evaluation "
        f"= {total_t + total_e:.0f} device-hours on {device}."
    )
    return "\n".join(out)
