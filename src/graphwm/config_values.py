"""The values of a preset table: pydantic checks types and structure, a :class:`Rule` says
what is allowed in the project's words, and :func:`preset_error` turns pydantic's first error
into a :class:`PresetError` naming the key, the value and what is allowed. The sections are
:mod:`graphwm.config`'s (and ``[downstream]``'s, :mod:`graphwm.downstream.section`)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationError, model_validator
from pydantic_core import PydanticCustomError, core_schema

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
