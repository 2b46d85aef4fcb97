"""Type checks of a model's hyperparameters before any layer is built: ``embed_dim=8.5`` or
``hidden_dim=True`` would otherwise fail deep inside a layer's constructor (issue 38)."""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from typing import Any

__all__ = ["check_config_types"]


#: what an annotated kind accepts: bool is no int here, an int is a float, numpy numbers count
#: as their Python kinds; other annotations (tuples, mappings) are the config's own business
_ACCEPTS = {type(None): type(None), bool: bool, int: numbers.Integral, float: numbers.Real,
            str: str}  # fmt: skip


def _accepts(kind: Any, value: Any) -> bool:
    want = _ACCEPTS.get(kind)
    return want is None or (
        isinstance(value, want) and (kind is bool or not isinstance(value, bool))
    )


def check_config_types(config: Any) -> None:
    """Raise ``TypeError`` naming the first field of the dataclass ``config`` whose value is
    not of its annotated type (``int``, ``float``, ``bool``, ``str`` or a union of them)."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        kind = hints.get(field.name, Any)
        value = getattr(config, field.name)
        union = isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
        options = typing.get_args(kind) if union else (kind,)
        if not any(_accepts(option, value) for option in options):
            names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
            raise TypeError(
                f"{type(config).__name__}.{field.name} must be {names.replace('NoneType', 'None')}"
                f", got {value!r} ({type(value).__name__})"
            )
