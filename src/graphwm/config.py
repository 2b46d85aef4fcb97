"""Typed, validated presets: every default of the pipeline is a dataclass field here.

A preset (TOML file or dict) is parsed by :meth:`Preset.parse` into frozen dataclasses before
any work starts, by the one field-driven parser of :mod:`graphwm.settings` (type hints, defaults,
``setting(ge=..., choices=...)`` metadata); a bad value raises :class:`PresetError` naming the
preset key, e.g. ``preset key 'collect.train_episodes': must be an integer >= 1, got 0``.
Unknown keys are refused too (a typo would otherwise be silently ignored). Checks that need the
envs and the models (names, overrides, size limits) are in :mod:`graphwm.checks`.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from gdm_models.training.config import PRECISIONS, TrainConfig

from graphwm.settings import Where, defaults, parse, read_fields, setting

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
# "cpu", "cuda", "cuda:<index>" or "mps"; whether this machine has it: graphwm.checks
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?|mps")


class PresetError(ValueError):
    """A preset value is missing, of the wrong type or out of range (the key is named)."""


# ---------------------------------------------------------------------------------------------
# The range table of preset numbers (docs/reproducing.md, "Limits"). Every integer a preset
# holds has an upper bound: its field's own ``le``, else MAX_INT; seeds MAX_SEED. Sizes and
# counts whose memory grows with them are bounded by this machine's memory on top
# (graphwm.checks). Floats must be finite, and rates carry their own bounds.
# ---------------------------------------------------------------------------------------------
#: the largest integer a preset value may hold unless its field says less: a signed 32-bit
#: integer, what every count, index and size of the run's arrays and libraries can hold
MAX_INT = 2**31 - 1
#: the largest seed: every generator of a run accepts it (numpy's legacy RandomState and
#: gymnasium's seeding stop at 2**32 - 1, torch.manual_seed at 2**64 - 1)
MAX_SEED = 2**32 - 1

#: how preset errors are worded: ``preset key 'collect.train_episodes': must be ..., got 0``
PRESET = Where(PresetError, "preset key ", max_int=MAX_INT)


def _sizes(**kw: Any) -> Any:
    # graph sizes N: the envs accept 5 <= N <= max_nodes (graphwm.checks.check_limits)
    return setting(ge=2, unique=True, **kw)


# ---------------------------------------------------------------------------------------------
# The typed preset: every default of the pipeline is a field default below
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectConfig:
    """Stage 1: sizes and episode counts per split (``[collect]``)."""

    train_sizes: tuple[int, ...] = _sizes(help="N of the training files (observations stored)")
    train_episodes: int = setting(ge=1, help="episodes per training size")
    val_sizes: tuple[int, ...] = _sizes(help="N of the validation files (search)")
    val_episodes: int = setting(ge=1, help="episodes per validation size")
    test_sizes: tuple[int, ...] = _sizes(help="N of the test files (replayed from seeds)")
    test_episodes: int = setting(ge=1, help="episodes per test size")
    # RGC episodes are quadratic in N (docs/reproducing.md)
    rgc_max_test_size: int = setting(200, ge=2, help="RGC test sizes above this are skipped")


@dataclass(frozen=True)
class FitConfig:
    """Stage 2: bandwidth fitting (``[fit]``)."""

    # paper appendix "Bandwidth Fitting"
    transitions_per_episode: int = setting(8, ge=1, help="bandwidth transitions per episode")
    seed: int = setting(0, ge=0, le=MAX_SEED, help="seed of the transitions' draw")


@dataclass(frozen=True)
class TrainerSettings:
    """``[train.train_overrides]`` (and the trainer keys of a search grid): set for every
    model, else the paper's per-model preset (gdm_models.get_preset) holds."""

    lr: float | None = setting(None, gt=0.0, le=10.0, help="Adam learning rate")
    batch_size: int | None = setting(None, ge=1, help="episodes per batch")
    seq_len: int | None = setting(None, ge=1, help="transitions per training sequence")


TRAINER_KEYS = tuple(f.name for f in fields(TrainerSettings))


@dataclass(frozen=True)
class TrainSection:
    """Stage 3: training length, overrides and trainer options (``[train]``).

    Exactly one of ``steps`` and ``epochs``. ``model_overrides`` maps a base model name
    (``gdm``, ``vanilla-gwm``, ...) to model hyperparameters (checked against the model's
    config by :mod:`graphwm.checks`); ``train_overrides`` sets ``lr``/``batch_size``/
    ``seq_len`` for every model (else the paper's per-model preset).
    """

    steps: int | None = setting(None, ge=1, help="optimiser steps")
    epochs: int | None = setting(None, ge=1, help="passes over the training episodes")
    checkpoint_every: int = setting(
        _TRAINER.checkpoint_every, ge=1, help="steps between checkpoints"
    )
    model_overrides: dict[str, dict[str, Any]] = setting(default_factory=dict)
    train_overrides: dict[str, Any] = setting(default_factory=dict, table=TrainerSettings)
    precision: str = setting(_TRAINER.precision, choices=PRECISIONS)
    compile: bool = setting(_TRAINER.compile, help="torch.compile the model")
    log_every: int = setting(_TRAINER.log_every, ge=1, help="steps between log.csv rows")
    tensorboard: bool = setting(
        False, help="also write TensorBoard event files (needs the graphwm[tensorboard] extra)"
    )
    # seeds in preset order chunked by K (graphwm.stages.ensemble); 1: every seed alone
    ensemble: int = setting(
        _TRAINER.ensemble,
        ge=1,
        help="most seeds of one configuration trained together as one ensemble",
    )
    # the GDD curve (graphwm.stages.curve): 0 keeps and evaluates no intermediate checkpoint
    eval_every: int = setting(
        0, ge=0, help="steps between the checkpoints kept and evaluated for the GDD curve (0: off)"
    )

    @classmethod
    def _check(cls, obj: TrainSection, where: Where, key: str) -> None:
        if (obj.steps is None) == (obj.epochs is None):
            raise where.say(f"{where.loc(key)}: give exactly one of 'steps' and 'epochs'")
        at = f"{key}.eval_every" if key else "eval_every"
        if obj.eval_every and obj.steps is None:
            raise where.fail(at, "needs the training length in 'steps' (not 'epochs')",
                             obj.eval_every)  # fmt: skip
        if obj.eval_every and obj.steps is not None and obj.eval_every > obj.steps:
            raise where.fail(at, f"must be at most 'steps' = {obj.steps}", obj.eval_every)


@dataclass(frozen=True)
class EvalConfig:
    """Stages 4-6: the single-step evaluation protocol (``[evaluate]``).

    ``num_samples`` is kappa (>= 2: the unbiased self-GDD and the permutation test need two
    samples per set). ``permutations`` > 0 adds the permutation-test column.
    """

    num_samples: int = setting(ge=2, help="kappa: model samples per reference transition")
    reference_transitions: int = setting(ge=1, help="reference transitions per episode")
    max_episodes: int | None = setting(None, ge=1, help="test episodes used (None: all)")
    # le: a p-value resolution of 1e-6 is far beyond any test level; the run's total
    # permutation work is bounded too (graphwm.checks.MAX_PERMUTATION_HOURS)
    permutations: int = setting(
        0, ge=0, le=10**6, help="permutation-test relabelings (0: no column)"
    )
    alpha: float = setting(0.05, gt=0.0, lt=1.0, help="level of the permutation test")
    curve_episodes: int = setting(
        2,
        ge=1,
        help="test episodes (the first ones) of the GDD curve's subset (train.eval_every); "
        "unset: 2, or every evaluated test episode where there are fewer",
    )


@dataclass(frozen=True)
class MultiStepConfig:
    """Stage 7: multi-step rollouts (``[multi_step]``)."""

    num_samples: int = setting(ge=2, help="model rollouts per reference transition")
    reference_transitions: int = setting(ge=1, help="reference transitions per episode")
    size: int = setting(ge=2, help="N of the multi-step test file")
    horizon: int = setting(ge=1, help="rollout length H")
    max_episodes: int | None = setting(None, ge=1, help="test episodes used (None: all)")


@dataclass(frozen=True)
class SearchConfig:
    """``[search]``: the hyperparameter grid per model and the validation sizes.

    ``grid.<model>.<name>`` lists the values of one hyperparameter (a list of tables sets
    several at once); names and values are checked by :mod:`graphwm.checks`.
    """

    grid: dict[str, dict[str, list]] = setting(default_factory=dict)
    val_sizes: tuple[int, ...] | None = _sizes(default=None)


def _fitted_curve_default(evaluate: EvalConfig, collect: CollectConfig) -> EvalConfig:
    """``evaluate`` with the default ``curve_episodes`` lowered to the test episodes the final
    evaluation uses when there are fewer (the tiny preset has one): a key the user never set
    must not be the one a preset fails on."""
    import dataclasses

    evaluated = min(collect.test_episodes, evaluate.max_episodes or collect.test_episodes)
    if evaluate.curve_episodes <= evaluated:
        return evaluate
    return dataclasses.replace(evaluate, curve_episodes=evaluated)


def _check_curve(train: TrainSection, evaluate: EvalConfig, collect: CollectConfig) -> None:
    """The GDD curve's subset lies inside the final evaluation's episodes (when it is on)."""
    if not train.eval_every:
        return
    evaluated = min(collect.test_episodes, evaluate.max_episodes or collect.test_episodes)
    if evaluate.curve_episodes > evaluated:
        raise PRESET.fail(
            "evaluate.curve_episodes",
            f"must be at most the {evaluated} test episodes the final evaluation uses "
            "(collect.test_episodes, evaluate.max_episodes)",
            evaluate.curve_episodes,
        )


# ---------------------------------------------------------------------------------------------
# [downstream]: RL agents trained in each model's dream env (docs/dream.md; the stage and its
# records: graphwm.downstream)
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


@dataclass(frozen=True)
class Preset:
    """A validated preset. Build with :meth:`parse` (or :func:`load_preset`)."""

    # a short name of ENV_NAMES or a Gymnasium id ("mypkg/MyEnv-v0", "mypkg.envs:mypkg/MyEnv-v0")
    envs: tuple[str, ...] = setting(unique=True)
    models: tuple[str, ...] = setting(unique=True)
    seeds: tuple[int, ...] = setting(ge=0, le=MAX_SEED, unique=True)
    collect: CollectConfig = setting()
    train: TrainSection = setting()
    evaluate: EvalConfig = setting()
    name: str = setting("custom")
    fit: FitConfig = setting(default_factory=FitConfig)
    ablations: tuple[str, ...] = setting((), allow_empty=True, unique=True)
    ablation_envs: tuple[str, ...] | None = setting(None, allow_empty=True)
    #: short labels of envs in tables and figures, ``{env: label}`` (``[env_labels]``); an
    #: env without one is labelled by its name
    env_labels: dict[str, str] = setting(default_factory=dict)
    # the test sizes the ablations are evaluated at (None: every test size of their env)
    ablation_sizes: tuple[int, ...] | None = setting(None, ge=2, unique=True)
    device: str = setting("cpu", help="cpu, cuda, cuda:<index> or mps")
    executor: str = setting("local", choices=EXECUTORS)
    workers: int = setting(0, ge=0, help="local worker processes (0: one per core)")
    multi_step: MultiStepConfig | None = setting(None)
    search: SearchConfig | None = setting(None)
    downstream: DownstreamConfig | None = setting(None)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | Preset) -> Preset:
        """Validate a preset dict (as read from TOML); raise :class:`PresetError` naming a key.

        What needs the envs and the models (model names, overrides and grid entries against
        each model's config, sizes against the envs' limits) is checked on top by
        :func:`graphwm.checks.parse_checked`, which the pipeline's entry points call; whether
        this machine has the device, by :func:`graphwm.checks.check_machine`.
        """
        if isinstance(raw, Preset):
            return raw
        if not isinstance(raw, Mapping):
            raise PRESET.fail("the preset", "must be a table", raw)
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in set(raw) - set(known))
        if unknown:
            raise PresetError(
                f"preset key {unknown[0]!r} is unknown; known keys here: {sorted(known)}"
            )
        plain = dict(raw)
        if not plain.get("multi_step", True):
            plain.pop("multi_step")  # an empty [multi_step] table: no multi-step stage
        values = read_fields(cls, plain, PRESET)
        if not DEVICE_PATTERN.fullmatch(values.get("device", "cpu")):
            raise PRESET.fail("device", "must be 'cpu', 'cuda', 'cuda:<index>' or 'mps'",
                              values["device"])  # fmt: skip
        evaluate = plain.get("evaluate")
        if not (isinstance(evaluate, Mapping) and "curve_episodes" in evaluate):
            # not set: the default (2) where it fits, else every evaluated test episode
            values["evaluate"] = _fitted_curve_default(values["evaluate"], values["collect"])
        _check_curve(values["train"], values["evaluate"], values["collect"])
        return cls(**values)

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

        def clean(value):
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items() if v is not None}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        return clean(asdict(self))


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
        source = (PRESETS_DIR / f"{text}.toml").read_text(encoding="utf-8")
        return tomllib.loads(source)
    path = Path(name_or_path)
    if path.suffix != ".toml" and len(path.parts) <= 1 and not path.exists():
        raise PresetError(f"unknown preset {text!r}: give one of {PRESET_NAMES} or a .toml file")
    if not path.exists():
        raise PresetError(f"preset file {path} does not exist")
    if not path.is_file():
        raise PresetError(f"preset file {path} is not a regular file")
    if path.stat().st_size > MAX_PRESET_BYTES:
        raise PresetError(
            f"preset file {path} is {path.stat().st_size} bytes; a preset is at most "
            f"{MAX_PRESET_BYTES}"
        )
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
                raise PRESET.fail(where, f"must be a table (to set {key!r})", table)
        table[leaf] = value
    return out


def keep_models(raw: Mapping[str, Any], models: Sequence[str]) -> dict:
    """A copy of the preset dict ``raw`` that runs only ``models`` (what ``--models`` selects,
    for a preset handled as a dict): ``models`` set, and the ``train.model_overrides`` tables
    of the base models it no longer runs (neither in ``models`` nor in its ``ablations``)
    removed: a preset holds override tables only for models it runs (``graphwm.checks``
    refuses the others). Values of another type are left for the preset check to word."""
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
