"""Typed, validated presets: every default of the pipeline lives here.

A preset (TOML file or dict) is parsed by :meth:`Preset.parse` into frozen dataclasses before
any work starts; a bad value raises :class:`PresetError` naming the preset key, e.g.
``preset key 'collect.train_episodes': must be an integer >= 1, got 0``. Unknown keys are
refused too (a typo would otherwise be silently ignored).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

PRESET_NAMES = ("smoke", "medium", "paper", "tiny")
ENV_NAMES = ("RGC", "OD", "SAR", "CF")
EXECUTORS = ("local", "ray")
PRECISIONS = ("fp32", "bf16")

# The defaults of optional preset keys (the single place they are written down).
DEFAULT_DEVICE = "cpu"
DEFAULT_EXECUTOR = "local"
DEFAULT_WORKERS = 0  # 0: one local worker per core
DEFAULT_RGC_MAX_TEST_SIZE = 200  # RGC episodes are quadratic in N (docs/reproducing.md)
DEFAULT_TRANSITIONS_PER_EPISODE = 8  # paper appendix "Bandwidth Fitting"
DEFAULT_FIT_SEED = 0
DEFAULT_CHECKPOINT_EVERY = 1000
DEFAULT_PRECISION = "fp32"
DEFAULT_LOG_EVERY = 1
DEFAULT_PERMUTATIONS = 0  # 0: no indistinguishability column
DEFAULT_ALPHA = 0.05
TRAINER_KEYS = ("lr", "batch_size", "seq_len")  # train_overrides / search keys of the trainer


class PresetError(ValueError):
    """A preset value is missing, of the wrong type or out of range (the key is named)."""


# ---------------------------------------------------------------------------------------------
# Small typed readers; each names the preset key in its error
# ---------------------------------------------------------------------------------------------
def _fail(key: str, what: str, value: Any) -> PresetError:
    return PresetError(f"preset key {key!r}: {what}, got {value!r}")


def _int(value: Any, key: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, "must be an integer", value)
    if minimum is not None and value < minimum:
        raise _fail(key, f"must be an integer >= {minimum}", value)
    return value


def _float(value: Any, key: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(key, "must be a number", value)
    if (low is not None and value <= low) or (high is not None and value >= high):
        raise _fail(key, f"must lie in ({low}, {high})", value)
    return float(value)


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, "must be true or false", value)
    return value


def _str(value: Any, key: str, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(key, "must be a non-empty string", value)
    if choices is not None and value not in choices:
        raise _fail(key, f"must be one of {list(choices)}", value)
    return value


def _list(value: Any, key: str, allow_empty: bool = False) -> list:
    if not isinstance(value, list | tuple):
        raise _fail(key, "must be a list", value)
    if not value and not allow_empty:
        raise _fail(key, "must be a non-empty list", value)
    return list(value)


def _ints(value: Any, key: str, minimum: int, unique: bool = True) -> tuple[int, ...]:
    items = [_int(v, f"{key}[{i}]", minimum) for i, v in enumerate(_list(value, key))]
    if unique and len(set(items)) != len(items):
        raise _fail(key, "must not repeat a value", value)
    return tuple(items)


def _table(value: Any, key: str) -> dict:
    if not isinstance(value, Mapping):
        raise _fail(key, "must be a table", value)
    return dict(value)


def _no_unknown(table: Mapping, key: str, known: Sequence[str]) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        where = f"{key}.{unknown[0]}" if key else unknown[0]
        raise PresetError(f"preset key {where!r} is unknown; known keys here: {sorted(known)}")


def _required(table: Mapping, key: str, name: str) -> Any:
    if name not in table:
        raise PresetError(f"preset key {(key + '.' if key else '') + name!r} is missing")
    return table[name]


# ---------------------------------------------------------------------------------------------
# The typed preset
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectConfig:
    """Stage 1: sizes and episode counts per split (``[collect]``)."""

    train_sizes: tuple[int, ...]
    train_episodes: int
    val_sizes: tuple[int, ...]
    val_episodes: int
    test_sizes: tuple[int, ...]
    test_episodes: int
    rgc_max_test_size: int = DEFAULT_RGC_MAX_TEST_SIZE

    @classmethod
    def parse(cls, raw: Any, key: str = "collect") -> CollectConfig:
        t = _table(raw, key)
        _no_unknown(t, key, [f.name for f in cls.__dataclass_fields__.values()])
        k = key + "."
        return cls(
            train_sizes=_ints(_required(t, key, "train_sizes"), k + "train_sizes", 2),
            train_episodes=_int(_required(t, key, "train_episodes"), k + "train_episodes", 1),
            val_sizes=_ints(_required(t, key, "val_sizes"), k + "val_sizes", 2),
            val_episodes=_int(_required(t, key, "val_episodes"), k + "val_episodes", 1),
            test_sizes=_ints(_required(t, key, "test_sizes"), k + "test_sizes", 2),
            test_episodes=_int(_required(t, key, "test_episodes"), k + "test_episodes", 1),
            rgc_max_test_size=_int(
                t.get("rgc_max_test_size", DEFAULT_RGC_MAX_TEST_SIZE), k + "rgc_max_test_size", 2
            ),
        )


@dataclass(frozen=True)
class FitConfig:
    """Stage 2: bandwidth fitting (``[fit]``)."""

    transitions_per_episode: int = DEFAULT_TRANSITIONS_PER_EPISODE
    seed: int = DEFAULT_FIT_SEED

    @classmethod
    def parse(cls, raw: Any, key: str = "fit") -> FitConfig:
        t = _table(raw, key)
        _no_unknown(t, key, ["transitions_per_episode", "seed"])
        return cls(
            transitions_per_episode=_int(
                t.get("transitions_per_episode", DEFAULT_TRANSITIONS_PER_EPISODE),
                key + ".transitions_per_episode",
                1,
            ),
            seed=_int(t.get("seed", DEFAULT_FIT_SEED), key + ".seed", 0),
        )


@dataclass(frozen=True)
class TrainConfig:
    """Stage 3: training length, overrides and trainer options (``[train]``).

    Exactly one of ``steps`` and ``epochs``. ``model_overrides`` maps a base model name
    (``gdm``, ``vanilla-gwm``, ...) to model hyperparameters; ``train_overrides`` sets
    ``lr``/``batch_size``/``seq_len`` for every model (else the paper's per-model preset).
    """

    steps: int | None = None
    epochs: int | None = None
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    model_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    precision: str = DEFAULT_PRECISION
    compile: bool = False
    log_every: int = DEFAULT_LOG_EVERY

    @classmethod
    def parse(cls, raw: Any, key: str = "train") -> TrainConfig:
        t = _table(raw, key)
        _no_unknown(t, key, [f for f in cls.__dataclass_fields__])
        k = key + "."
        if ("steps" in t) == ("epochs" in t):
            raise PresetError(f"preset key {key!r}: give exactly one of 'steps' and 'epochs'")
        overrides = _table(t.get("model_overrides", {}), k + "model_overrides")
        model_overrides = {
            str(m): _table(v, f"{k}model_overrides.{m}") for m, v in overrides.items()
        }
        train_overrides = _table(t.get("train_overrides", {}), k + "train_overrides")
        _no_unknown(train_overrides, k + "train_overrides", TRAINER_KEYS)
        if "lr" in train_overrides:
            _float(train_overrides["lr"], k + "train_overrides.lr", 0.0)
        for name in ("batch_size", "seq_len"):
            if name in train_overrides:
                _int(train_overrides[name], f"{k}train_overrides.{name}", 1)
        return cls(
            steps=_int(t["steps"], k + "steps", 1) if "steps" in t else None,
            epochs=_int(t["epochs"], k + "epochs", 1) if "epochs" in t else None,
            checkpoint_every=_int(
                t.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY), k + "checkpoint_every", 1
            ),
            model_overrides=model_overrides,
            train_overrides=train_overrides,
            precision=_str(t.get("precision", DEFAULT_PRECISION), k + "precision", PRECISIONS),
            compile=_bool(t.get("compile", False), k + "compile"),
            log_every=_int(t.get("log_every", DEFAULT_LOG_EVERY), k + "log_every", 1),
        )


@dataclass(frozen=True)
class EvalConfig:
    """Stages 4-7: the evaluation protocol (``[evaluate]`` and ``[multi_step]``).

    ``num_samples`` is kappa (>= 2: the unbiased self-GDD and the permutation test need two
    samples per set). ``permutations`` > 0 adds the permutation-test column (single-step).
    """

    num_samples: int
    reference_transitions: int
    max_episodes: int | None = None
    permutations: int = DEFAULT_PERMUTATIONS
    alpha: float = DEFAULT_ALPHA
    size: int | None = None  # multi-step only
    horizon: int | None = None  # multi-step only

    @classmethod
    def parse(cls, raw: Any, key: str, multi_step: bool = False) -> EvalConfig:
        t = _table(raw, key)
        known = ["num_samples", "reference_transitions", "max_episodes"]
        known += ["size", "horizon"] if multi_step else ["permutations", "alpha"]
        _no_unknown(t, key, known)
        k = key + "."
        max_episodes = t.get("max_episodes")
        return cls(
            num_samples=_int(_required(t, key, "num_samples"), k + "num_samples", 2),
            reference_transitions=_int(
                _required(t, key, "reference_transitions"), k + "reference_transitions", 1
            ),
            max_episodes=None
            if max_episodes is None
            else _int(max_episodes, k + "max_episodes", 1),
            permutations=_int(t.get("permutations", DEFAULT_PERMUTATIONS), k + "permutations", 0),
            alpha=_float(t.get("alpha", DEFAULT_ALPHA), k + "alpha", 0.0, 1.0),
            size=_int(_required(t, key, "size"), k + "size", 2) if multi_step else None,
            horizon=_int(_required(t, key, "horizon"), k + "horizon", 1) if multi_step else None,
        )


@dataclass(frozen=True)
class SearchConfig:
    """``[search]``: the hyperparameter grid per model and the validation sizes."""

    grid: dict[str, dict[str, list]] = field(default_factory=dict)
    val_sizes: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, raw: Any, key: str = "search") -> SearchConfig:
        t = _table(raw, key)
        _no_unknown(t, key, ["grid", "val_sizes"])
        grid = {}
        for model, table in _table(t.get("grid", {}), key + ".grid").items():
            entries = _table(table, f"{key}.grid.{model}")
            grid[str(model)] = {
                name: _list(values, f"{key}.grid.{model}.{name}")
                for name, values in entries.items()
            }
        val_sizes = t.get("val_sizes")
        return cls(
            grid=grid,
            val_sizes=None if val_sizes is None else _ints(val_sizes, key + ".val_sizes", 2),
        )


# Optional preset sections owned by other modules: name -> "module:Class", where the class has
# ``parse(raw, key)`` (raising PresetError) like the configs above. Parsed sections land in
# ``Preset.sections[name]``; a stage of that module reads them from there.
SECTIONS: dict[str, str] = {"downstream": "graphwm.downstream.config:DownstreamConfig"}


def _parse_section(name: str, raw: Any) -> Any:
    import importlib

    module, cls = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), cls).parse(raw, name)


_TOP_KEYS = (
    "name",
    "envs",
    "models",
    "ablations",
    "ablation_envs",
    "seeds",
    "device",
    "executor",
    "workers",
    "collect",
    "fit",
    "train",
    "evaluate",
    "multi_step",
    "search",
)


@dataclass(frozen=True)
class Preset:
    """A validated preset. Build with :meth:`parse` (or :func:`load_preset`)."""

    name: str
    envs: tuple[str, ...]
    models: tuple[str, ...]
    seeds: tuple[int, ...]
    collect: CollectConfig
    train: TrainConfig
    evaluate: EvalConfig
    fit: FitConfig = FitConfig()
    ablations: tuple[str, ...] = ()
    ablation_envs: tuple[str, ...] | None = None  # None: every env
    device: str = DEFAULT_DEVICE
    executor: str = DEFAULT_EXECUTOR
    workers: int = DEFAULT_WORKERS
    multi_step: EvalConfig | None = None
    search: SearchConfig | None = None
    sections: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | Preset) -> Preset:
        """Validate a preset dict (as read from TOML); raise :class:`PresetError` naming a key."""
        if isinstance(raw, Preset):
            return raw
        t = _table(raw, "the preset")
        _no_unknown(t, "", _TOP_KEYS + tuple(SECTIONS))
        envs = tuple(
            _str(e, f"envs[{i}]", ENV_NAMES) for i, e in enumerate(_list(t.get("envs"), "envs"))
        )
        models = tuple(
            _str(m, f"models[{i}]") for i, m in enumerate(_list(t.get("models"), "models"))
        )
        ablations = tuple(
            _str(a, f"ablations[{i}]")
            for i, a in enumerate(_list(t.get("ablations", []), "ablations", allow_empty=True))
        )
        ablation_envs = None
        if "ablation_envs" in t:
            ablation_envs = tuple(
                _str(e, f"ablation_envs[{i}]", ENV_NAMES)
                for i, e in enumerate(_list(t["ablation_envs"], "ablation_envs", True))
            )
        seeds = _ints(_required(t, "", "seeds"), "seeds", 0)
        preset = cls(
            name=_str(t.get("name", "custom"), "name"),
            envs=envs,
            models=models,
            seeds=seeds,
            collect=CollectConfig.parse(_required(t, "", "collect")),
            train=TrainConfig.parse(_required(t, "", "train")),
            evaluate=EvalConfig.parse(_required(t, "", "evaluate"), "evaluate"),
            fit=FitConfig.parse(t.get("fit", {})),
            ablations=ablations,
            ablation_envs=ablation_envs,
            device=_str(t.get("device", DEFAULT_DEVICE), "device"),
            executor=_str(t.get("executor", DEFAULT_EXECUTOR), "executor", EXECUTORS),
            workers=_int(t.get("workers", DEFAULT_WORKERS), "workers", 0),
            multi_step=(
                EvalConfig.parse(t["multi_step"], "multi_step", multi_step=True)
                if t.get("multi_step")
                else None
            ),
            search=SearchConfig.parse(t["search"]) if "search" in t else None,
            sections={name: _parse_section(name, t[name]) for name in SECTIONS if name in t},
        )
        preset._check_models()
        return preset

    def _check_models(self) -> None:
        """Every model name must have a paper preset for every env it is trained on."""
        from gdm_models import get_preset

        for key, names in (("models", self.models), ("ablations", self.ablations)):
            for i, name in enumerate(names):
                for env in self.envs:
                    try:
                        get_preset(name, env)
                    except (KeyError, ValueError) as err:
                        msg = err.args[0] if err.args else err
                        raise PresetError(f"preset key '{key}[{i}]' ({name!r}): {msg}") from None

    # -- derived views -----------------------------------------------------------------------
    def test_sizes(self, env: str) -> tuple[int, ...]:
        """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
        sizes = self.collect.test_sizes
        if env == "RGC":
            sizes = tuple(n for n in sizes if n <= self.collect.rgc_max_test_size)
        return sizes

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

        out = clean(asdict(self))
        out.pop("sections")
        for name, section in self.sections.items():
            out[name] = section.to_dict() if hasattr(section, "to_dict") else asdict(section)
        if self.train.steps is None:
            out["train"].pop("steps", None)
        if self.multi_step is not None:
            out["multi_step"] = {
                k: v for k, v in out["multi_step"].items() if k not in ("permutations", "alpha")
            }
        if self.ablation_envs is None:
            out.pop("ablation_envs", None)
        for k in ("size", "horizon"):
            out["evaluate"].pop(k, None)
        return out


def read_preset(name_or_path: str | Path) -> dict[str, Any]:
    """The raw dict of a named preset (``smoke``, ``paper``, ``tiny``) or a TOML file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.exists():
        try:
            return tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise PresetError(f"preset file {path} is not valid TOML: {err}") from None
    if str(name_or_path) in PRESET_NAMES:
        text = resources.files("graphwm.presets").joinpath(f"{name_or_path}.toml").read_text()
        return tomllib.loads(text)
    raise PresetError(
        f"unknown preset {str(name_or_path)!r}: give one of {PRESET_NAMES} or a .toml file"
    )


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict:
    """A deep copy of ``raw`` with overrides; ``"a.b"`` keys set nested tables, None skips."""
    out = copy.deepcopy(dict(raw))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = key.split(".")
        table = out
        for p in parents:
            table = table.setdefault(p, {})
        table[leaf] = value
    return out
