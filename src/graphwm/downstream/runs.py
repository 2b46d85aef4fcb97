"""Downstream records from runs: an agent trained in a world model's dream env, the same
agent trained in the real env, and the yardsticks, all evaluated on the same real episodes.

How an agent trains and is evaluated is one value, :class:`AgentSpec`; the pipeline's jobs
(:mod:`graphwm.downstream.jobs`) carry one each."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphwm.downstream.agents import dream_vec_env, real_vec_env, train_agent
from graphwm.downstream.record import GREEDY, RANDOM, REAL, YARDSTICKS, DownstreamRecord
from graphwm.downstream.section import DEFAULT_ENVS, GRAPH, GRAPH_HIDDEN_DIM, GRAPH_NUM_LAYERS
from graphwm.envs import env_id

#: the first real-env evaluation seed unless said otherwise (disjoint from the data seeds)
EVAL_SEED = 1_000_000


@dataclass(frozen=True)
class AgentSpec:
    """How one MaskablePPO agent is trained and evaluated (dream and real-env agents alike).

    Attributes:
        budget: env steps of training, summed over the ``num_envs`` parallel envs (rounded up
            to whole rollouts); 0 for a yardstick, which trains nothing.
        seed: the agent's seed (the model's generator, the start states and torch).
        episodes: real-env evaluation episodes; episode e resets with ``eval_seed + e``.
        eval_seed: the first evaluation seed.
        policy: ``"graph"`` (``graphwm_envs.agents.MaskableGraphPolicy``) or ``"mlp"``.
        num_envs: parallel envs of training (dream episodes or real envs).
        policy_hidden_dim, policy_num_layers: the graph policy's width and depth.
        ppo: MaskablePPO overrides as sorted ``(key, value)`` pairs (hashable; see
            :attr:`ppo_kwargs`), ``()`` for none.
    """

    budget: int
    seed: int = 0
    episodes: int = 100
    eval_seed: int = EVAL_SEED
    policy: str = GRAPH
    num_envs: int = DEFAULT_ENVS
    policy_hidden_dim: int = GRAPH_HIDDEN_DIM
    policy_num_layers: int = GRAPH_NUM_LAYERS
    ppo: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def with_ppo(cls, ppo: Mapping[str, Any] | None = None, **fields: Any) -> AgentSpec:
        """An :class:`AgentSpec` whose MaskablePPO overrides are given as a mapping."""
        return cls(ppo=tuple(sorted((ppo or {}).items())), **fields)

    @property
    def ppo_kwargs(self) -> dict[str, Any] | None:
        """The MaskablePPO overrides as keyword arguments (``None``: none)."""
        return dict(self.ppo) or None

    @property
    def net(self) -> dict[str, int]:
        """The graph policy's network settings (``train_agent``'s keywords)."""
        return {
            "policy_hidden_dim": self.policy_hidden_dim,
            "policy_num_layers": self.policy_num_layers,
        }


def _trained_record(
    make_vec: Callable[[], Any],
    agent: str,
    model_name: str | None,
    env_name: str,
    num_nodes: int,
    spec: AgentSpec,
    tensorboard_dir: str | None = None,
) -> DownstreamRecord:
    """Train the agent in the vec env ``make_vec()`` builds, evaluate it in the real env the
    documented way (:func:`graphwm_envs.agents.evaluate_agent`: deterministic actions on
    ``reset(eval_seed + e)``). The seconds count the env's construction too."""
    from graphwm_envs.agents import evaluate_agent

    start = time.perf_counter()
    agent_model = train_agent(
        make_vec(),
        spec.budget,
        spec.seed,
        spec.ppo_kwargs,
        spec.policy,
        **spec.net,
        tensorboard_dir=tensorboard_dir,
    )
    mean, se = evaluate_agent(
        agent_model,
        env_id(env_name),
        episodes=int(spec.episodes),
        seed=spec.eval_seed,
        num_nodes=num_nodes,
    )
    graph = spec.policy == GRAPH  # the MLP policy has its own fixed architecture
    return DownstreamRecord(
        env_name,
        num_nodes,
        agent,
        model_name,
        spec.seed,
        int(spec.budget),
        mean,
        se,
        int(spec.episodes),
        seconds=time.perf_counter() - start,
        policy=spec.policy,
        num_envs=int(spec.num_envs),
        policy_hidden_dim=int(spec.policy_hidden_dim) if graph else None,
        policy_num_layers=int(spec.policy_num_layers) if graph else None,
    )


def dream_record(
    model,
    model_name: str,
    env_name: str,
    num_nodes: int,
    spec: AgentSpec,
    *,
    tensorboard_dir: str | None = None,
) -> DownstreamRecord:
    """Train MaskablePPO (``spec.policy``) on ``spec.num_envs`` parallel episodes of
    ``model``'s dream env (``DreamSB3VecEnv``), evaluate it in the real env."""
    return _trained_record(
        lambda: dream_vec_env(model, env_name, num_nodes, spec.num_envs, spec.seed),
        f"dream:{model_name}",
        model_name,
        env_name,
        num_nodes,
        spec,
        tensorboard_dir,
    )


def real_record(
    env_name: str, num_nodes: int, spec: AgentSpec, *, tensorboard_dir: str | None = None
) -> DownstreamRecord:
    """The same agent and budget trained in ``spec.num_envs`` real envs (SB3's
    ``DummyVecEnv``; the upper reference)."""
    return _trained_record(
        lambda: real_vec_env(env_name, num_nodes, spec.num_envs),
        REAL,
        None,
        env_name,
        num_nodes,
        spec,
        tensorboard_dir,
    )


def yardstick_record(
    env_name: str, num_nodes: int, name: str, *, episodes: int = 100, eval_seed: int = EVAL_SEED
) -> DownstreamRecord:
    """The random policy or the greedy heuristic of ``graphwm_envs.heuristics`` on the
    evaluation episodes (``TypeError`` when the env has no greedy heuristic)."""
    from graphwm_envs.heuristics import evaluate_heuristic, greedy_action, random_action

    policy = {RANDOM: random_action, GREEDY: greedy_action}.get(name)
    if policy is None:
        raise ValueError(f"unknown yardstick {name!r}; choose from {YARDSTICKS}")
    start = time.perf_counter()
    mean, se = evaluate_heuristic(
        env_id(env_name), policy, episodes=int(episodes), seed=eval_seed, num_nodes=num_nodes
    )
    return DownstreamRecord(
        env_name,
        num_nodes,
        name,
        None,
        0,
        0,
        mean,
        se,
        int(episodes),
        seconds=time.perf_counter() - start,
    )


def has_greedy(env_name: str) -> bool:
    """Whether ``graphwm_envs.heuristics`` has a greedy heuristic for the env (read from the
    env class; no env is built)."""
    from graphwm_envs.heuristics import has_greedy_heuristic

    from graphwm.envs import env_class

    return has_greedy_heuristic(env_class(env_name))


def yardstick_records(
    env_name: str, num_nodes: int, *, episodes: int = 100, eval_seed: int = EVAL_SEED
) -> list[DownstreamRecord]:
    """Random policy and greedy heuristic (where the env has one) on the same episodes."""
    names = [n for n in YARDSTICKS if n != GREEDY or has_greedy(env_name)]
    return [
        yardstick_record(env_name, num_nodes, n, episodes=episodes, eval_seed=eval_seed)
        for n in names
    ]


def env_records(
    env_name: str,
    num_nodes: int,
    models: Mapping[str, Any],
    spec: AgentSpec,
    *,
    progress: Callable[[str], None] | None = None,
) -> list[DownstreamRecord]:
    """Every record of one env: a dream agent per model (``{name: model}``), the real-env
    agent with the same spec, and the yardsticks, all evaluated on the same episodes."""
    say = progress or (lambda _msg: None)
    records = []
    for name, model in models.items():
        say(f"dream agent in {name}")
        records.append(dream_record(model, name, env_name, num_nodes, spec))
    say("real-env agent")
    records.append(real_record(env_name, num_nodes, spec))
    records += yardstick_records(
        env_name, num_nodes, episodes=spec.episodes, eval_seed=spec.eval_seed
    )
    return records
