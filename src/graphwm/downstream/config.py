"""The ``[downstream]`` preset section and the agent names used throughout the downstream
experiment (docs/dream.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from graphwm.envs import make_env

#: agent names of the reference rows (dream-trained agents are ``"dream:<model>"``)
REAL, RANDOM, GREEDY = "real", "random", "greedy"
YARDSTICKS = (RANDOM, GREEDY)

#: MaskablePPO settings of every downstream agent unless the preset overrides them
DEFAULT_PPO = {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 3e-4}

PPO_KEYS = (
    "n_steps",
    "batch_size",
    "n_epochs",
    "learning_rate",
    "gamma",
    "gae_lambda",
    "ent_coef",
    "clip_range",
)


@dataclass(frozen=True)
class DownstreamConfig:
    """The ``[downstream]`` preset section (see docs/dream.md).

    Attributes:
        budget: env steps of MaskablePPO training per agent (dream and real alike).
        episodes: real-env evaluation episodes per agent.
        num_nodes: N of the dream and real episodes.
        envs: envs to run (``None``: every env of the preset).
        models: world models to train agents in (``None``: every model and ablation the
            preset trains on that env).
        real_agent: also train the agent in the real env with the same budget.
        yardsticks: also evaluate the random policy and the greedy heuristic.
        eval_seed: first evaluation seed (episode e resets with ``eval_seed + e``).
        ppo: MaskablePPO overrides (keys in ``PPO_KEYS``).
    """

    budget: int
    episodes: int = 100
    num_nodes: int = 20
    envs: tuple[str, ...] | None = None
    models: tuple[str, ...] | None = None
    real_agent: bool = True
    yardsticks: bool = True
    eval_seed: int = 1_000_000
    ppo: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The TOML/dict form that :meth:`parse` reads back (unset keys left out)."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        for k in ("envs", "models"):
            if k in out:
                out[k] = list(out[k])
        return out

    @classmethod
    def parse(cls, raw: Any, key: str = "downstream") -> DownstreamConfig:
        """Validate the section; ``PresetError`` (a ``ValueError``) naming the offending key."""
        try:
            return cls._parse(raw, key)
        except ValueError as err:
            try:
                from graphwm.config import PresetError
            except ImportError:  # pragma: no cover - config always ships with graphwm
                raise
            raise PresetError(str(err)) from None

    @classmethod
    def _parse(cls, raw: Any, key: str) -> DownstreamConfig:
        if not isinstance(raw, Mapping):
            raise ValueError(f"preset key '{key}' must be a table, got {raw!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(
                f"preset key '{key}' has unknown keys {unknown}; known: {sorted(known)}"
            )

        def integer(name: str, default: Any, minimum: int) -> int:
            v = raw.get(name, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(
                    f"preset key '{key}.{name}' must be an integer >= {minimum}, got {v!r}"
                )
            return v

        def names(name: str) -> tuple[str, ...] | None:
            v = raw.get(name)
            if v is None:
                return None
            if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
                raise ValueError(f"preset key '{key}.{name}' must be a non-empty list of names")
            return tuple(v)

        def flag(name: str) -> bool:
            v = raw.get(name, True)
            if not isinstance(v, bool):
                raise ValueError(f"preset key '{key}.{name}' must be true or false, got {v!r}")
            return v

        if "budget" not in raw:
            raise ValueError(f"preset key '{key}' lacks 'budget' (agent training env steps)")
        ppo = raw.get("ppo")
        if ppo is not None:
            if not isinstance(ppo, Mapping) or set(ppo) - set(PPO_KEYS):
                raise ValueError(f"preset key '{key}.ppo' must be a table with keys in {PPO_KEYS}")
            ppo = dict(ppo)
        return cls(
            budget=integer("budget", None, 1),
            episodes=integer("episodes", 100, 1),
            num_nodes=integer("num_nodes", 20, 5),
            envs=names("envs"),
            models=names("models"),
            real_agent=flag("real_agent"),
            yardsticks=flag("yardsticks"),
            eval_seed=integer("eval_seed", 1_000_000, 0),
            ppo=ppo,
        )

    def check(self, envs: Sequence[str], models_of: Callable[[str], Sequence[str]]) -> None:
        """``ValueError`` when the section names an env the preset does not run or a model it
        does not train (``models_of(env)``: the preset's models and ablations of ``env``)."""
        for i, env in enumerate(self.envs or ()):
            if env not in envs:
                raise ValueError(
                    f"preset key 'downstream.envs[{i}]' ({env!r}) is not one of the preset's "
                    f"envs {list(envs)}"
                )
        trained = {m for env in (self.envs or envs) for m in models_of(env)}
        for i, model in enumerate(self.models or ()):
            if model not in trained:
                raise ValueError(
                    f"preset key 'downstream.models[{i}]' ({model!r}) is not trained by the "
                    f"preset on its downstream envs (trained: {sorted(trained)})"
                )

    def job_configs(
        self,
        env: str,
        trained: Iterable[tuple[str, int, str]],
        threads: int = 1,
        device: str = "cpu",
    ) -> list[dict[str, Any]]:
        """Job configs (for :func:`~graphwm.downstream.runs.run_agent_job`) of one env: a
        dream agent per trained ``(model, seed, checkpoint)`` selected by ``models``, the
        real-env agent per seed and the yardsticks."""
        common = {
            "kind": "downstream",
            "env": env,
            "num_nodes": self.num_nodes,
            "episodes": self.episodes,
            "eval_seed": self.eval_seed,
            "threads": int(threads),
        }
        train = {"budget": self.budget, **({"ppo": dict(self.ppo)} if self.ppo else {})}
        jobs, seeds = [], []
        for model, seed, checkpoint in trained:
            if self.models is not None and model not in self.models:
                continue
            seeds.append(int(seed))
            jobs.append(
                {
                    **common,
                    **train,
                    "agent": "dream",
                    "model": model,
                    "seed": int(seed),
                    "checkpoint": str(checkpoint),
                    "device": device,
                }
            )
        if self.real_agent:
            for seed in sorted(set(seeds)) or [0]:
                jobs.append({**common, **train, "agent": REAL, "seed": seed})
        if self.yardsticks:
            jobs.append({**common, "agent": RANDOM, "seed": 0})
            if has_greedy(env):
                jobs.append({**common, "agent": GREEDY, "seed": 0})
        return jobs


def has_greedy(env_name: str) -> bool:
    """Whether ``graphwm_envs.policies`` has a greedy heuristic for the env."""
    from graphwm_envs.policies import greedy_action

    env = make_env(env_name, 5)
    env.reset(seed=0)
    try:
        greedy_action(env, np.random.default_rng(0))
    except TypeError:
        return False
    return True
