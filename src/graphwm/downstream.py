"""Downstream RL: does a lower GDD make a better world model to train agents in? (issue 15)

The paper leaves "the relationship between GDD and performance on downstream tasks, such as
reinforcement learning" open (section "Limitations"). This module measures it:

1. :func:`train_agent` trains sb3-contrib's ``MaskablePPO`` (``MultiInputPolicy``) for a budget
   of env steps, in a :class:`~graphwm.dream.DreamEnv` of a trained world model or in the real
   env;
2. :func:`evaluate_agent` evaluates it in the **real** env: mean undiscounted return +- its
   standard error over seeded episodes (episode e resets with ``seed + e``, the convention of
   ``graphwm_envs.policies.evaluate_policy``, so every agent and yardstick meets the same
   initial states);
3. :func:`dream_record` / :func:`real_record` / :func:`yardstick_records` produce
   :class:`DownstreamRecord` s; :func:`attach_gdd` adds each model's single- and multi-step GDD;
4. :func:`downstream_table` and :func:`downstream_figure` turn records into a Markdown table
   and a scatter plot of real-env return against GDD with the Spearman rank correlation over
   the models, per env.

Everything takes explicit arguments (records in, table / figure out), so the pipeline stores
records as JSON and ``graphwm report`` rebuilds the table and figure from them.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from graphwm.envs import env_id, make_env
from graphwm.records import Record, ResultsFormatError, register_record

#: agent names of the reference rows (dream-trained agents are ``"dream:<model>"``)
REAL, RANDOM, GREEDY = "real", "random", "greedy"

DEFAULT_PPO = {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 3e-4}


@dataclass(frozen=True)
class DownstreamRecord(Record):
    """One agent evaluated in the real env (stored as ``kind = "downstream"``).

    Attributes:
        env: short env name (``"SAR"``).
        num_nodes: N of the training and evaluation episodes.
        agent: ``"dream:<model>"`` (trained in the model's dream env), ``"real"`` (trained in
            the real env), ``"random"`` or ``"greedy"`` (graphwm_envs.policies yardsticks).
        model: the world model (registry name) of a dream agent, else ``None``.
        seed: seed of the world model's training run (dream agents) / of the agent.
        budget: env steps of agent training (0 for the yardsticks).
        mean_return: mean undiscounted real-env return over ``episodes`` episodes.
        se_return: its standard error, ``std(ddof=1) / sqrt(episodes)``.
        episodes: evaluation episodes.
        gdd_single: the model's single-step GDD (``None`` where not applicable / unknown).
        gdd_multi: the model's multi-step GDD (mean over the horizon), or ``None``.
        seconds: wall time of training plus evaluation.
    """

    env: str
    num_nodes: int
    agent: str
    model: str | None
    seed: int
    budget: int
    mean_return: float
    se_return: float
    episodes: int
    gdd_single: float | None = None
    gdd_multi: float | None = None
    seconds: float = 0.0
    kind: str = "downstream"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (with ``kind = "downstream"``; ``None`` fields kept as null)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: Any = None) -> DownstreamRecord:
        """Inverse of :meth:`to_dict`; unknown keys (e.g. the stored job) are ignored, a
        missing or mistyped field raises ``ResultsFormatError`` (a ``ValueError``) naming it
        (and ``path``)."""
        where = f"{path}: " if path is not None else ""
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(d))
        if missing:
            raise ResultsFormatError(f"{where}downstream record lacks {missing}")
        if d.get("kind", "downstream") != "downstream":
            raise ResultsFormatError(f"{where}not a downstream record (kind {d.get('kind')!r})")
        for key in ("mean_return", "se_return"):
            if d[key] is not None and not isinstance(d[key], int | float):
                raise ResultsFormatError(f"{where}{key} must be a number, got {d[key]!r}")
        out = {k: v for k, v in d.items() if k in names}
        out["se_return"] = math.nan if out["se_return"] is None else out["se_return"]
        return cls(**out)


# --------------------------------------------------------------------------- preset section
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
        """Job configs (for :func:`downstream_job`) of one env: a dream agent per trained
        ``(model, seed, checkpoint)`` selected by ``models``, the real-env agent per seed and
        the yardsticks."""
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


# --------------------------------------------------------------------------- agents
def train_agent(env, budget: int, seed: int, ppo_kwargs: Mapping[str, Any] | None = None):
    """MaskablePPO (``MultiInputPolicy``, CPU) trained for ``budget`` env steps on ``env``."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    if int(budget) < 1:
        raise ValueError(f"budget must be >= 1 env step, got {budget}")
    kwargs = {**DEFAULT_PPO, **(ppo_kwargs or {})}
    kwargs["n_steps"] = min(int(kwargs["n_steps"]), int(budget))
    kwargs["batch_size"] = min(int(kwargs["batch_size"]), kwargs["n_steps"])
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3's notes on (N, F) observation shapes
        agent = MaskablePPO("MultiInputPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
        # a silent logger: SB3's default one makes an empty /tmp/SB3-<time> folder per agent
        agent.set_logger(Logger(folder=None, output_formats=[]))
        agent.learn(total_timesteps=int(budget))
    return agent


def evaluate_agent(
    agent,
    env_name: str,
    num_nodes: int,
    *,
    episodes: int = 100,
    seed: int = 0,
    deterministic: bool = False,
) -> tuple[float, float]:
    """Mean real-env return of a MaskablePPO agent and its standard error.

    Episode e starts from ``reset(seed=seed + e)``. Actions are sampled from the masked policy
    (the stochastic policy PPO optimises; torch's generator is seeded with ``seed``, so the
    evaluation is reproducible); ``deterministic=True`` takes its most probable valid action
    instead, which can be far worse where repeating one choice is poor (e.g. OD).
    """
    import torch

    if int(episodes) < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    env = make_env(env_name, num_nodes)
    returns = np.empty(int(episodes))
    torch.manual_seed(seed)
    for e in range(int(episodes)):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            action, _ = agent.predict(
                obs, action_masks=env.action_masks(), deterministic=deterministic
            )
            obs, reward, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.int64))
            total += float(reward)
            done = terminated or truncated
        returns[e] = total
    return _mean_se(returns)


def _mean_se(returns: np.ndarray) -> tuple[float, float]:
    n = len(returns)
    se = float(returns.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return float(returns.mean()), se


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
) -> DownstreamRecord:
    """Train MaskablePPO in ``model``'s dream env, evaluate it in the real env."""
    from graphwm.dream import DreamEnv

    start = time.perf_counter()
    dream = DreamEnv(model, make_env(env_name, num_nodes), seed=seed)
    agent = train_agent(dream, budget, seed, ppo_kwargs)
    mean, se = evaluate_agent(agent, env_name, num_nodes, episodes=episodes, seed=eval_seed)
    return DownstreamRecord(
        env_name,
        num_nodes,
        f"dream:{model_name}",
        model_name,
        seed,
        int(budget),
        mean,
        se,
        int(episodes),
        seconds=time.perf_counter() - start,
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
) -> DownstreamRecord:
    """The same agent and budget trained in the real env (the upper reference)."""
    start = time.perf_counter()
    agent = train_agent(make_env(env_name, num_nodes), budget, seed, ppo_kwargs)
    mean, se = evaluate_agent(agent, env_name, num_nodes, episodes=episodes, seed=eval_seed)
    return DownstreamRecord(
        env_name,
        num_nodes,
        REAL,
        None,
        seed,
        int(budget),
        mean,
        se,
        int(episodes),
        seconds=time.perf_counter() - start,
    )


YARDSTICKS = (RANDOM, GREEDY)


def yardstick_record(
    env_name: str, num_nodes: int, name: str, *, episodes: int = 100, eval_seed: int = 1_000_000
) -> DownstreamRecord:
    """The random policy or the greedy heuristic of ``graphwm_envs.policies`` on the evaluation
    episodes (``TypeError`` when the env has no greedy heuristic)."""
    from graphwm_envs.policies import evaluate_policy, greedy_action, random_action

    policy = {RANDOM: random_action, GREEDY: greedy_action}.get(name)
    if policy is None:
        raise ValueError(f"unknown yardstick {name!r}; choose from {YARDSTICKS}")
    start = time.perf_counter()
    mean, se = evaluate_policy(
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


def downstream_job(config: Mapping[str, Any]) -> dict[str, Any]:
    """One pipeline job -> a stored record dict. ``config["agent"]`` is ``"dream"`` (needs
    ``model``, ``checkpoint``), ``"real"``, ``"random"`` or ``"greedy"``; the other keys:
    ``env``, ``num_nodes``, ``seed``, ``budget``, ``episodes``, ``eval_seed``, optional
    ``ppo`` (MaskablePPO overrides), ``threads`` and ``device`` (of the world model)."""
    import torch

    torch.set_num_threads(max(1, int(config.get("threads", 1))))
    env, n, agent = config["env"], int(config["num_nodes"]), config["agent"]
    common = {"episodes": int(config["episodes"]), "eval_seed": int(config["eval_seed"])}
    if agent == "dream":
        from graphwm.dream import load_world_model

        model = load_world_model(config["checkpoint"], config.get("device", "cpu"))
        record = dream_record(
            model,
            config["model"],
            env,
            n,
            budget=int(config["budget"]),
            seed=int(config["seed"]),
            ppo_kwargs=config.get("ppo"),
            **common,
        )
    elif agent == REAL:
        record = real_record(
            env,
            n,
            budget=int(config["budget"]),
            seed=int(config["seed"]),
            ppo_kwargs=config.get("ppo"),
            **common,
        )
    else:
        record = yardstick_record(env, n, agent, **common)
    return record.to_dict()


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


def gdd_maps(
    single: Iterable[Any], multi: Iterable[Any], num_nodes: int
) -> tuple[dict[tuple[str, str, int], float], dict[tuple[str, str, int], float]]:
    """``(single, multi)`` GDD lookups for :func:`attach_gdd` from evaluation records
    (objects or dicts with ``env``, ``model``, ``seed``, ``size`` and ``gdd``).

    Single-step: the GDD at ``size == num_nodes`` when evaluated, else the mean over the
    model's test sizes. Multi-step: the mean over the horizon (of the size closest to
    ``num_nodes``).
    """

    def get(r: Any, key: str) -> Any:
        return r[key] if isinstance(r, Mapping) else getattr(r, key)

    by_model: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in single:
        key = (get(r, "env"), get(r, "model"), int(get(r, "seed")))
        by_model.setdefault(key, {})[int(get(r, "size"))] = float(get(r, "gdd"))
    single_map = {
        k: sizes[num_nodes] if num_nodes in sizes else float(np.mean(list(sizes.values())))
        for k, sizes in by_model.items()
    }
    multi_sizes: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in multi:
        key = (get(r, "env"), get(r, "model"), int(get(r, "seed")))
        values = np.asarray(get(r, "gdd"), float).reshape(-1)
        multi_sizes.setdefault(key, {})[int(get(r, "size"))] = float(np.nanmean(values))
    multi_map = {
        k: sizes[min(sizes, key=lambda s: abs(s - num_nodes))] for k, sizes in multi_sizes.items()
    }
    return single_map, multi_map


def attach_gdd(
    records: Iterable[DownstreamRecord],
    single: Mapping[tuple[str, str, int], float],
    multi: Mapping[tuple[str, str, int], float] | None = None,
) -> list[DownstreamRecord]:
    """Records with ``gdd_single`` / ``gdd_multi`` looked up by ``(env, model, seed)``."""
    multi = multi or {}
    out = []
    for r in records:
        if r.model is None:
            out.append(r)
            continue
        key = (r.env, r.model, r.seed)
        out.append(replace(r, gdd_single=single.get(key), gdd_multi=multi.get(key)))
    return out


# --------------------------------------------------------------------------- report
def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (``nan`` with fewer than 3 points or a constant side)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(spearmanr(x, y).statistic)


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _order(r: DownstreamRecord) -> tuple:
    rank = {REAL: 0, GREEDY: 1, RANDOM: 2}.get(r.agent, 3)
    return (r.env, r.num_nodes, rank, r.agent, r.seed)


def downstream_table(records: Iterable[DownstreamRecord]) -> str:
    """Markdown table: real-env return +- s.e. of every agent, with its model's GDDs, and the
    Spearman correlation of return with each GDD over the dream agents of each env."""
    records = sorted(records, key=_order)
    lines = [
        "| env | N | agent | budget | real-env return | GDD (1-step) | GDD (multi) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        ret = f"{r.mean_return:.3f} ± {_fmt(r.se_return)}"
        lines.append(
            f"| {r.env} | {r.num_nodes} | {r.agent} | {r.budget} | {ret} | "
            f"{_fmt(r.gdd_single, 4)} | {_fmt(r.gdd_multi, 4)} |"
        )
    corr = correlations(records)
    if corr:
        lines += [
            "",
            "| env | Spearman(return, GDD 1-step) | Spearman(return, GDD multi) | models |",
            "|---|---|---|---|",
        ]
        for env, c in corr.items():
            lines.append(f"| {env} | {_fmt(c['single'])} | {_fmt(c['multi'])} | {c['n']} |")
    return "\n".join(lines) + "\n"


def correlations(records: Iterable[DownstreamRecord]) -> dict[str, dict[str, float]]:
    """Per env: Spearman rank correlation of real-env return with single- and multi-step GDD
    over the dream agents (a negative value: lower GDD, higher return)."""
    by_env: dict[str, list[DownstreamRecord]] = {}
    for r in records:
        if r.model is not None:
            by_env.setdefault(r.env, []).append(r)
    out = {}
    for env, rs in sorted(by_env.items()):
        ret = [r.mean_return for r in rs]
        out[env] = {
            "single": spearman([_nan(r.gdd_single) for r in rs], ret),
            "multi": spearman([_nan(r.gdd_multi) for r in rs], ret),
            "n": len(rs),
        }
    return out


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def label_rows(
    xs: Sequence[float], ys: Sequence[float], near: tuple[float, float] = (0.15, 0.08)
) -> list[int]:
    """Row of each point's label so that labels of nearby points do not overlap: a point
    within ``near`` (fractions of the x and y ranges) of earlier points' labels in the same
    row moves one row down. Points are taken in the given order."""
    if not xs:
        return []
    sx = (max(xs) - min(xs)) or 1.0
    sy = (max(ys) - min(ys)) or 1.0
    placed: list[tuple[float, float, int]] = []
    rows = []
    for x, y in zip(xs, ys, strict=True):
        row = 0
        while any(
            r == row and abs(x - px) / sx < near[0] and abs(y - py) / sy < near[1]
            for px, py, r in placed
        ):
            row += 1
        placed.append((x, y, row))
        rows.append(row)
    return rows


def downstream_figure(records: Iterable[DownstreamRecord], path: str | Path) -> Path:
    """Scatter of real-env return (+- s.e.) against single- and multi-step GDD, one row per
    env, one point per dream agent (labelled by model), the real-env agent and the
    yardsticks as horizontal lines; the Spearman correlation in each panel's title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = list(records)
    envs = sorted({r.env for r in records})
    if not envs:
        raise ValueError("no downstream records to plot")
    fig, axes = plt.subplots(len(envs), 2, figsize=(10, 3.6 * len(envs)), squeeze=False)
    styles = {REAL: ("black", "-"), GREEDY: ("tab:purple", "--"), RANDOM: ("tab:gray", ":")}
    corr = correlations(records)
    models = sorted({r.model for r in records if r.model is not None})
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {m: cycle[i % len(cycle)] for i, m in enumerate(models)}  # same in every panel
    for row, env in enumerate(envs):
        rs = [r for r in records if r.env == env]
        for col, (attr, label) in enumerate(
            (("gdd_single", "1-step"), ("gdd_multi", "multi-step"))
        ):
            ax = axes[row, col]
            pts = [r for r in rs if r.model is not None and getattr(r, attr) is not None]
            rows = label_rows([getattr(r, attr) for r in pts], [r.mean_return for r in pts])
            for r, label_row in zip(pts, rows, strict=True):
                x = getattr(r, attr)
                ax.errorbar(
                    x,
                    r.mean_return,
                    yerr=_nan(r.se_return),
                    fmt="o",
                    capsize=3,
                    color=colour[r.model],
                )
                ax.annotate(
                    r.model,
                    (x, r.mean_return),
                    textcoords="offset points",
                    xytext=(4, 4 - 9 * label_row),  # close points: labels stacked downwards
                    fontsize=8,
                )
            for r in rs:
                if r.agent in styles:
                    color, ls = styles[r.agent]
                    ax.axhline(r.mean_return, color=color, ls=ls, lw=1, label=r.agent)
            rho = corr.get(env, {}).get("single" if col == 0 else "multi", math.nan)
            ax.set_title(f"{env}: return vs {label} GDD (Spearman {_fmt(rho, 2)})", fontsize=10)
            ax.set_xlabel(f"{label} GDD (lower is better)")
            ax.set_ylabel("real-env return")
            if not pts:
                ax.text(0.5, 0.5, "no GDD results", transform=ax.transAxes, ha="center")
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_downstream(
    env_name: str,
    num_nodes: int,
    models: Mapping[str, Any],
    *,
    budget: int,
    episodes: int = 100,
    seed: int = 0,
    ppo_kwargs: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[DownstreamRecord]:
    """Every record of one env: a dream agent per model (``{name: model}``), the real-env
    agent with the same budget, and the yardsticks, all evaluated on the same episodes."""
    say = progress or (lambda _msg: None)
    records = []
    for name, model in models.items():
        say(f"dream agent in {name}")
        records.append(
            dream_record(
                model,
                name,
                env_name,
                num_nodes,
                budget=budget,
                episodes=episodes,
                seed=seed,
                ppo_kwargs=ppo_kwargs,
            )
        )
    say("real-env agent")
    records.append(
        real_record(
            env_name, num_nodes, budget=budget, episodes=episodes, seed=seed, ppo_kwargs=ppo_kwargs
        )
    )
    records += yardstick_records(env_name, num_nodes, episodes=episodes)
    return records


register_record("downstream", DownstreamRecord)
