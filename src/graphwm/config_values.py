"""The values of a preset table (the sections: :mod:`graphwm.config`): pydantic checks types
and structure, a :class:`Rule` says what is allowed in the project's words, :func:`preset_error`
turns pydantic's first error into a :class:`PresetError` naming key, value and what is allowed."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Self

from annotated_types import GroupedMetadata, Interval, MinLen
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    Strict,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

MAX_INT = 2**31 - 1
#: the largest seed: every generator of a run accepts it (numpy's legacy RandomState and
#: gymnasium's seeding stop at 2**32 - 1, torch.manual_seed at 2**64 - 1)
MAX_SEED = 2**32 - 1


class PresetError(ValueError):
    """A preset value is missing, of the wrong type or out of range (the key is named)."""


class Meta(tuple, GroupedMetadata):
    """Pydantic metadata given as one item: ``Annotated[int, Int(ge=1)]``."""


def _check(test: Callable[[Any], Any], what: str) -> AfterValidator:
    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(what)
        return value

    return AfterValidator(check)


def Rule(test: Callable[[Any], Any], what: str, *more: Any) -> Meta:  # noqa: N802 (a type's rule)
    """A strict value that ``test`` accepts (else refused with ``what``), after ``more``."""
    return Meta((Strict(), *more, _check(test, what)))


def Int(ge: int | None = None, le: int = MAX_INT) -> Meta:  # noqa: N802
    """A strict integer (``true`` is none) in ``[ge, le]``."""
    return Meta((Strict(), Interval(ge=ge, le=le)))


def Float(**bound: float) -> Meta:  # noqa: N802
    """A finite number within ``bound`` (``gt``, ``ge``, ``le``, ``lt``; said as ``must lie in
    (0.0, 1.0]``), an integer read as a float (TOML's ``1`` for ``1.0``: keys hash alike)."""
    ops = {"gt": operator.gt, "ge": operator.ge, "le": operator.le, "lt": operator.lt}
    g = bound.get
    low = f"({g('gt')}" if "gt" in bound else (f"[{g('ge')}" if "ge" in bound else "(-inf")
    high = f"{g('lt')})" if "lt" in bound else (f"{g('le')}]" if "le" in bound else "inf)")
    inside = lambda v: all(ops[k](v, b) for k, b in bound.items())  # noqa: E731
    return Rule(inside, f"must lie in {low}, {high}", AllowInfNan(False))


def Str(choices: Sequence[str] | None = None) -> Meta:  # noqa: N802
    """A non-empty string (one of ``choices`` when given)."""
    return Rule(lambda v: not choices or v in choices, f"must be one of {list(choices or [])}",
                MinLen(1))  # fmt: skip


def Items(*, allow_empty: bool = False) -> Meta:  # noqa: N802
    """A list (kept as a tuple) of distinct values, non-empty unless allowed."""
    distinct = lambda v: len(set(map(repr, v))) == len(v)  # noqa: E731
    return Meta((MinLen(0 if allow_empty else 1), _check(distinct, "must not repeat a value")))


class Given:
    """A ``dict`` field read through a section ``model`` and kept as a plain dict of the keys
    given (what job keys hash: a default left unset stays out of them)."""

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
                known = {"key": unknown[0], "known": sorted(cls.model_fields)}
                raise PydanticCustomError("unknown_key", "unknown key", known)
        return raw

    @classmethod
    def parse(cls, raw: Any, key: str = "") -> Self:
        """The table ``raw`` (at preset key ``key``) read, one already read as it is;
        :class:`PresetError` naming a key."""
        try:
            return raw if isinstance(raw, cls) else cls.model_validate(raw)
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
_WORDS = {"int_type": "must be an integer", "float_type": "must be a number",
          "bool_type": "must be true or false", "string_type": "must be a non-empty string",
          "string_too_short": "must be a non-empty string", "too_short": "must be a non-empty list",
          "tuple_type": "must be a list", "list_type": "must be a list",
          "dict_type": "must be a table", "model_type": "must be a table",
          "model_attributes_type": "must be a table", "finite_number": "must be a finite number",
          "greater_than_equal": "must be an integer >= {ge}",  # Int's bounds (Float says its own)
          "less_than_equal": "must be an integer <= {le}"}  # fmt: skip


def preset_error(err: ValidationError, key: str = "") -> PresetError:
    """The first error of ``err`` as ``preset key 'a.b[1]': what is allowed, got value``."""
    e = err.errors()[0]
    ctx, kind = e.get("ctx") or {}, e["type"]
    at = key
    for p in [*e["loc"], *([ctx["key"]] if ctx.get("key") else [])]:
        at += f"[{p}]" if isinstance(p, int) else f".{p}" if at else str(p)
    where = f"preset key {at or 'the preset'!r}"
    if kind == "unknown_key":
        return PresetError(f"{where} is unknown; known keys here: {ctx['known']}")
    if kind == "missing":
        return PresetError(f"{where} is missing")
    if kind == "preset":
        got = "" if ctx.get("value") is None else f", got {_short(ctx['value'])}"
        return PresetError(f"{where}: {ctx['what']}{got}")
    what = str(ctx["error"]) if kind == "value_error" else _WORDS.get(kind, e["msg"]).format(**ctx)
    return PresetError(f"{where}: {what}, got {_short(e['input'])}")
