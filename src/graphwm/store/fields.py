"""The field-driven reader of stored records (:mod:`graphwm.store.records`).

A record is a dataclass whose fields say everything about it: the type hint gives the type
(``int``, ``float``, ``bool``, ``str``, ``tuple[int, ...]``, ``list[float]``,
``dict[str, float]``, ``X | None``, a nested dataclass, ``Any``), the default gives the
default (a field without one is required), and :func:`spec` metadata gives ranges, choices and
help. :func:`parse` reads a raw mapping (JSON) into the dataclass and reports the first bad
value through a :class:`Where` that words the error, e.g.
``RUN_DIR/results/x.json: 'seed' must be an integer, got '0'``. (Presets are read by pydantic:
:mod:`graphwm.config`.)
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = [
    "Where",
    "defaults",
    "parse",
    "read_fields",
    "read_value",
    "setting",
    "spec",
    "type_hints",
]


def spec(
    *,
    ge: int | float | None = None,
    le: int | float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    choices: tuple | list | None = None,
    unique: bool = False,
    allow_empty: bool = False,
    table: type | None = None,
    help: str = "",
) -> dict[str, Any]:
    """Field metadata read by :func:`parse`.

    Args:
        ge, le: closed bounds of an int (or of every int of a list).
        gt, lt: open bounds of a float (message ``must lie in (gt, lt)``).
        choices: the allowed values of a string.
        unique: a list must not repeat a value.
        allow_empty: a list may be empty (else it must have an entry).
        table: a ``dict`` field whose entries are read through this dataclass (its keys
            checked, its values typed) and kept as a plain dict of the given keys.
        help: what the key means (shown by nothing yet but the source; keeps docs close).
    """
    return {
        "ge": ge,
        "le": le,
        "gt": gt,
        "lt": lt,
        "choices": None if choices is None else tuple(choices),
        "unique": unique,
        "allow_empty": allow_empty,
        "table": table,
        "help": help,
    }


def setting(default: Any = MISSING, *, default_factory: Any = MISSING, **kw: Any) -> Any:
    """A dataclass field with :func:`spec` metadata (``compare``/``repr`` stay default)."""
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=spec(**kw))
    return field(default=default, metadata=spec(**kw))


def defaults(cls: type) -> dict[str, Any]:
    """``{field: default}`` of a config dataclass (fields with a default only)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif callable(f.default_factory):  # MISSING is not callable
            out[f.name] = f.default_factory()
    return out


@dataclass(frozen=True)
class Where:
    """How errors are worded and what a reader accepts.

    Attributes:
        error: the exception class raised.
        prefix: text before a location (``"preset key "`` or ``"<path>: "``).
        colon: a colon after the location (``preset key 'a.b': must ...``).
        unknown_keys: ``"refuse"`` or ``"ignore"`` keys no field names.
        finite: floats must be finite (presets); else NaN/inf pass (records store NaN).
        null_is_nan: a JSON ``null`` for a required float reads as NaN (records).
        missing_list: a missing required key is said as ``lacks required key(s) [...]``
            (records) instead of ``<key> is missing`` (presets).
        max_int: the upper bound of every integer whose field sets no ``le`` of its own
            (presets: what every array index, count and C ``long`` of the run can hold).
    """

    error: type[Exception]
    prefix: str
    colon: bool = True
    unknown_keys: str = "refuse"
    finite: bool = True
    null_is_nan: bool = False
    missing_list: bool = False
    max_int: int | None = None

    def loc(self, key: str) -> str:
        return f"{self.prefix}{key!r}"

    def fail(self, key: str, what: str, value: Any) -> Exception:
        sep = ": " if self.colon else " "
        return self.error(f"{self.loc(key)}{sep}{what}, got {_short(value)}")

    def say(self, message: str) -> Exception:
        return self.error(message)


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "a value nested too deeply to show"
    return text if len(text) <= 200 else text[:200] + "..."


_HINTS: dict[type, dict[str, Any]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass (cached)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def parse(cls: type[T], raw: Any, where: Where, key: str = "") -> T:
    """Read ``raw`` (a mapping) into the dataclass ``cls``; the first bad value raises
    ``where.error`` naming ``key.<field>``.

    Before the fields are read, a classmethod ``_precheck(raw, where, key)`` of ``cls`` (if
    any) checks the raw table's shape; after, ``_check(obj, where, key)`` checks relations
    between fields.
    """
    precheck = getattr(cls, "_precheck", None)
    if precheck is not None and isinstance(raw, Mapping):
        precheck(raw, where, key)
    obj = cls(**read_fields(cls, raw, where, key))
    check = getattr(cls, "_check", None)
    if check is not None:
        check(obj, where, key)
    return obj


def read_fields(cls: type, raw: Any, where: Where, key: str = "") -> dict[str, Any]:
    """The typed keyword arguments of ``cls`` from ``raw`` (see :func:`parse`)."""
    if not isinstance(raw, Mapping):
        raise where.fail(key or "the top level", "must be a table", raw)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    if where.unknown_keys == "refuse":
        unknown = sorted(str(k) for k in set(raw) - set(names))
        if unknown:
            raise where.say(
                f"{where.loc(_join(key, unknown[0]))} is unknown; known keys here: {sorted(names)}"
            )
    hints = type_hints(cls)
    missing = [
        _join(key, f.name)
        for f in fields
        if f.name not in raw and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        if where.missing_list:
            raise where.say(f"{where.prefix}lacks required key(s) {missing}")
        raise where.say(f"{where.loc(missing[0])} is missing")
    out: dict[str, Any] = {}
    for f in fields:
        name = _join(key, f.name)
        if f.name not in raw:
            continue
        out[f.name] = read_value(hints[f.name], raw[f.name], where, name, f.metadata)
    return out


def _optional(hint: Any) -> tuple[bool, Any]:
    """``(True, X)`` for ``X | None``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)) and len(args) == 1:
            return True, args[0]
    return False, hint


def read_value(hint: Any, value: Any, where: Where, key: str, meta: Mapping = {}) -> Any:  # noqa: B006
    """One value of type ``hint`` (see :func:`parse`)."""
    optional, hint = _optional(hint)
    if value is None and optional:
        return None
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return parse(hint, value, where, key)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise where.fail(key, "must be true or false", value)
        return value
    if hint is int:
        return _int(value, where, key, meta)
    if hint is float:
        return _float(value, where, key, meta)
    if hint is str:
        return _str(value, where, key, meta)
    if origin in (tuple, list) or hint in (tuple, list):
        return _sequence(hint, origin or hint, value, where, key, meta)
    if origin in (dict, Mapping) or hint is dict:
        return _mapping(hint, value, where, key, meta)
    raise TypeError(f"schema: no reader for type {hint!r} (key {key!r})")


def _int(value: Any, where: Where, key: str, meta: Mapping) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(key, "must be an integer", value)
    ge, le = meta.get("ge"), meta.get("le")
    if ge is not None and value < ge:
        what = f"must be an integer >= {ge}" + (f" and <= {le}" if le is not None else "")
        raise where.fail(key, what, value)
    if le is None:  # the table's bound: said only when it is what the value breaks
        le = where.max_int
    if le is not None and value > le:
        what = f"must be an integer >= {ge} and" if ge is not None else "must be an integer"
        raise where.fail(key, f"{what} <= {le}", value)
    return value


def _float(value: Any, where: Where, key: str, meta: Mapping) -> float:
    if value is None and where.null_is_nan:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.fail(key, "must be a number", value)
    value = float(value)
    if where.finite and not math.isfinite(value):
        raise where.fail(key, "must be a finite number", value)
    gt, lt, ge, le = meta.get("gt"), meta.get("lt"), meta.get("ge"), meta.get("le")
    if math.isnan(value) or all(b is None for b in (gt, lt, ge, le)):
        return value
    low_ok = (gt is None or value > gt) and (ge is None or value >= ge)
    high_ok = (lt is None or value < lt) and (le is None or value <= le)
    if not (low_ok and high_ok):
        low = f"({gt}" if gt is not None else (f"[{ge}" if ge is not None else "(-inf")
        high = f"{lt})" if lt is not None else (f"{le}]" if le is not None else "inf)")
        raise where.fail(key, f"must lie in {low}, {high}", value)
    return value


def _str(value: Any, where: Where, key: str, meta: Mapping) -> str:
    if not isinstance(value, str) or not value:
        raise where.fail(key, "must be a non-empty string", value)
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise where.fail(key, f"must be one of {list(choices)}", value)
    return value


def _sequence(hint: Any, origin: Any, value: Any, where: Where, key: str, meta: Mapping) -> Any:
    if not isinstance(value, list | tuple):
        raise where.fail(key, "must be a list", value)
    if not value and not meta.get("allow_empty"):
        raise where.fail(key, "must be a non-empty list", value)
    args = typing.get_args(hint)
    item = args[0] if args else Any
    items = [read_value(item, v, where, f"{key}[{i}]", meta) for i, v in enumerate(value)]
    if meta.get("unique") and len(set(map(repr, items))) != len(items):
        raise where.fail(key, "must not repeat a value", value)
    return tuple(items) if origin is tuple else items


def _mapping(hint: Any, value: Any, where: Where, key: str, meta: Mapping) -> dict:
    if not isinstance(value, Mapping):
        raise where.fail(key, "must be a table", value)
    table = meta.get("table")
    if table is not None:
        return read_fields(table, value, where, key)
    args = typing.get_args(hint)
    item = args[1] if len(args) == 2 else Any
    return {str(k): read_value(item, v, where, _join(key, str(k))) for k, v in value.items()}
