"""The preset: its TOML file read once into pydantic models, one per section.

:meth:`Preset.parse` reads a preset dict (as read from TOML) into frozen models whose fields
hold every default of the pipeline; unknown keys are refused (a typo would otherwise be
silently ignored). A bad value raises :class:`PresetError` naming the key, the value and what is
allowed, e.g. ``preset key 'collect.train_episodes': must be an integer >= 1, got 0`` (the
CLI puts the preset file in front). Checks that need the envs, the models or the machine are
:mod:`graphwm.checks`'.
"""

from __future__ import annotations

import copy
import math
import operator
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Self

from gdm_models.training.config import PRECISIONS, TrainConfig
from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

#: the trainer's defaults (gdm_models.training.TrainConfig): the [train] section's are these
_TRAINER = TrainConfig()

PRESET_NAMES = ("smoke", "medium", "long", "survey", "paper", "tiny")
#: the shipped presets (package data beside this module)
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
#: the largest preset file read (the shipped ones are a few kilobytes)
MAX_PRESET_BYTES = 2**20
#: the paper's envs; a preset may name any other graph env by its Gymnasium id (checked, with
#: the env registered, by graphwm.checks; docs/own-env.md)
ENV_NAMES = ("RGC", "OD", "SAR", "CF")
EXECUTORS = ("local", "ray")
# whether this machine has the device: graphwm.checks
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?|mps")
DEVICES = "'cpu', 'cuda', 'cuda:<index>' or 'mps'"
#: the largest integer a preset value may hold unless its field says less (a signed 32-bit
#: integer: what every count, index and size of the run's arrays and libraries can hold)
MAX_INT = 2**31 - 1
#: the largest seed: every generator of a run accepts it (numpy's legacy RandomState and
#: gymnasium's seeding stop at 2**32 - 1, torch.manual_seed at 2**64 - 1)
MAX_SEED = 2**32 - 1


class PresetError(ValueError):
    """A preset value is missing, of the wrong type or out of range (the key is named)."""


# ---------------------------------------------------------------------------------------------
# Values: pydantic checks types and structure; a Rule says what is allowed in the project's words
# ---------------------------------------------------------------------------------------------
class Rule:
    """Metadata of a preset value (``Annotated[int, Int(ge=1)]``): its type strict (``true``
    is no integer, ``"3"`` no number), then each ``(test, what)`` in order, refused with
    ``what``; ``then`` converts the value first."""

    def __init__(self, *tests: tuple[Callable[[Any], Any], str], strict: bool = True,
                 then: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
        self.tests, self.strict, self.then = tests, strict, then

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        schema = handler(source)
        if self.strict:
            schema = {**schema, "strict": True}
        return core_schema.no_info_after_validator_function(self._check, schema)

    def _check(self, value: Any) -> Any:
        value = value if self.then is None else self.then(value)
        for test, what in self.tests:
            if not test(value):
                raise ValueError(what)
        return value


def Int(ge: int | None = None, le: int | None = None) -> Rule:  # noqa: N802 (a type's rule)
    """An integer in ``[ge, le]`` (``le`` unset: :data:`MAX_INT`, said only when broken)."""
    top = MAX_INT if le is None else le
    low = "must be an integer" + (f" >= {ge}" if ge is not None else "")
    return Rule(
        (lambda v: ge is None or v >= ge, low + (f" and <= {le}" if le is not None else "")),
        (lambda v: v <= top, low + (" and" if ge is not None else "") + f" <= {top}"),
    )


def Float(**bound: float) -> Rule:  # noqa: N802
    """A finite number within ``bound`` (``gt``, ``ge``, ``le``, ``lt``; said as ``must lie in
    (0.0, 1.0]``), an integer read as a float (TOML's ``1`` for ``1.0``: keys hash alike)."""
    gt, ge, le, lt = (bound.get(k) for k in ("gt", "ge", "le", "lt"))
    low = f"({gt}" if gt is not None else (f"[{ge}" if ge is not None else "(-inf")
    high = f"{lt})" if lt is not None else (f"{le}]" if le is not None else "inf)")
    ops = [
        (op, b)
        for op, b in zip(
            (operator.gt, operator.ge, operator.le, operator.lt), (gt, ge, le, lt), strict=True
        )
        if b is not None
    ]
    inside = (lambda v: all(op(v, b) for op, b in ops), f"must lie in {low}, {high}")
    return Rule((math.isfinite, "must be a finite number"), inside, then=float)


def Str(choices: Sequence[str] | None = None) -> Rule:  # noqa: N802
    """A non-empty string (one of ``choices`` when given)."""
    one_of = f"must be one of {list(choices or [])}"
    return Rule(
        (bool, "must be a non-empty string"), (lambda v: not choices or v in choices, one_of)
    )


def Items(*, allow_empty: bool = False) -> Rule:  # noqa: N802
    """A list (kept as a tuple) of distinct values, non-empty unless allowed."""
    filled = (lambda v: allow_empty or len(v) > 0, "must be a non-empty list")
    return Rule(
        filled,
        (lambda v: len(set(map(repr, v))) == len(v), "must not repeat a value"),
        strict=False,
    )


class Given:
    """Metadata of a ``dict`` field read through a section ``model`` (keys and values checked)
    and kept as a plain dict of the keys given: what job keys hash (a default left unset
    stays out of them)."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_after_validator_function(
            lambda m: m.model_dump(exclude_unset=True), handler.generate_schema(self.model),
            serialization=core_schema.plain_serializer_function_ser_schema(dict),
        )  # fmt: skip


Sizes = Annotated[tuple[Annotated[int, Int(ge=2)], ...], Items()]  # each env's range: checks
Name = Annotated[str, Str()]
Names = Annotated[tuple[Name, ...], Items()]
Seed = Annotated[int, Int(ge=0, le=MAX_SEED)]


class Section(BaseModel):
    """A preset table: frozen, every key known."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping):
            unknown = sorted(str(k) for k in set(raw) - set(cls.model_fields))
            if unknown:
                raise PydanticCustomError(
                    "unknown_key",
                    "unknown key",
                    {"key": unknown[0], "known": sorted(cls.model_fields)},
                )
        return raw

    @classmethod
    def parse(cls, raw: Any, key: str = "") -> Self:
        """The table ``raw`` (at preset key ``key``) read; :class:`PresetError` naming a key."""
        try:
            return cls.model_validate(raw)
        except ValidationError as err:
            raise preset_error(err, key) from None


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    """``{field: default}`` of a section (fields with a default only)."""
    return {k: f.get_default(call_default_factory=True) for k, f in model.model_fields.items()
            if not f.is_required()}  # fmt: skip


def _fail(key: str, what: str, value: Any = None) -> PydanticCustomError:
    """A check between fields: ``key`` (below the table) refused with ``what``."""
    return PydanticCustomError("preset", "refused", {"key": key, "what": what, "value": value})


def _short(value: Any) -> str:
    try:
        text = repr(list(value) if isinstance(value, tuple) else value)
    except RecursionError:
        return "a value nested too deeply to show"
    return text if len(text) <= 200 else text[:200] + "..."


#: what each pydantic error type means, in the words of the range table
_TYPES = {"int_type": "must be an integer", "float_type": "must be a number",
          "bool_type": "must be true or false", "string_type": "must be a non-empty string",
          "tuple_type": "must be a list", "list_type": "must be a list",
          "dict_type": "must be a table", "model_type": "must be a table",
          "model_attributes_type": "must be a table"}  # fmt: skip


def preset_error(err: ValidationError, key: str = "") -> PresetError:
    """The first error of ``err`` as ``preset key 'a.b[1]': what is allowed, got value``."""
    e = err.errors()[0]
    parts = [key] if key else []
    for p in e["loc"]:
        if isinstance(p, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{p}]"]
        else:
            parts.append(str(p))
    ctx, kind = e.get("ctx") or {}, e["type"]
    if ctx.get("key"):
        parts.append(ctx["key"])
    where = f"preset key {'.'.join(parts) or 'the preset'!r}"
    if kind == "unknown_key":
        return PresetError(f"{where} is unknown; known keys here: {ctx['known']}")
    if kind == "missing":
        return PresetError(f"{where} is missing")
    if kind == "preset":
        got = "" if ctx.get("value") is None else f", got {_short(ctx['value'])}"
        return PresetError(f"{where}: {ctx['what']}{got}")
    what = str(ctx["error"]) if kind == "value_error" else _TYPES.get(kind, e["msg"])
    return PresetError(f"{where}: {what}, got {_short(e['input'])}")


# ---------------------------------------------------------------------------------------------
# The sections: every default of the pipeline is a field default below
# ---------------------------------------------------------------------------------------------
class CollectConfig(Section):
    """Stage 1: sizes and episode counts per split (``[collect]``)."""

    train_sizes: Sizes  # N of the training files (observations stored)
    train_episodes: Annotated[int, Int(ge=1)]
    val_sizes: Sizes  # N of the validation files (search)
    val_episodes: Annotated[int, Int(ge=1)]
    test_sizes: Sizes  # N of the test files (replayed from seeds)
    test_episodes: Annotated[int, Int(ge=1)]
    # RGC episodes are quadratic in N (docs/reproducing.md): its test sizes above are skipped
    rgc_max_test_size: Annotated[int, Int(ge=2)] = 200


class FitConfig(Section):
    """Stage 2: bandwidth fitting (``[fit]``; paper appendix "Bandwidth Fitting")."""

    transitions_per_episode: Annotated[int, Int(ge=1)] = 8
    seed: Seed = 0


class TrainerSettings(Section):
    """``[train.train_overrides]`` (and the trainer keys of a search grid): set for every
    model, else the model's hyperparameters (gdm_models.get_preset) hold."""

    lr: Annotated[float, Float(gt=0.0, le=10.0)] | None = None  # Adam learning rate
    batch_size: Annotated[int, Int(ge=1)] | None = None  # episodes per batch
    seq_len: Annotated[int, Int(ge=1)] | None = None  # transitions per training sequence


TRAINER_KEYS = tuple(TrainerSettings.model_fields)


class TrainSection(Section):
    """Stage 3: training length, overrides and trainer options (``[train]``).

    Exactly one of ``steps`` and ``epochs``. ``model_overrides`` maps a base model name
    (``gdm``, ``vanilla-gwm``, ...) to model hyperparameters (checked against the model's
    config by :mod:`graphwm.checks`); ``train_overrides`` sets ``lr``/``batch_size``/
    ``seq_len`` for every model. ``ensemble``: the most seeds of one configuration trained
    together (graphwm.stages.ensemble). ``eval_every``: steps between the checkpoints kept
    and evaluated for the GDD curve (0: off; graphwm.stages.curve).
    """

    steps: Annotated[int, Int(ge=1)] | None = None
    epochs: Annotated[int, Int(ge=1)] | None = None
    checkpoint_every: Annotated[int, Int(ge=1)] = _TRAINER.checkpoint_every
    model_overrides: dict[str, dict[str, Any]] = {}
    train_overrides: Annotated[dict[str, Any], Given(TrainerSettings)] = {}
    precision: Annotated[str, Str(PRECISIONS)] = _TRAINER.precision
    compile: StrictBool = _TRAINER.compile
    log_every: Annotated[int, Int(ge=1)] = _TRAINER.log_every
    tensorboard: StrictBool = False  # needs the graphwm[tensorboard] extra
    ensemble: Annotated[int, Int(ge=1)] = _TRAINER.ensemble
    eval_every: Annotated[int, Int(ge=0)] = 0

    @model_validator(mode="after")
    def _length(self) -> Self:
        if (self.steps is None) == (self.epochs is None):
            raise _fail("", "give exactly one of 'steps' and 'epochs'")
        if self.eval_every and self.steps is None:
            raise _fail("eval_every", "needs the training length in 'steps' (not 'epochs')",
                        self.eval_every)  # fmt: skip
        if self.eval_every and self.steps is not None and self.eval_every > self.steps:
            raise _fail("eval_every", f"must be at most 'steps' = {self.steps}", self.eval_every)
        return self


class EvalConfig(Section):
    """Stages 4-6: the single-step evaluation protocol (``[evaluate]``).

    ``num_samples`` is kappa (>= 2: the unbiased self-GDD and the permutation test need two
    samples per set). ``permutations`` > 0 adds the permutation-test column (at most 10^6: a
    p-value resolution far beyond any test level). ``curve_episodes``: test episodes (the first
    ones) of the GDD curve's subset; unset: 2, or every evaluated test episode where fewer.
    """

    num_samples: Annotated[int, Int(ge=2)]
    reference_transitions: Annotated[int, Int(ge=1)]
    max_episodes: Annotated[int, Int(ge=1)] | None = None  # test episodes used (None: all)
    permutations: Annotated[int, Int(ge=0, le=10**6)] = 0
    alpha: Annotated[float, Float(gt=0.0, lt=1.0)] = 0.05
    curve_episodes: Annotated[int, Int(ge=1)] = 2

    def evaluated(self, test_episodes: int) -> int:
        """The test episodes the final evaluation uses."""
        return min(test_episodes, self.max_episodes or test_episodes)


class MultiStepConfig(Section):
    """Stage 7: multi-step rollouts (``[multi_step]``)."""

    num_samples: Annotated[int, Int(ge=2)]
    reference_transitions: Annotated[int, Int(ge=1)]
    size: Annotated[int, Int(ge=2)]  # N of the multi-step test file
    horizon: Annotated[int, Int(ge=1)]  # rollout length H
    max_episodes: Annotated[int, Int(ge=1)] | None = None


class SearchConfig(Section):
    """``[search]``: ``grid.<model>.<name>`` lists the values of one hyperparameter (a list of
    tables sets several at once; checked by :mod:`graphwm.checks`) and the validation sizes."""

    grid: dict[str, dict[str, list]] = {}
    val_sizes: Sizes | None = None


# ---------------------------------------------------------------------------------------------
# [downstream]: RL agents trained in each model's dream env (docs/dream.md; graphwm.downstream)
# ---------------------------------------------------------------------------------------------
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

    def graph_net(self) -> dict[str, int]:
        """The graph policy's network settings that differ from the defaults (``{}`` when
        none does, so a default section's job configs, and keys, stay as they were)."""
        return {k: getattr(self, k) for k, v in GRAPH_NET_DEFAULTS.items() if getattr(self, k) != v}

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


class Preset(Section):
    """A validated preset. Build with :meth:`parse` (checked: :func:`graphwm.checks.parse_checked`).

    ``envs``: short names of :data:`ENV_NAMES` or Gymnasium ids (``"mypkg/MyEnv-v0"``,
    ``"mypkg.envs:mypkg/MyEnv-v0"``). ``env_labels``: short labels of envs in tables and
    figures. ``ablation_sizes``: the test sizes the ablations are evaluated at (None: all).
    ``workers``: local worker processes (0: one per core).
    """

    envs: Names
    models: Names
    seeds: Annotated[tuple[Seed, ...], Items()]
    collect: CollectConfig
    train: TrainSection
    evaluate: EvalConfig
    name: Annotated[str, Str()] = "custom"
    fit: FitConfig = FitConfig()
    ablations: Annotated[tuple[Name, ...], Items(allow_empty=True)] = ()
    ablation_envs: Annotated[tuple[Name, ...], Items(allow_empty=True)] | None = None
    env_labels: dict[str, StrictStr] = {}
    ablation_sizes: Sizes | None = None
    device: Annotated[str, Rule((DEVICE_PATTERN.fullmatch, f"must be {DEVICES}"))] = "cpu"
    executor: Annotated[str, Str(EXECUTORS)] = "local"
    workers: Annotated[int, Int(ge=0)] = 0
    multi_step: MultiStepConfig | None = None
    search: SearchConfig | None = None
    downstream: DownstreamConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _empty_multi_step(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping) and raw.get("multi_step", True) in ({}, None):
            raw = {k: v for k, v in raw.items() if k != "multi_step"}  # no multi-step stage
        return raw

    @model_validator(mode="after")
    def _curve(self) -> Self:
        """The GDD curve's subset lies inside the final evaluation's episodes; unset, it is
        lowered to them (a key the user never set must not be the one a preset fails on)."""
        e = self.evaluate
        evaluated = e.evaluated(self.collect.test_episodes)
        if "curve_episodes" not in e.model_fields_set and e.curve_episodes > evaluated:
            object.__setattr__(self, "evaluate", e.model_copy(update={"curve_episodes": evaluated}))
        elif self.train.eval_every and e.curve_episodes > evaluated:
            raise _fail("evaluate.curve_episodes", f"must be at most the {evaluated} test "
                        "episodes the final evaluation uses (collect.test_episodes, "
                        "evaluate.max_episodes)", e.curve_episodes)  # fmt: skip
        return self

    @classmethod
    def parse(cls, raw: Any, key: str = "") -> Self:
        """Validate a preset dict (as read from TOML); :class:`PresetError` naming a key. What
        needs the envs and the models is checked on top by
        :func:`graphwm.checks.parse_checked`."""
        return raw if isinstance(raw, cls) else super().parse(raw, key)

    # -- derived views -----------------------------------------------------------------------
    def test_sizes(self, env: str) -> tuple[int, ...]:
        """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
        sizes = self.collect.test_sizes
        if env == "RGC":
            sizes = tuple(n for n in sizes if n <= self.collect.rgc_max_test_size)
        return sizes

    def eval_sizes(self, env: str, model: str) -> tuple[int, ...]:
        """The test sizes ``model`` is evaluated at on ``env``: :meth:`test_sizes`, for an
        ablation only those in ``ablation_sizes`` (when set)."""
        sizes = self.test_sizes(env)
        if model in self.models or self.ablation_sizes is None:
            return sizes
        return tuple(n for n in sizes if n in self.ablation_sizes)

    def models_of(self, env: str) -> tuple[str, ...]:
        """The models trained on ``env``: the preset's models plus its ablations if selected."""
        models = list(self.models)
        if self.ablation_envs is None or env in self.ablation_envs:
            models += [a for a in self.ablations if a not in models]
        return tuple(models)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict that :meth:`parse` reads back to an equal preset."""
        return self.model_dump(mode="json", exclude_none=True)


def read_preset(name_or_path: str | Path) -> dict[str, Any]:
    """The raw dict of a named preset (``smoke``, ``paper``, ``tiny``) or a TOML file.

    Raises:
        PresetError: the name is neither a shipped preset nor a path; the file is missing, is
            not a regular file, is not UTF-8 text or not TOML (each said as such).
    """
    text = str(name_or_path)
    if not text.strip():
        raise PresetError(f"the preset is empty: give one of {PRESET_NAMES} or a .toml file")
    if text in PRESET_NAMES:
        return tomllib.loads((PRESETS_DIR / f"{text}.toml").read_text(encoding="utf-8"))
    path = Path(name_or_path)
    if path.suffix != ".toml" and len(path.parts) <= 1 and not path.exists():
        raise PresetError(f"unknown preset {text!r}: give one of {PRESET_NAMES} or a .toml file")
    if not path.exists():
        raise PresetError(f"preset file {path} does not exist")
    if not path.is_file():
        raise PresetError(f"preset file {path} is not a regular file")
    if path.stat().st_size > MAX_PRESET_BYTES:
        raise PresetError(f"preset file {path} is {path.stat().st_size} bytes; a preset is at "
                          f"most {MAX_PRESET_BYTES}")  # fmt: skip
    try:
        # a UTF-8 byte order mark (some editors write one) is read as what it is, not TOML
        return tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise PresetError(f"preset file {path} is not UTF-8 text ({err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise PresetError(f"preset file {path} is not valid TOML: {err}") from None
    except RecursionError:
        raise PresetError(f"preset file {path} nests arrays or tables too deeply") from None


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict:
    """A deep copy of ``raw`` with overrides; ``"a.b"`` keys set nested tables, None skips.

    Raises:
        PresetError: a table an override sets a key of is something else in ``raw``
            (``train = 5`` with ``train.precision``).
    """
    try:
        out = copy.deepcopy(dict(raw))
    except RecursionError:
        raise PresetError("the preset nests arrays or tables too deeply") from None
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = key.split(".")
        table = out
        for i, p in enumerate(parents):
            table = table.setdefault(p, {})
            if not isinstance(table, dict):
                where = ".".join(parents[: i + 1])
                raise PresetError(f"preset key {where!r}: must be a table (to set {key!r}), "
                                  f"got {_short(table)}")  # fmt: skip
        table[leaf] = value
    return out


def preset_dict(
    name_or_path: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The preset by name, TOML file (or dict) as a plain dict to edit, unchecked (parse it
    with :func:`graphwm.pipeline.load_preset` or pass it to a pipeline function).
    ``overrides`` replace keys (``"train.precision"`` style keys set nested ones; ``None``
    values are skipped); a ``"models"`` override also drops the ``train.model_overrides`` of
    the models it leaves out (:func:`keep_models`)."""
    raw = name_or_path if isinstance(name_or_path, Mapping) else read_preset(name_or_path)
    out = apply_overrides(raw, overrides)
    models = (overrides or {}).get("models")
    return keep_models(out, models) if isinstance(models, list) else out


def keep_models(raw: Mapping[str, Any], models: Sequence[str]) -> dict:
    """A copy of the preset dict ``raw`` that runs only ``models`` (what ``--models`` selects,
    for a preset handled as a dict): ``models`` set, and the ``train.model_overrides`` tables
    of the base models it no longer runs (neither in ``models`` nor in its ``ablations``)
    removed (``graphwm.checks`` refuses tables of models a preset does not run)."""
    out = copy.deepcopy(dict(raw))
    out["models"] = list(models)
    ablations = out.get("ablations")
    kept = [*models, *(ablations if isinstance(ablations, list) else [])]
    runs = {str(m).split(":", 1)[0] for m in kept}
    train = out.get("train")
    if isinstance(train, dict) and isinstance(train.get("model_overrides"), dict):
        overrides = train["model_overrides"]
        train["model_overrides"] = {k: v for k, v in overrides.items() if k in runs}
    return out
