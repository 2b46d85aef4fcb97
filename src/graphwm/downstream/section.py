"""The ``[downstream]`` preset section and the downstream defaults: read where they are used
(graphwm.downstream's agents, runs and jobs); :class:`graphwm.config.Preset` holds it as its
typed field ``downstream`` (docs/dream.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Self

from pydantic import StrictBool, model_validator

from graphwm.config_values import (
    MAX_SEED,
    Float,
    Given,
    Int,
    Names,
    Section,
    Seed,
    Str,
    _fail,
    defaults,
)

#: agent policies: graphwm_envs.agents' MaskableGraphPolicy (any N, message passing) or SB3's
#: MultiInputPolicy (an MLP on the flattened observation, tied to one N)
GRAPH, MLP = "graph", "mlp"
POLICIES = (GRAPH, MLP)
#: parallel envs per trained agent unless the preset says otherwise
DEFAULT_ENVS = 8
#: the graph policy's width and depth unless the preset says otherwise: the defaults of
#: graphwm_envs.agents.MaskableGraphPolicy (``hidden_dim``, ``num_layers``)
GRAPH_HIDDEN_DIM, GRAPH_NUM_LAYERS = 64, 3
#: the graph policy's largest width and depth (a width of 65536 is 4 G weights a layer)
MAX_POLICY_WIDTH, MAX_POLICY_DEPTH = 65536, 1024
#: ``{[downstream] key: its default}`` of the graph policy's network settings
GRAPH_NET_DEFAULTS = {"policy_hidden_dim": GRAPH_HIDDEN_DIM, "policy_num_layers": GRAPH_NUM_LAYERS}


class PpoSettings(Section):
    """``[downstream.ppo]``: MaskablePPO settings; a field left at ``None`` keeps
    stable-baselines3's default, the others are the defaults of every downstream agent."""

    n_steps: Annotated[int, Int(ge=1, le=2**20)] = 256  # rollout length per env
    # SB3 normalizes advantages over a minibatch: one sample has no spread
    batch_size: Annotated[int, Int(ge=2, le=2**20)] = 64
    n_epochs: Annotated[int, Int(ge=1, le=10_000)] = 4
    learning_rate: Annotated[float, Float(gt=0.0, le=1.0)] = 3e-4
    gamma: Annotated[float, Float(gt=0.0, le=1.0)] | None = None
    gae_lambda: Annotated[float, Float(ge=0.0, le=1.0)] | None = None
    ent_coef: Annotated[float, Float(ge=0.0, le=10.0)] | None = None
    clip_range: Annotated[float, Float(gt=0.0, le=10.0)] | None = None


#: MaskablePPO settings of every downstream agent unless the preset overrides them
DEFAULT_PPO = {k: v for k, v in defaults(PpoSettings).items() if v is not None}
PPO_KEYS = tuple(PpoSettings.model_fields)


class DownstreamConfig(Section):
    """The ``[downstream]`` preset section (see docs/dream.md).

    Attributes:
        budget: env steps of MaskablePPO training per agent, summed over its parallel envs.
        policy: ``"graph"`` (``graphwm_envs.agents.MaskableGraphPolicy``) or ``"mlp"``.
        policy_hidden_dim, policy_num_layers: the graph policy's width and depth (0 layers:
            no message passing); refused with ``policy = "mlp"`` unless left at their defaults.
        dream_envs: parallel envs per agent (dream episodes per forward pass, or real envs).
        episodes: real-env evaluation episodes per agent; num_nodes: their N.
        envs, models: what to run (``None``: every env of the preset, every model and
            ablation it trains there).
        real_agent, yardsticks: also the real-env agent, the random and greedy policies.
        eval_seed: first evaluation seed (episode e resets with ``eval_seed + e``).
        ppo: MaskablePPO overrides (keys in ``PPO_KEYS``, see :class:`PpoSettings`).
    """

    budget: Annotated[int, Int(ge=1)]
    policy: Annotated[str, Str(POLICIES)] = GRAPH
    policy_hidden_dim: Annotated[int, Int(ge=1, le=MAX_POLICY_WIDTH)] = GRAPH_HIDDEN_DIM
    policy_num_layers: Annotated[int, Int(ge=0, le=MAX_POLICY_DEPTH)] = GRAPH_NUM_LAYERS
    dream_envs: Annotated[int, Int(ge=1, le=4096)] = DEFAULT_ENVS
    episodes: Annotated[int, Int(ge=1, le=10**6)] = 100
    num_nodes: Annotated[int, Int(ge=5)] = 20
    envs: Names | None = None
    models: Names | None = None
    real_agent: StrictBool = True
    yardsticks: StrictBool = True
    eval_seed: Seed = 1_000_000
    ppo: Annotated[dict[str, Any], Given(PpoSettings)] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The TOML/dict form that :meth:`parse` reads back (unset keys left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def parse(cls, raw: Any, key: str = "downstream") -> Self:
        """The section read (errors name ``downstream.<key>``)."""
        return super().parse(raw, key)

    @model_validator(mode="after")
    def _sb3_limits(self) -> Self:
        """Evaluation seeds stay seeds, a rollout holds more than one sample (SB3 normalizes
        advantages over it), and the MLP policy has no graph network to set."""
        if self.eval_seed + self.episodes - 1 > MAX_SEED:
            why = "episode e resets with eval_seed + e, and seeds stop there"
            what = f"plus episodes - 1 ({self.episodes - 1}) must be <= {MAX_SEED} ({why})"
            raise _fail("eval_seed", what, self.eval_seed)
        n_steps = {**DEFAULT_PPO, **(self.ppo or {})}["n_steps"]
        if n_steps * self.dream_envs < 2:
            why = "a rollout of one sample gives PPO no advantage spread"
            raise _fail(
                "ppo.n_steps", f"times dream_envs ({self.dream_envs}) must be >= 2 ({why})", n_steps
            )
        for name, default in GRAPH_NET_DEFAULTS.items():
            if self.policy != GRAPH and getattr(self, name) != default:
                what = (
                    f"sets the graph policy's network, but policy is {self.policy!r} (leave "
                    f"it at {default} or use policy = {GRAPH!r})"
                )
                raise _fail(name, what, getattr(self, name))
        return self

    def check(self, envs: Sequence[str], models_of: Callable[[str], Sequence[str]]) -> None:
        """``ValueError`` when the section names an env the preset does not run or a model it
        does not train (``models_of(env)``: the preset's models and ablations of ``env``)."""
        for i, env in enumerate(self.envs or ()):
            if env not in envs:
                at = f"preset key 'downstream.envs[{i}]' ({env!r})"
                raise ValueError(f"{at} is not one of the preset's envs {list(envs)}")
        trained = {m for env in (self.envs or envs) for m in models_of(env)}
        for i, model in enumerate(self.models or ()):
            if model not in trained:
                raise ValueError(
                    f"preset key 'downstream.models[{i}]' ({model!r}) is not trained by the "
                    f"preset on its downstream envs (trained: {sorted(trained)})"
                )
