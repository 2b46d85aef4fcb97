"""Result records: what each job writes and what the report reads, through the same types.

Every record is a frozen dataclass with ``to_dict()`` (the stored JSON, format in
docs/reporting.md) and ``from_dict(raw, path)`` (validation; a bad value raises
:class:`ResultsFormatError` naming the file and the key). :func:`parse_record` dispatches on
``kind``; :func:`register_record` adds the record type of a new stage.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

COMPONENTS = ("node", "graph", "edge", "joint")


class ResultsFormatError(ValueError):
    """A results or training-log file does not follow the results-store format."""


# ---------------------------------------------------------------------------------------------
# Typed readers (each names the file and the key)
# ---------------------------------------------------------------------------------------------
def number(value: object, where: str, path: Path) -> float:
    """A JSON number as float; ``null`` reads as NaN (so it shows as ``nan``, not a crash)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ResultsFormatError(f"{path}: {where} must be a number, got {value!r}")
    return float(value)


def integer(value: object, where: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsFormatError(f"{path}: {where} must be an integer, got {value!r}")
    return value


def string(value: object, where: str, path: Path) -> str:
    if not isinstance(value, str) or not value:
        raise ResultsFormatError(f"{path}: {where} must be a non-empty string, got {value!r}")
    return value


def mapping(value: object, where: str, path: Path) -> dict:
    if not isinstance(value, dict):
        raise ResultsFormatError(f"{path}: {where} must be an object, got {value!r}")
    return value


def numbers(value: object, where: str, path: Path, length: int | None = None) -> list[float]:
    if not isinstance(value, list):
        raise ResultsFormatError(f"{path}: {where} must be a list, got {value!r}")
    if length is not None and len(value) != length:
        raise ResultsFormatError(
            f"{path}: {where} has {len(value)} entries, expected {length} (one per horizon)"
        )
    return [number(v, f"{where}[{i}]", path) for i, v in enumerate(value)]


def components(value: object, where: str, path: Path, length: int | None) -> dict:
    comps = mapping(value, where, path)
    out = {}
    for c in COMPONENTS:
        if c not in comps:
            raise ResultsFormatError(f"{path}: {where} lacks component {c!r}")
        sub = f"{where}.{c}"
        out[c] = (
            number(comps[c], sub, path) if length is None else numbers(comps[c], sub, path, length)
        )
    return out


def _optional(raw: dict, key: str, read, path: Path, *args):
    return None if raw.get(key) is None else read(raw[key], f"'{key}'", path, *args)


def _require(raw: dict, kind: str, keys: tuple[str, ...], path: Path) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise ResultsFormatError(f"{path}: kind {kind!r} lacks required key(s) {missing}")


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """Base of every record: ``kind`` plus the fields of the subclass."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (``None`` fields are left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> Record:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class TrainRecord(Record):
    """A finished training job; ``checkpoint`` is relative to the run directory."""

    kind: str
    env: str
    model: str
    seed: int
    steps: int
    resumed_from: int
    checkpoint: str
    checkpoint_digest: str
    last_terms: dict[str, float] = field(default_factory=dict)

    REQUIRED: ClassVar = ("env", "model", "seed", "steps", "checkpoint", "checkpoint_digest")

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> TrainRecord:
        _require(raw, "train", cls.REQUIRED, path)
        checkpoint = string(raw["checkpoint"], "'checkpoint'", path)
        if Path(checkpoint).is_absolute():
            raise ResultsFormatError(f"{path}: 'checkpoint' must be relative to the run dir")
        return cls(
            kind="train",
            env=string(raw["env"], "'env'", path),
            model=string(raw["model"], "'model'", path),
            seed=integer(raw["seed"], "'seed'", path),
            steps=integer(raw["steps"], "'steps'", path),
            resumed_from=integer(raw.get("resumed_from", 0), "'resumed_from'", path),
            checkpoint=checkpoint,
            checkpoint_digest=string(raw["checkpoint_digest"], "'checkpoint_digest'", path),
            last_terms={
                str(k): number(v, f"'last_terms.{k}'", path)
                for k, v in mapping(raw.get("last_terms", {}), "'last_terms'", path).items()
            },
        )


@dataclass(frozen=True)
class SelfGddRecord(Record):
    """GDD of the environment against itself (paper's sanity table).

    ``gdd`` uses the biased estimator (the paper's definition); ``gdd_unbiased`` the unbiased
    U-statistic on the same samples (absent in records of older runs).
    """

    kind: str
    env: str
    seed: int
    size: int
    gdd: float
    gdd_unbiased: float | None = None
    gdd_episodes: list[float] | None = None
    components: dict[str, float] | None = None
    num_transitions: int | None = None

    REQUIRED: ClassVar = ("env", "size", "seed", "gdd")

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> SelfGddRecord:
        _require(raw, "self_gdd", cls.REQUIRED, path)
        return cls(
            kind="self_gdd",
            env=string(raw["env"], "'env'", path),
            seed=integer(raw["seed"], "'seed'", path),
            size=integer(raw["size"], "'size'", path),
            gdd=number(raw["gdd"], "'gdd'", path),
            gdd_unbiased=_optional(raw, "gdd_unbiased", number, path),
            gdd_episodes=_optional(raw, "gdd_episodes", numbers, path),
            components=_optional(raw, "components", components, path, None),
            num_transitions=_optional(raw, "num_transitions", integer, path),
        )


@dataclass(frozen=True)
class SingleStepRecord(Record):
    """Single-step GDD of one model, seed and test size (``kind`` ``single_step``, or
    ``validation`` for the search's validation scores).

    ``indistinguishable``: the share of reference transitions where the permutation test
    (``num_permutations`` relabelings, level ``alpha``) does not reject "model samples and
    environment samples come from one distribution" (absent when not computed).
    """

    kind: str
    env: str
    model: str
    seed: int
    size: int
    gdd: float
    components: dict[str, float]
    factor_metrics: dict[str, Any]
    gdd_episodes: list[float] | None = None
    num_transitions: int | None = None
    indistinguishable: float | None = None
    num_permutations: int | None = None
    alpha: float | None = None

    REQUIRED: ClassVar = ("env", "model", "seed", "size", "gdd", "components", "factor_metrics")

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> SingleStepRecord:
        kind = raw["kind"]
        _require(raw, kind, cls.REQUIRED, path)
        fm = mapping(raw["factor_metrics"], "'factor_metrics'", path)
        if "adjacency_bce" not in fm or "features" not in fm:
            raise ResultsFormatError(
                f"{path}: 'factor_metrics' needs keys 'adjacency_bce' and 'features'"
            )
        features = mapping(fm["features"], "'factor_metrics.features'", path)
        share = _optional(raw, "indistinguishable", number, path)
        if share is not None and not (0.0 <= share <= 1.0 or math.isnan(share)):
            raise ResultsFormatError(f"{path}: 'indistinguishable' must lie in [0, 1]")
        return cls(
            kind=kind,
            env=string(raw["env"], "'env'", path),
            model=string(raw["model"], "'model'", path),
            seed=integer(raw["seed"], "'seed'", path),
            size=integer(raw["size"], "'size'", path),
            gdd=number(raw["gdd"], "'gdd'", path),
            components=components(raw["components"], "'components'", path, None),
            factor_metrics={
                "adjacency_bce": number(
                    fm["adjacency_bce"], "'factor_metrics.adjacency_bce'", path
                ),
                "features": {
                    str(k): number(v, f"'factor_metrics.features.{k}'", path)
                    for k, v in features.items()
                },
            },
            gdd_episodes=_optional(raw, "gdd_episodes", numbers, path),
            num_transitions=_optional(raw, "num_transitions", integer, path),
            indistinguishable=share,
            num_permutations=_optional(raw, "num_permutations", integer, path),
            alpha=_optional(raw, "alpha", number, path),
        )


@dataclass(frozen=True)
class MultiStepRecord(Record):
    """GDD and invalid-action rates of 1..H-step rollouts (one entry per horizon)."""

    kind: str
    env: str
    model: str
    seed: int
    size: int
    horizons: list[int]
    gdd: list[float]
    components: dict[str, list[float]]
    invalid_rate_model: list[float]
    invalid_rate_env: list[float]

    REQUIRED: ClassVar = (
        "env",
        "model",
        "seed",
        "size",
        "horizons",
        "gdd",
        "components",
        "invalid_rate_model",
        "invalid_rate_env",
    )

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> MultiStepRecord:
        _require(raw, "multi_step", cls.REQUIRED, path)
        if not isinstance(raw["horizons"], list) or not raw["horizons"]:
            raise ResultsFormatError(f"{path}: 'horizons' must be a non-empty list of integers")
        horizons = [integer(h, f"'horizons[{i}]'", path) for i, h in enumerate(raw["horizons"])]
        if len(set(horizons)) != len(horizons):
            raise ResultsFormatError(f"{path}: 'horizons' has duplicates: {horizons}")
        n = len(horizons)
        return cls(
            kind="multi_step",
            env=string(raw["env"], "'env'", path),
            model=string(raw["model"], "'model'", path),
            seed=integer(raw["seed"], "'seed'", path),
            size=integer(raw["size"], "'size'", path),
            horizons=horizons,
            gdd=numbers(raw["gdd"], "'gdd'", path, n),
            components=components(raw["components"], "'components'", path, n),
            invalid_rate_model=numbers(raw["invalid_rate_model"], "'invalid_rate_model'", path, n),
            invalid_rate_env=numbers(raw["invalid_rate_env"], "'invalid_rate_env'", path, n),
        )


RECORD_TYPES: dict[str, type[Record]] = {
    "train": TrainRecord,
    "self_gdd": SelfGddRecord,
    "single_step": SingleStepRecord,
    "validation": SingleStepRecord,
    "multi_step": MultiStepRecord,
}
# The kinds the report tables read (results/*.json).
RESULT_KINDS = ("single_step", "multi_step", "self_gdd")


def register_record(kind: str, record_type: type[Record]) -> None:
    """Make :func:`parse_record` read ``kind`` as ``record_type`` (for a new stage)."""
    RECORD_TYPES[kind] = record_type


def parse_record(raw: object, path: Path, kinds: tuple[str, ...] | None = None) -> Record:
    """Validate one stored record (dispatching on its ``kind``)."""
    raw = mapping(raw, "the top level", path)
    allowed = tuple(RECORD_TYPES) if kinds is None else kinds
    kind = raw.get("kind")
    if kind not in allowed:
        raise ResultsFormatError(
            f"{path}: unknown or missing 'kind' {kind!r}; expected one of {allowed}"
        )
    return RECORD_TYPES[kind].from_dict(raw, path)
