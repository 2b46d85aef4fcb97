"""Downstream records from runs: an agent trained in a world model's dream env, the same
agent trained in the real env, and the yardsticks, all evaluated on the same real episodes;
:func:`run_agent_job` is one pipeline job (a JSON-able config in, a record dict out)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from graphwm.downstream.agents import dream_vec_env, real_vec_env, train_agent
from graphwm.downstream.config import (
    DEFAULT_ENVS,
    GRAPH,
    GRAPH_HIDDEN_DIM,
    GRAPH_NET_DEFAULTS,
    GRAPH_NUM_LAYERS,
    GREEDY,
    RANDOM,
    REAL,
    YARDSTICKS,
)
from graphwm.downstream.record import DownstreamRecord
from graphwm.envs import env_id

_Training = tuple[int, int, int, int, "Mapping[str, Any] | None", str, int, "Mapping[str, int]"]


def _trained_record(
    make_vec: Callable[[], Any],
    source: str,
    model_name: str | None,
    env_name: str,
    num_nodes: int,
    training: _Training,
    tensorboard_dir: str | None = None,
) -> DownstreamRecord:
    """Train the agent in the vec env ``make_vec()`` builds, evaluate it in the real env;
    ``training`` is (budget, episodes, seed, eval_seed, ppo_kwargs, policy, num_envs, net),
    ``net`` the graph policy's ``policy_hidden_dim`` / ``policy_num_layers``. The seconds count
    the env's construction too."""
    budget, episodes, seed, eval_seed, ppo_kwargs, policy, num_envs, net = training
    from graphwm_envs.agents import evaluate_agent

    start = time.perf_counter()
    agent = train_agent(
        make_vec(), budget, seed, ppo_kwargs, policy, **net, tensorboard_dir=tensorboard_dir
    )
    mean, se = evaluate_agent(
        agent, env_id(env_name), episodes=int(episodes), seed=eval_seed, num_nodes=num_nodes
    )
    return DownstreamRecord(
        env_name,
        num_nodes,
        source,
        model_name,
        seed,
        int(budget),
        mean,
        se,
        int(episodes),
        seconds=time.perf_counter() - start,
        policy=policy,
        num_envs=int(num_envs),
        # the graph policy's size; SB3's MLP policy has its own fixed architecture
        policy_hidden_dim=int(net["policy_hidden_dim"]) if policy == GRAPH else None,
        policy_num_layers=int(net["policy_num_layers"]) if policy == GRAPH else None,
    )


def dream_record(
    model,
    model_name: str,
    env_name: str,
    num_nodes: int,
    *,
    budget: int,
    episodes: int = 100,
    seed: int = 0,
    eval_seed: int = 1_000_000,
    ppo_kwargs: Mapping[str, Any] | None = None,
    policy: str = GRAPH,
    num_envs: int = DEFAULT_ENVS,
    policy_hidden_dim: int = GRAPH_HIDDEN_DIM,
    policy_num_layers: int = GRAPH_NUM_LAYERS,
    tensorboard_dir: str | None = None,
) -> DownstreamRecord:
    """Train MaskablePPO (``policy``) on ``num_envs`` parallel episodes of ``model``'s dream
    env (``DreamSB3VecEnv``), evaluate it in the real env; ``policy_hidden_dim`` /
    ``policy_num_layers``: the graph policy's width and depth."""
    net = {"policy_hidden_dim": policy_hidden_dim, "policy_num_layers": policy_num_layers}
    return _trained_record(
        lambda: dream_vec_env(model, env_name, num_nodes, num_envs, seed),
        f"dream:{model_name}",
        model_name,
        env_name,
        num_nodes,
        (budget, episodes, seed, eval_seed, ppo_kwargs, policy, num_envs, net),
        tensorboard_dir,
    )


def real_record(
    env_name: str,
    num_nodes: int,
    *,
    budget: int,
    episodes: int = 100,
    seed: int = 0,
    eval_seed: int = 1_000_000,
    ppo_kwargs: Mapping[str, Any] | None = None,
    policy: str = GRAPH,
    num_envs: int = DEFAULT_ENVS,
    policy_hidden_dim: int = GRAPH_HIDDEN_DIM,
    policy_num_layers: int = GRAPH_NUM_LAYERS,
    tensorboard_dir: str | None = None,
) -> DownstreamRecord:
    """The same agent and budget trained in ``num_envs`` real envs (SB3's ``DummyVecEnv``;
    the upper reference)."""
    net = {"policy_hidden_dim": policy_hidden_dim, "policy_num_layers": policy_num_layers}
    return _trained_record(
        lambda: real_vec_env(env_name, num_nodes, num_envs),
        REAL,
        None,
        env_name,
        num_nodes,
        (budget, episodes, seed, eval_seed, ppo_kwargs, policy, num_envs, net),
        tensorboard_dir,
    )


def yardstick_record(
    env_name: str, num_nodes: int, name: str, *, episodes: int = 100, eval_seed: int = 1_000_000
) -> DownstreamRecord:
    """The random policy or the greedy heuristic of ``graphwm_envs.heuristics`` on the evaluation
    episodes (``TypeError`` when the env has no greedy heuristic)."""
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


def yardstick_records(
    env_name: str, num_nodes: int, *, episodes: int = 100, eval_seed: int = 1_000_000
) -> list[DownstreamRecord]:
    """Random policy and greedy heuristic (where the env has one) on the same episodes."""
    out = []
    for name in YARDSTICKS:
        try:
            out.append(
                yardstick_record(env_name, num_nodes, name, episodes=episodes, eval_seed=eval_seed)
            )
        except TypeError:  # no greedy heuristic for this env
            continue
    return out


def run_agent_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """One pipeline job -> a stored record dict. ``config["agent"]`` is ``"dream"`` (needs
    ``model``, ``checkpoint``), ``"real"``, ``"random"`` or ``"greedy"``; the other keys:
    ``env``, ``num_nodes``, ``seed``, ``budget``, ``episodes``, ``eval_seed``, optional
    ``policy`` (``"graph"``), ``policy_hidden_dim`` / ``policy_num_layers`` (the graph
    policy's width and depth), ``dream_envs`` (parallel envs of a trained agent), ``ppo``
    (MaskablePPO overrides), ``threads`` and ``device`` (of the world model), and
    ``tensorboard_dir`` (the trained agent's TensorBoard event files)."""
    import torch

    torch.set_num_threads(max(1, int(config.get("threads", 1))))
    env, n, agent = config["env"], int(config["num_nodes"]), config["agent"]
    common: dict[str, Any] = {
        "episodes": int(config["episodes"]),
        "eval_seed": int(config["eval_seed"]),
    }
    train: dict[str, Any] = {
        "budget": int(config.get("budget", 0)),
        "seed": int(config["seed"]),
        "ppo_kwargs": config.get("ppo"),
        "policy": str(config.get("policy", GRAPH)),
        "num_envs": int(config.get("dream_envs", DEFAULT_ENVS)),
        **{k: int(config.get(k, v)) for k, v in GRAPH_NET_DEFAULTS.items()},
        "tensorboard_dir": config.get("tensorboard_dir"),  # SB3's scalars, when asked
    }
    if agent == "dream":
        from graphwm.dream import load_world_model

        model = load_world_model(config["checkpoint"], config.get("device", "cpu"))
        record = dream_record(model, config["model"], env, n, **train, **common)
    elif agent == REAL:
        record = real_record(env, n, **train, **common)
    else:
        record = yardstick_record(env, n, agent, **common)
    return record.to_dict()


def env_records(
    env_name: str,
    num_nodes: int,
    models: Mapping[str, Any],
    *,
    budget: int,
    episodes: int = 100,
    seed: int = 0,
    ppo_kwargs: Mapping[str, Any] | None = None,
    policy: str = GRAPH,
    num_envs: int = DEFAULT_ENVS,
    policy_hidden_dim: int = GRAPH_HIDDEN_DIM,
    policy_num_layers: int = GRAPH_NUM_LAYERS,
    progress: Callable[[str], None] | None = None,
) -> list[DownstreamRecord]:
    """Every record of one env: a dream agent per model (``{name: model}``), the real-env
    agent with the same budget, and the yardsticks, all evaluated on the same episodes."""
    say = progress or (lambda _msg: None)
    train: dict[str, Any] = dict(
        budget=budget,
        episodes=episodes,
        seed=seed,
        ppo_kwargs=ppo_kwargs,
        policy=policy,
        num_envs=num_envs,
        policy_hidden_dim=policy_hidden_dim,
        policy_num_layers=policy_num_layers,
    )
    records = []
    for name, model in models.items():
        say(f"dream agent in {name}")
        records.append(dream_record(model, name, env_name, num_nodes, **train))
    say("real-env agent")
    records.append(real_record(env_name, num_nodes, **train))
    records += yardstick_records(env_name, num_nodes, episodes=episodes)
    return records
