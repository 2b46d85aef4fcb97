"""The downstream stage's jobs: one typed :class:`DownstreamJob` per agent, made from the
preset's ``[downstream]`` section (:class:`.section.DownstreamConfig`) and its training jobs,
keyed by content and stored as ``RUN_DIR/downstream/<key>.json``.

``graphwm downstream`` (and ``reproduce`` when the preset has a ``[downstream]`` section) runs,
for every env of the section, a MaskablePPO agent (the section's ``policy``, graph by default)
on ``dream_envs`` parallel episodes of the dream env of every trained model (ablations
included), the same agent and budget on as many real envs, and the yardsticks. Each job's key
hashes what determines its record (the world model's training job key, the policy and the env
count included); ``graphwm report`` rebuilds the table and figure from the stored records
(:mod:`graphwm.downstream.report`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from graphwm.downstream.record import DREAM, GREEDY, RANDOM, REAL, STORE_DIR, DownstreamRecord
from graphwm.downstream.runs import (
    AgentSpec,
    dream_record,
    has_greedy,
    real_record,
    yardstick_record,
)
from graphwm.downstream.section import GRAPH_NET_DEFAULTS, DownstreamConfig
from graphwm.store.files import content_key

#: how trained agents are evaluated (``graphwm_envs.agents.evaluate_agent``'s default): keyed
EVALUATION = "deterministic"


@dataclass(frozen=True)
class DownstreamJob:
    """One downstream agent as a pipeline job.

    Attributes:
        agent: ``"dream"`` (trained in ``model``'s dream env), ``"real"``, ``"random"`` or
            ``"greedy"``.
        spec: how the agent trains and is evaluated (a yardstick uses only its ``seed``,
            ``episodes`` and ``eval_seed``).
        env, num_nodes: the env and N of the agent's training and evaluation episodes.
        model: the world model (registry name) of a dream agent.
        checkpoint: its checkpoint, relative to the run directory (not keyed: the key hashes
            ``train_key``, the key of the model's training job, instead).
        device: the world model's device (dream agents).
        threads: torch threads of the job (not keyed).
        tensorboard: a trained agent also writes TensorBoard event files to
            ``RUN_DIR/downstream/tensorboard/<job key>/`` (not keyed).
    """

    agent: str
    spec: AgentSpec
    env: str
    num_nodes: int
    model: str | None = None
    checkpoint: str | None = None
    device: str = "cpu"
    train_key: str | None = None
    threads: int = 1
    tensorboard: bool = False

    kind: ClassVar[str] = "downstream"

    @property
    def trained(self) -> bool:
        """Whether the job trains an agent (dream or real), not a yardstick."""
        return self.agent in (DREAM, REAL)

    def describe(self) -> dict[str, Any]:
        """What determines the record (its key hashes this): no paths, thread counts or the
        TensorBoard switch; a trained agent's evaluation protocol; the graph policy's size
        only where it differs from the defaults, the PPO overrides only where set."""
        spec = self.spec
        out: dict[str, Any] = {
            "kind": self.kind,
            "env": self.env,
            "num_nodes": self.num_nodes,
            "episodes": spec.episodes,
            "eval_seed": spec.eval_seed,
            "agent": self.agent,
            "seed": spec.seed,
        }
        if self.trained:
            out.update(budget=spec.budget, policy=spec.policy, dream_envs=spec.num_envs)
            # records of the sampled evaluation (before the documented deterministic protocol
            # became the stage's) are never reused for a deterministic one
            out["evaluation"] = EVALUATION
            out.update({k: v for k, v in spec.net.items() if v != GRAPH_NET_DEFAULTS[k]})
            if spec.ppo:
                out["ppo"] = dict(spec.ppo)
        if self.agent == DREAM:
            out.update(model=self.model, device=self.device)
        if self.train_key is not None:
            out["train"] = self.train_key
        return out

    @property
    def key(self) -> str:
        return content_key("downstream", self.describe())


def agent_spec(section: DownstreamConfig, seed: int) -> AgentSpec:
    """The :class:`AgentSpec` of the section's agents with training seed ``seed``."""
    same = ("budget", "episodes", "eval_seed", "policy", "policy_hidden_dim", "policy_num_layers")
    settings = {name: getattr(section, name) for name in same}
    return AgentSpec.with_ppo(section.ppo, seed=int(seed), num_envs=section.dream_envs, **settings)


def env_jobs(
    section: DownstreamConfig,
    env: str,
    trained: Iterable[Any],
    *,
    threads: int = 1,
    device: str = "cpu",
    tensorboard: bool = False,
) -> list[DownstreamJob]:
    """The jobs of one env: a dream agent per training job in ``trained`` (objects with
    ``model``, ``seed``, ``key`` and ``reldir``) whose model the section selects, the
    real-env agent per seed and the yardsticks."""

    def job(agent: str, spec: AgentSpec, **more: Any) -> DownstreamJob:
        return DownstreamJob(agent, spec, env, section.num_nodes, threads=int(threads), **more)

    jobs, seeds = [], []
    for t in trained:
        if section.models is not None and t.model not in section.models:
            continue
        seeds.append(int(t.seed))
        jobs.append(
            job(
                DREAM,
                agent_spec(section, t.seed),
                model=t.model,
                checkpoint=f"{t.reldir}/ckpt/final",
                device=device,
                train_key=t.key,
                tensorboard=tensorboard,
            )
        )
    if section.real_agent:
        for seed in sorted(set(seeds)) or [0]:
            jobs.append(job(REAL, agent_spec(section, seed), tensorboard=tensorboard))
    if section.yardsticks:
        spec = AgentSpec(0, 0, section.episodes, section.eval_seed)
        for name in (RANDOM, GREEDY) if has_greedy(env) else (RANDOM,):
            jobs.append(job(name, spec))
    return jobs


def downstream_jobs(
    section: DownstreamConfig,
    envs: Sequence[str],
    trained: Iterable[Any],
    *,
    threads: int = 1,
    device: str = "cpu",
    tensorboard: bool = False,
) -> list[DownstreamJob]:
    """The jobs of the ``[downstream]`` section (its envs, else the preset's ``envs``) for the
    preset's training jobs ``trained`` (objects with ``env``, ``model``, ``seed``, ``key`` and
    ``reldir``); ``tensorboard``: the trained agents also write TensorBoard event files."""
    trained = list(trained)
    return [
        job
        for env in section.envs or envs
        for job in env_jobs(
            section,
            env,
            [t for t in trained if t.env == env],
            threads=threads,
            device=device,
            tensorboard=tensorboard,
        )
    ]


def run_downstream_job(job: DownstreamJob, run_dir: str | Path) -> DownstreamRecord:
    """Executor entry point (``fn(job, run_dir) -> record``): train and evaluate the job's
    agent (the world model loaded from ``run_dir``) or evaluate its yardstick."""
    import torch

    torch.set_num_threads(max(1, int(job.threads)))
    spec, env, n = job.spec, job.env, job.num_nodes
    tensorboard_dir = None
    if job.tensorboard:
        tensorboard_dir = str(Path(run_dir) / STORE_DIR / "tensorboard" / job.key)
    if job.agent == DREAM:
        from graphwm.dream import load_world_model

        if job.model is None or job.checkpoint is None:
            raise ValueError("a dream agent's job needs its model and checkpoint")
        model = load_world_model(Path(run_dir) / job.checkpoint, job.device)
        return dream_record(model, job.model, env, n, spec, tensorboard_dir=tensorboard_dir)
    if job.agent == REAL:
        return real_record(env, n, spec, tensorboard_dir=tensorboard_dir)
    return yardstick_record(env, n, job.agent, episodes=spec.episodes, eval_seed=spec.eval_seed)
