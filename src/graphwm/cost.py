"""Estimate the compute cost of a preset from per-job times measured on this device.

``graphwm estimate-cost --preset paper --device cuda`` measures, for every model and env of the
preset at the paper's hyperparameters: seconds per training step (batch 8, sequence 20, on
freshly recorded training-size episodes) and seconds per evaluated transition (posterior +
kappa-sample imagination) at two graph sizes, extrapolated to the other test sizes with the
O(N^2) cost of the pairwise terms. It multiplies these by the preset's job counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from graphwm.config import Preset
from graphwm.envs import env_schema
from graphwm.pipeline import training_jobs
from graphwm.stages.collect import record_episode


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

    @property
    def train_hours(self) -> float:
        return self.sec_per_step * self.steps_per_job * self.train_jobs / 3600

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
    from gdm_models import FeatureScaler, get_preset, make_model

    eps = _episodes(env, (15, 20, 25), 2)
    schema = env_schema(env)
    preset = get_preset(model, env)
    torch.manual_seed(0)
    built = make_model(model, schema, FeatureScaler.fit(eps, schema), **preset["model"])
    return built.to(device), eps, preset


def _time_training(model, episodes, schema, preset, steps: int, device: str) -> float:
    import torch
    from gdm_models import EpisodeDataset

    ds = EpisodeDataset(episodes, schema, seq_len=int(preset["train"].get("seq_len", 20)))
    opt = torch.optim.Adam(model.parameters(), lr=float(preset["train"]["lr"]))
    rng = np.random.default_rng(0)
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    elapsed = 0.0
    for step in range(steps + 1):  # step 0 warms up
        batch = ds.sample_batch(int(preset["train"].get("batch_size", 8)), rng).to(device)
        start = time.perf_counter()
        loss, _ = model.training_loss(batch, generator=gen)  # the trainer's path: no host sync
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if step:
            elapsed += time.perf_counter() - start
    return elapsed / steps


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

    preset = Preset.parse(preset)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t, c = preset.train, preset.collect
    per_job = (
        t.steps
        if t.steps is not None
        else t.epochs * int(np.ceil(len(c.train_sizes) * c.train_episodes / 8))
    )
    jobs = training_jobs(preset)  # only the job grid
    ev = preset.evaluate
    lines = []
    for env in preset.envs:
        models = sorted({j.model for j in jobs if j.env == env})
        for name in models:
            model, eps, p = _model(env, name, device)
            sec_step = _time_training(model, eps, env_schema(env), p, steps, device)
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
            lines.append(
                CostLine(
                    env,
                    name,
                    sec_step,
                    n_jobs,
                    per_job,
                    {n: a + b * n**2 for n in sizes},
                    {n: per_size * n_jobs for n in sizes},
                )
            )
    return lines


def format_estimate(lines: list[CostLine], device: str) -> str:
    """A Markdown table of the estimate."""
    out = [
        f"Measured on {device}. Hours = unit cost x jobs (training) + transitions (eval).",
        "",
        "| env | model | s/step | train jobs | steps/job | train h | eval h |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for c in lines:
        out.append(
            f"| {c.env} | {c.model} | {c.sec_per_step:.3f} | {c.train_jobs} | "
            f"{c.steps_per_job} | {c.train_hours:.1f} | {c.eval_hours:.1f} |"
        )
    total_t = sum(c.train_hours for c in lines)
    total_e = sum(c.eval_hours for c in lines)
    out.append(
        f"\nTotal: {total_t:.0f} h training + {total_e:.0f} h evaluation "
        f"= {total_t + total_e:.0f} device-hours on {device}."
    )
    return "\n".join(out)
