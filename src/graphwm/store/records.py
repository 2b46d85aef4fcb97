"""Result records: what each job writes and what the report reads, through the same types.

Every record is a frozen dataclass with ``to_dict()`` (the stored JSON, format in
docs/reporting.md) and ``from_dict(raw, path)``, which reads it through the field-driven parser
of :mod:`graphwm.store.fields` (a bad value raises
:class:`ResultsFormatError` naming the file and the key). :func:`parse_record` dispatches on
``kind``; :func:`register_record` adds the record type of a new stage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self

from graphwm.store.fields import Where, parse, setting, spec

COMPONENTS = ("node", "graph", "edge", "joint")


class ResultsFormatError(ValueError):
    """A results or training-log file does not follow the results-store format."""


def record_where(path: object) -> Where:
    """How record errors are worded: ``<path>: 'seed' must be an integer, got '0'``; unknown
    keys (the stored job, the key, the digest) are ignored and ``null`` numbers read as NaN."""
    prefix = f"{path}: " if path is not None else "record: "
    return Where(
        ResultsFormatError,
        prefix,
        colon=False,
        unknown_keys="ignore",
        finite=False,
        null_is_nan=True,
        missing_list=True,
    )


def _need_components(raw: Mapping, name: str, where: Where) -> None:
    comps = raw.get(name)
    if isinstance(comps, Mapping):
        for c in COMPONENTS:
            if c not in comps:
                raise where.say(f"{where.prefix}{name!r} lacks component {c!r}")


# ---------------------------------------------------------------------------------------------
# Records: the fields are the format; :mod:`graphwm.store.fields` reads them
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """Base of every record: ``kind`` plus the fields of the subclass."""

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (``None`` fields are left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The keys a stored record of this type must hold."""
        return tuple(
            f.name
            for f in fields(cls)
            if f.name != "kind" and f.default is MISSING and f.default_factory is MISSING
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: Any = None) -> Self:
        """Read a stored record; a bad value raises :class:`ResultsFormatError` naming
        ``path`` and the key."""
        where = record_where(path)
        if not isinstance(raw, Mapping):
            raise where.say(f"{where.prefix}the top level must be an object, got {raw!r}")
        return parse(cls, {"kind": cls.KIND, **raw}, where)

    KIND: ClassVar[str] = ""


@dataclass(frozen=True)
class TrainRecord(Record):
    """A finished training job; ``checkpoint`` is relative to the run directory.

    ``log_digest`` seals the job's ``log.csv`` when the job ends (its SHA-256; absent in
    records of older runs): a log edited afterwards is a corrupt store file, never a silently
    changed figure.
    """

    kind: str
    env: str
    model: str
    seed: int
    steps: int
    checkpoint: str
    checkpoint_digest: str
    resumed_from: int = 0
    last_terms: dict[str, float] = field(default_factory=dict)
    log_digest: str | None = None

    KIND: ClassVar[str] = "train"

    @classmethod
    def _check(cls, obj: TrainRecord, where: Where, key: str) -> None:
        if Path(obj.checkpoint).is_absolute() or ".." in Path(obj.checkpoint).parts:
            raise where.say(f"{where.prefix}'checkpoint' must be relative to the run dir")


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
    gdd_episodes: list[float] | None = setting(None, allow_empty=True)
    # per episode, each reference transition's GDD (absent in records of older runs): the
    # bootstrap of the evaluation-noise band (graphwm.noise)
    gdd_transitions: list[list[float]] | None = setting(None, allow_empty=True)
    components: dict[str, float] | None = None
    num_transitions: int | None = None

    KIND: ClassVar[str] = "self_gdd"

    @classmethod
    def _precheck(cls, raw: Mapping, where: Where, key: str) -> None:
        _need_components(raw, "components", where)


@dataclass(frozen=True)
class FactorMetrics:
    """``factor_metrics`` of a single-step record."""

    adjacency_bce: float
    features: dict[str, float]


@dataclass(frozen=True)
class SingleStepRecord(Record):
    """Single-step GDD of one model, seed and test size (``kind`` ``single_step``, or
    ``validation`` for the search's validation scores).

    ``indistinguishable``: the share of reference transitions where the permutation test
    (``num_permutations`` relabelings, level ``alpha``) does not reject "model samples and
    environment samples come from one distribution" (absent when not computed).
    ``gdd_unbiased``: the unbiased estimator's GDD on the same samples (absent in records of
    older runs).
    """

    # field() itself (not setting()), so type checkers see that kind has no default
    kind: str = field(metadata=spec(choices=("single_step", "validation")))
    env: str
    model: str
    seed: int
    size: int
    gdd: float
    components: dict[str, float]
    factor_metrics: dict[str, Any] = setting(table=FactorMetrics)
    gdd_unbiased: float | None = None
    gdd_episodes: list[float] | None = setting(None, allow_empty=True)
    # per episode, each reference transition's GDD (absent in records of older runs): the
    # bootstrap of the evaluation-noise band (graphwm.noise)
    gdd_transitions: list[list[float]] | None = setting(None, allow_empty=True)
    num_transitions: int | None = None
    indistinguishable: float | None = setting(None, ge=0.0, le=1.0)
    num_permutations: int | None = None
    alpha: float | None = None

    KIND: ClassVar[str] = "single_step"

    @classmethod
    def _precheck(cls, raw: Mapping, where: Where, key: str) -> None:
        _need_components(raw, "components", where)
        fm = raw.get("factor_metrics")
        if isinstance(fm, Mapping) and ("adjacency_bce" not in fm or "features" not in fm):
            raise where.say(
                f"{where.prefix}'factor_metrics' needs keys 'adjacency_bce' and 'features'"
            )


@dataclass(frozen=True)
class MultiStepRecord(Record):
    """GDD and invalid-action rates of 1..H-step rollouts (one entry per horizon);
    ``gdd_unbiased`` the unbiased estimator's GDD (absent in records of older runs)."""

    kind: str
    env: str
    model: str
    seed: int
    size: int
    horizons: list[int] = setting(unique=True)
    gdd: list[float] = setting(allow_empty=True)
    components: dict[str, list[float]] = setting()
    invalid_rate_model: list[float] = setting(allow_empty=True)
    invalid_rate_env: list[float] = setting(allow_empty=True)
    gdd_unbiased: list[float] | None = setting(None, allow_empty=True)

    KIND: ClassVar[str] = "multi_step"

    @classmethod
    def _precheck(cls, raw: Mapping, where: Where, key: str) -> None:
        _need_components(raw, "components", where)

    @classmethod
    def _check(cls, obj: MultiStepRecord, where: Where, key: str) -> None:
        n = len(obj.horizons)
        series = {"gdd": obj.gdd, "invalid_rate_model": obj.invalid_rate_model}
        series["invalid_rate_env"] = obj.invalid_rate_env
        if obj.gdd_unbiased is not None:
            series["gdd_unbiased"] = obj.gdd_unbiased
        series.update({f"components.{c}": obj.components[c] for c in COMPONENTS})
        for name, values in series.items():
            if len(values) != n:
                raise where.say(
                    f"{where.prefix}{name!r} has {len(values)} entries, expected {n} "
                    "(one per horizon)"
                )


@dataclass(frozen=True)
class CurveRecord(Record):
    """Single-step GDD of one checkpoint kept during training (``train.eval_every``), on the
    GDD curve's fixed subset of test episodes: one point of the curve (``kind`` ``curve``);
    ``gdd_unbiased`` as in :class:`SingleStepRecord` (absent in records of older runs)."""

    kind: str
    env: str
    model: str
    seed: int
    size: int
    step: int = field(metadata=spec(ge=1))  # field() itself: no default (as kind above)
    gdd: float
    components: dict[str, float]
    gdd_unbiased: float | None = None
    gdd_episodes: list[float] | None = setting(None, allow_empty=True)
    # per episode, each reference transition's GDD (absent in records of older runs): the
    # bootstrap of the evaluation-noise band (graphwm.noise)
    gdd_transitions: list[list[float]] | None = setting(None, allow_empty=True)
    num_transitions: int | None = None

    KIND: ClassVar[str] = "curve"

    @classmethod
    def _precheck(cls, raw: Mapping, where: Where, key: str) -> None:
        _need_components(raw, "components", where)


RECORD_TYPES: dict[str, type[Record]] = {
    "train": TrainRecord,
    "self_gdd": SelfGddRecord,
    "single_step": SingleStepRecord,
    "validation": SingleStepRecord,
    "multi_step": MultiStepRecord,
    "curve": CurveRecord,
}
# The kinds the report tables read (results/*.json).
RESULT_KINDS = ("single_step", "multi_step", "self_gdd")


def register_record(kind: str, record_type: type[Record]) -> None:
    """Make :func:`parse_record` read ``kind`` as ``record_type`` (for a new stage)."""
    RECORD_TYPES[kind] = record_type


def parse_record(raw: object, path: Path, kinds: tuple[str, ...] | None = None) -> Record:
    """Validate one stored record (dispatching on its ``kind``)."""
    if not isinstance(raw, Mapping):
        raise ResultsFormatError(f"{path}: the top level must be an object, got {raw!r}")
    allowed = tuple(RECORD_TYPES) if kinds is None else kinds
    kind = raw.get("kind")
    if kind not in allowed:
        raise ResultsFormatError(
            f"{path}: unknown or missing 'kind' {kind!r}; expected one of {allowed}"
        )
    return RECORD_TYPES[kind].from_dict(raw, path)


# ---------------------------------------------------------------------------------------------
# Digests: a stored record carries the SHA-256 of its own content
# ---------------------------------------------------------------------------------------------
DIGEST_KEY = "digest"


def record_digest(stored: Mapping[str, Any]) -> str:
    """SHA-256 of a stored record's canonical JSON, its ``digest`` key left out."""
    from graphwm.store.files import canonical_json

    body = {k: v for k, v in stored.items() if k != DIGEST_KEY}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def seal(stored: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` with its digest added (what a store writes)."""
    return {**stored, DIGEST_KEY: record_digest(stored)}


def check_digest(stored: object, path: Path) -> None:
    """Raise :class:`~graphwm.store.files.CorruptFileError` naming ``path`` unless ``stored``
    carries the digest of its content (a record edited by hand, or written without it)."""
    from graphwm.store.files import CorruptFileError

    if not isinstance(stored, Mapping) or not isinstance(stored.get(DIGEST_KEY), str):
        raise CorruptFileError(path, "the record carries no digest of its content")
    if stored[DIGEST_KEY] != record_digest(stored):
        raise CorruptFileError(path, "its content differs from its digest (edited?)")


def read_record(path: Path, kinds: tuple[str, ...] | None = None) -> Record:
    """One stored record file, read through its record type (:func:`parse_record`) with its
    digest checked (:func:`check_digest`); a regular file of bounded size only (a FIFO would
    block the read forever).

    Raises:
        ResultsFormatError: not valid JSON, or not a record of ``kinds`` (the message names
            ``path``).
        CorruptFileError: not a regular file, too large, or edited after it was written.
    """
    from graphwm.store.files import MAX_JSON_BYTES, regular_file

    regular_file(path, MAX_JSON_BYTES)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ResultsFormatError(f"{path}: not valid JSON ({err})") from None
    record = parse_record(raw, path, kinds)
    check_digest(raw, path)
    return record


def read_records_once(
    paths: Iterable[Path],
    kinds: tuple[str, ...],
    view: Callable[[Record], dict],
    identity: Callable[[dict], tuple],
    same: str,
) -> list[dict]:
    """:func:`read_record` of each path, as ``view`` makes it a dict, in the order of
    ``paths``; two files with one ``identity`` (one seed counted twice) raise
    :class:`ResultsFormatError` naming both and ``same`` (what they share, e.g. "env, model,
    seed and step")."""
    records: list[dict] = []
    seen: dict[tuple, Path] = {}
    for path in paths:
        record = view(read_record(path, kinds))
        ident = identity(record)
        if ident in seen:
            raise ResultsFormatError(f"{path}: duplicates {seen[ident]} (same {same} {ident})")
        seen[ident] = path
        records.append(record)
    return records
