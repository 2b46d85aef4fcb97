"""The ``[downstream]`` preset section and the agent names used throughout the downstream
experiment (docs/dream.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from graphwm.config import MAX_SEED
from graphwm.envs import env_class
from graphwm.settings import Where, defaults, parse, setting

#: agent names of the reference rows (dream-trained agents are ``"dream:<model>"``)
REAL, RANDOM, GREEDY = "real", "random", "greedy"
YARDSTICKS = (RANDOM, GREEDY)
#: agent policies: graphwm_envs.agents' MaskableGraphPolicy (any N, message passing) or SB3's
#: MultiInputPolicy (an MLP on the flattened observation, tied to one N)
GRAPH, MLP = "graph", "mlp"
POLICIES = (GRAPH, MLP)
#: parallel envs per trained agent unless the preset says otherwise
DEFAULT_ENVS = 8
#: the graph policy's width and depth unless the preset says otherwise: the defaults of
#: graphwm_envs.agents.MaskableGraphPolicy (``hidden_dim``, ``num_layers``)
GRAPH_HIDDEN_DIM, GRAPH_NUM_LAYERS = 64, 3
#: the graph policy's largest width and depth a preset may ask for (a width of 65536 is
#: already 4 G weights a layer)
MAX_POLICY_WIDTH, MAX_POLICY_DEPTH = 65536, 1024
#: ``{[downstream] key: its default}`` of the graph policy's network settings
GRAPH_NET_DEFAULTS = {"policy_hidden_dim": GRAPH_HIDDEN_DIM, "policy_num_layers": GRAPH_NUM_LAYERS}


@dataclass(frozen=True)
class PpoSettings:
    """``[downstream.ppo]``: MaskablePPO settings; a field left at ``None`` keeps
    stable-baselines3's default, the others are the defaults of every downstream agent."""

    n_steps: int = setting(256, ge=1, le=2**20, help="rollout length per env")
    # SB3 normalizes advantages over a minibatch: one sample has no spread
    batch_size: int = setting(64, ge=2, le=2**20, help="minibatch size")
    n_epochs: int = setting(4, ge=1, le=10_000, help="passes over each rollout")
    learning_rate: float = setting(3e-4, gt=0.0, le=1.0)
    gamma: float | None = setting(None, gt=0.0, le=1.0)
    gae_lambda: float | None = setting(None, ge=0.0, le=1.0)
    ent_coef: float | None = setting(None, ge=0.0, le=10.0)
    clip_range: float | None = setting(None, gt=0.0, le=10.0)


#: MaskablePPO settings of every downstream agent unless the preset overrides them
DEFAULT_PPO = {k: v for k, v in defaults(PpoSettings).items() if v is not None}
PPO_KEYS = tuple(f.name for f in fields(PpoSettings))


@dataclass(frozen=True)
class DownstreamConfig:
    """The ``[downstream]`` preset section (see docs/dream.md).

    Attributes:
        budget: env steps of MaskablePPO training per agent, summed over its parallel envs
            (dream and real alike; rounded up to whole rollouts).
        policy: the agents' policy, ``"graph"`` (``graphwm_envs.agents.MaskableGraphPolicy``)
            or ``"mlp"`` (SB3's ``MultiInputPolicy``); dream and real agents alike.
        policy_hidden_dim: the graph policy's node embedding width (its ``hidden_dim``).
        policy_num_layers: the graph policy's message-passing layers (its ``num_layers``;
            0 switches message passing off). Both are refused with ``policy = "mlp"`` unless
            left at their defaults.
        dream_envs: parallel envs per agent: a dream agent steps this many imagined episodes
            with one world-model forward pass (``DreamSB3VecEnv``), the real-env agent as
            many real envs (SB3's ``DummyVecEnv``).
        episodes: real-env evaluation episodes per agent.
        num_nodes: N of the dream and real episodes.
        envs: envs to run (``None``: every env of the preset).
        models: world models to train agents in (``None``: every model and ablation the
            preset trains on that env).
        real_agent: also train the agent in the real env with the same budget.
        yardsticks: also evaluate the random policy and the greedy heuristic.
        eval_seed: first evaluation seed (episode e resets with ``eval_seed + e``).
        ppo: MaskablePPO overrides (keys in ``PPO_KEYS``, see :class:`PpoSettings`).
    """

    budget: int = setting(ge=1, help="agent training env steps")
    policy: str = setting(GRAPH, choices=POLICIES, help="agent policy")
    policy_hidden_dim: int = setting(
        GRAPH_HIDDEN_DIM, ge=1, le=MAX_POLICY_WIDTH, help="graph policy width"
    )
    policy_num_layers: int = setting(
        GRAPH_NUM_LAYERS, ge=0, le=MAX_POLICY_DEPTH, help="graph policy depth"
    )
    dream_envs: int = setting(DEFAULT_ENVS, ge=1, le=4096, help="parallel envs per agent")
    episodes: int = setting(100, ge=1, le=10**6)
    num_nodes: int = setting(20, ge=5)
    envs: tuple[str, ...] | None = setting(None, unique=True)
    models: tuple[str, ...] | None = setting(None, unique=True)
    real_agent: bool = True
    yardsticks: bool = True
    eval_seed: int = setting(1_000_000, ge=0, le=MAX_SEED)
    ppo: Mapping[str, Any] | None = setting(None, table=PpoSettings)

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
        from graphwm.config import PRESET

        return parse(cls, raw, PRESET, key)

    @classmethod
    def _check(cls, obj: DownstreamConfig, where: Where, key: str) -> None:
        """The graph policy's network settings mean nothing to the MLP policy: refused; the
        evaluation seeds ``eval_seed + e`` must stay seeds, and a rollout must hold more than
        one sample (SB3 normalizes advantages over it)."""
        last = obj.eval_seed + obj.episodes - 1
        if last > MAX_SEED:
            raise where.fail(
                f"{key}.eval_seed" if key else "eval_seed",
                f"plus episodes - 1 ({obj.episodes - 1}) must be <= {MAX_SEED} (episode e "
                "resets with eval_seed + e, and seeds stop there)",
                obj.eval_seed,
            )
        ppo = {**DEFAULT_PPO, **(obj.ppo or {})}
        if ppo["n_steps"] * obj.dream_envs < 2:
            raise where.fail(
                f"{key}.ppo.n_steps" if key else "ppo.n_steps",
                f"times dream_envs ({obj.dream_envs}) must be >= 2 (a rollout of one sample "
                "gives PPO no advantage spread)",
                ppo["n_steps"],
            )
        if obj.policy == GRAPH:
            return
        for name, default in GRAPH_NET_DEFAULTS.items():
            value = getattr(obj, name)
            if value != default:
                raise where.fail(
                    f"{key}.{name}" if key else name,
                    f"sets the graph policy's network, but policy is {obj.policy!r} (leave it "
                    f"at {default} or use policy = {GRAPH!r})",
                    value,
                )

    def graph_net(self) -> dict[str, int]:
        """The graph policy's network settings that differ from the defaults (``{}`` when
        none does, so a default section's job configs, and keys, stay as they were)."""
        return {k: getattr(self, k) for k, v in GRAPH_NET_DEFAULTS.items() if getattr(self, k) != v}

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
        train = {
            "budget": self.budget,
            "policy": self.policy,
            "dream_envs": self.dream_envs,
            **self.graph_net(),
            **({"ppo": dict(self.ppo)} if self.ppo else {}),
        }
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
    """Whether ``graphwm_envs.heuristics`` has a greedy heuristic for the env (read from the
    env class; no env is built)."""
    from graphwm_envs.heuristics import has_greedy_heuristic

    return has_greedy_heuristic(env_class(env_name))
